"""The GPU check's `rollouts` step: long greedy rollouts of the Carbon-3B-shaped model, alone
(one prompt, then a batch) and with a Carbon-500M-shaped draft (benchmark/generate.py does the
measuring; docs/generation.md reads the numbers). Both models have random weights, so the
acceptance rate measured is that of two unrelated models: the speed-up at a real draft's
acceptance is the arithmetic beside it, from the step times measured here."""

from __future__ import annotations

import torch

from carbon_vep.benchmark import generate
from carbon_vep.benchmark.gpu.workload import TOY_SHAPES, Model, Sizes, with_model
from carbon_vep.config.gpus import CARBON_SHAPES


def rollouts(model: Model, device: torch.device, sizes: Sizes, smoke: bool) -> dict:
    """The comparison of benchmark.generate, with a random draft of Carbon-500M's shape (the toy
    shape under --smoke) built beside the target and freed after."""
    loaded = model.loaded
    prompts = generate.random_prompts(
        sizes.rollout_batch, sizes.rollout_prompt_tokens, loaded.vocab.k
    )
    result: dict = {}

    def measure(draft: Model) -> None:
        result.update(
            generate.compare(
                loaded,
                draft.loaded,
                (model.name, draft.name),
                prompts,
                sizes.rollout_new_tokens,
                sizes.rollout_batch,
            )
        )

    shapes = TOY_SHAPES if smoke else CARBON_SHAPES
    with_model(loaded.tokenizer, loaded.vocab, device, "Carbon-500M", shapes, measure)
    return result
