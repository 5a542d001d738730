"""The demo model made to depend on its context, for tests that compare decoding loops.

The demo's tied embeddings make its greedy rollouts repeat the prompt's last k-mer whatever the
cache holds, so an equality between two loops would prove nothing there. Here the output layer
is its own random matrix and the attention 4x sharper (q and k scaled by 2).
"""

import torch

from carbon_vep.config.stages import ModelSettings
from carbon_vep.model.attention import LOWER_RIGHT_SDPA
from carbon_vep.model.loading import LoadedModel, load_model


def context_dependent(model_dir, attention: str | None = LOWER_RIGHT_SDPA) -> LoadedModel:
    """A fresh load of the demo model at `model_dir`, changed as the module docstring says (its
    own load: a static-cache call leaves transformers' `_previous_max_cache_length` on the
    model, which a session's shared one should not carry), with the attention a recovery job
    loads (`attention`; None: transformers' default)."""
    loaded = load_model(ModelSettings(str(model_dir), trust_remote_code=True), attention=attention)
    model = loaded.model
    weights = torch.randn(model.lm_head.weight.shape, generator=torch.Generator().manual_seed(11))
    model.lm_head.weight = torch.nn.Parameter(weights * 0.5, requires_grad=False)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(2)
            layer.self_attn.k_proj.weight.mul_(2)
    return loaded
