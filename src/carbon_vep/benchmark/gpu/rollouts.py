"""The GPU check's `rollouts` step: long greedy rollouts of the Carbon-3B-shaped model, alone
(one prompt, then a batch) and with a Carbon-500M-shaped draft (benchmark/generate.py does the
measuring; docs/generation.md reads the numbers). Both models have random weights, so the
acceptance rate measured is that of two unrelated models: the speed-up at a real draft's
acceptance is the arithmetic beside it, from the step times measured here."""

from __future__ import annotations

import gc

import torch

from carbon_vep.benchmark import generate
from carbon_vep.benchmark.gpu.workload import TOY_SHAPES, Model, Sizes, random_model
from carbon_vep.config.gpus import CARBON_SHAPES


def rollouts(model: Model, device: torch.device, sizes: Sizes) -> dict:
    loaded = model.loaded
    shapes = CARBON_SHAPES if device.type == "cuda" else TOY_SHAPES
    draft = random_model(
        "Carbon-500M",
        shapes["Carbon-500M"],
        loaded.tokenizer,
        loaded.vocab,
        device,
        loaded.model.dtype,
    )
    try:
        prompts = generate.random_prompts(
            sizes.rollout_batch, sizes.rollout_prompt_tokens, loaded.vocab.k
        )
        return generate.compare(
            loaded,
            draft.loaded,
            (model.name, draft.name),
            prompts,
            sizes.rollout_new_tokens,
            sizes.rollout_batch,
        )
    finally:
        del draft
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
