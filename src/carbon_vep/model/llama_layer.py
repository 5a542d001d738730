"""A Llama decoder layer's forward in its three steps, for the passes that run a layer their own
way (model.last_layer: the kept positions; model.compiled_layers: the steps around attention
compiled).

transformers' `LlamaDecoderLayer.forward` (5.24, models/llama/modeling_llama.py) is: the input
RMSNorm; the query, key and value projections, shaped [B, heads, L, d], with the rotary
embedding on queries and keys; the cache's update; the attention function of the config's
implementation; the output projection and the residual; the post-attention RMSNorm, the MLP and
the residual. `attention_inputs`, `attend` and `output_and_mlp` are those steps in that order,
calling the layer's own modules and transformers' own functions, so they hold no weights and
no arithmetic of their own.

Carbon and GENERator-v2 are Llama models; a layer of another class (remote code, a test double)
is run whole by its own forward (`is_llama_layer`).
"""

from __future__ import annotations

from typing import Any

import torch


def is_llama_layer(layer: Any) -> bool:
    """Whether `layer` is transformers' Llama decoder layer, whose steps these are."""
    return (
        type(layer).__name__ == "LlamaDecoderLayer"
        and type(getattr(layer, "self_attn", None)).__name__ == "LlamaAttention"
    )


def heads(projected: torch.Tensor, head_dim: int) -> torch.Tensor:
    """[B, L, heads x d] -> [B, heads, L, d], as LlamaAttention shapes its projections."""
    return projected.view(*projected.shape[:-1], -1, head_dim).transpose(1, 2)


def attention_inputs(
    layer: Any, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The queries, keys and values of `hidden` ([B, L, H]), rotary embedding applied."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    attention = layer.self_attn
    normed = layer.input_layernorm(hidden)
    queries = heads(attention.q_proj(normed), attention.head_dim)
    keys = heads(attention.k_proj(normed), attention.head_dim)
    values = heads(attention.v_proj(normed), attention.head_dim)
    queries, keys = apply_rotary_pos_emb(queries, keys, cos, sin)
    return queries, keys, values


def attend(
    layer: Any,
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: Any,
    cache: Any,
    kwargs: dict[str, Any],
) -> torch.Tensor:
    """The cache's update (where there is a cache), then attention as the config's
    implementation computes it: [B, q, heads x d]."""
    attention = layer.self_attn
    if cache is not None:
        keys, values = cache.update(keys, values, attention.layer_idx, kwargs=kwargs)
    out, _ = attention_function(attention.config._attn_implementation)(
        attention, queries, keys, values, mask, dropout=0.0, scaling=attention.scaling, **kwargs
    )
    return out.reshape(*out.shape[:2], -1).contiguous()


def output_and_mlp(layer: Any, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """The output projection of `attended` plus the residual, then the MLP's half of the layer."""
    hidden = residual + layer.self_attn.o_proj(attended)
    return hidden + layer.mlp(layer.post_attention_layernorm(hidden))


def attention_function(implementation: str) -> Any:
    """transformers' attention function for an `attn_implementation` (eager for an unknown
    name, as LlamaAttention chooses)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama.modeling_llama import eager_attention_forward

    return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
