"""What the GPU check builds for its jobs: the sizes beside the product's (full, and the CPU
smoke's), random-weight models with Carbon's shapes (toy shapes under --smoke) saved as a user's
checkpoint, and inputs cut from a synthetic genome (the product's recovery prompts and
perturbation pairs, the vllm step's NIAH haystack)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from carbon_vep.benchmark.synthetic import random_acgt, write_fasta
from carbon_vep.config.stages import ModelSettings
from carbon_vep.model.loading import LoadedModel

# toy shapes for --smoke: the same code paths, sizes a CPU runs in seconds
TOY_SHAPES = {
    "Carbon-500M": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    ),
    "Carbon-3B": dict(
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=12,
    ),
    "Carbon-8B": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    ),
}


@dataclass(frozen=True)
class Sizes:
    """The sizes of the steps that are not the product's workflow (product_setup.ProductSizes):
    the rollouts' prompts and the known-answer model's training. Full: the GPU's; smoke: seconds
    on a CPU."""

    known_answer_steps: int = 150
    rollout_prompt_tokens: int = 2048
    rollout_new_tokens: int = 512
    rollout_batch: int = 64


SMOKE = Sizes(
    known_answer_steps=20,
    rollout_prompt_tokens=64,
    rollout_new_tokens=24,
    rollout_batch=2,
)


@dataclass
class Model:
    name: str
    loaded: LoadedModel


def random_model(
    name: str, shape: dict[str, int], tokenizer, vocab, device, dtype, positions: int = 32_768
) -> Model:
    """A Llama with this shape and Carbon's vocabulary, random weights (seeded), built on the
    device in `dtype` (no float32 copy on the host); `positions`: its max_position_embeddings
    (Carbon's native 32,768 by default)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=positions,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0},
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )
    previous = torch.get_default_dtype()
    torch.manual_seed(0)
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(previous)
    spec = ModelSettings(path=f"random:{name}", dtype=_DTYPE_NAMES[dtype], device=str(device))
    return Model(name, LoadedModel(model, tokenizer, vocab, device, spec))


def save_checkpoint(model: Model, folder: Path) -> Path:
    """The model and its tokenizer as a local checkpoint (`save_pretrained`) that the jobs load
    as a user's checkpoint is loaded."""
    model.loaded.model.save_pretrained(folder)
    model.loaded.tokenizer.save_pretrained(folder)
    return folder


def with_model(
    tokenizer,
    vocab,
    device: torch.device,
    name: str,
    shapes: dict,
    action: Callable[[Model], None],
    positions: int = 32_768,
) -> None:
    """`action` on the random-weight model of this name (`positions`: random_model's), built on
    the device and freed after (no reference outlives this call, so the next model has the
    memory)."""
    model = random_model(name, shapes[name], tokenizer, vocab, device, BF16, positions)
    try:
        action(model)
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32"}
BF16 = torch.bfloat16


def haystack_fasta(work: Path, bp: int) -> Path:
    """A random ACGT contig `hay` of `bp` bases (numpy seed 2) for the Genomic-NIAH cells of
    the vllm step; written once a size and shared."""
    path = work / f"haystack_{bp}.fa"
    if not path.exists():
        rng = np.random.default_rng(2)
        write_fasta(path, {"hay": random_acgt(bp, rng)})
    return path


def recovery_rows(genome: str, sites: list[int], prompts: int, prompt_bp: int) -> list[dict]:
    """`prompts` prompts of `prompt_bp` bases ending at the sites, each with the next 30 bp as
    its label (more prompts than sites: shifted copies, 6 bp a row further on)."""
    ends = [sites[i] if i < len(sites) else sites[i % len(sites)] + 6 * i for i in range(prompts)]
    return [{"sequence": genome[p - prompt_bp : p], "label": genome[p : p + 30]} for p in ends]


def pair_rows(
    genome: str, sites: list[int], pairs: int, pair_bp: int, rng: np.random.Generator
) -> list[dict]:
    """`pairs` perturbation pairs of `pair_bp` bases around the sites: the original, and the
    same with its middle 48 bp shuffled (`rng`)."""
    rows = []
    for i in range(pairs):
        start = sites[i % len(sites)] - pair_bp // 2 + 6 * i
        original = genome[start : start + pair_bp]
        middle = len(original) // 2
        shuffled = "".join(rng.permutation(list(original[middle - 24 : middle + 24])))
        changed = original[: middle - 24] + shuffled + original[middle + 24 :]
        rows.append({"original_sequence": original, "sequence": changed})
    return rows
