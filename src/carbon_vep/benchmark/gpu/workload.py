"""What the GPU check runs on: the sizes (full, and the CPU smoke's), random-weight models with
Carbon's shapes (toy shapes under --smoke), and a synthetic genome with its workloads."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import torch

from carbon_vep.benchmark.synthetic import random_acgt, write_fasta
from carbon_vep.config.gpus import (
    profile_batch_tokens,
)
from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import (
    EvaluationSettings,
    MetricSettings,
    ModelSettings,
)
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import LoadedModel

K = 6
NO_BOOTSTRAP = MetricSettings(evaluation=EvaluationSettings(bootstrap=0))
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
    """Workload sizes. Full: each timed run of a Carbon-3B path is ~1-2 s on an H100 at 50% of
    its bf16 peak (docs/gpu.md, "Time budget"); smoke: seconds on a CPU in all."""

    sites: int = 16  # SNV sites (3 variants each) for centered, fns, nexttoken
    centered_bp: int = 8192
    nexttoken_bp: int = 24_000
    tile_bp: int = 49_146
    min_context: int = 24_000
    scan_tiles: int = 16
    scan_batch_tiles: int = 4  # several batches a chunk: the device works one batch ahead
    prompts: int = 16
    prompt_bp: int = 6144
    pairs: int = 32
    pair_bp: int = 3000
    repeats: int = 3
    warmup: int = 1  # untimed runs first (kernels chosen, caches and the allocator warm)
    compare_sites: int = 8
    ablation_windows: int = 32
    known_answer_steps: int = 150
    rollout_prompt_tokens: int = 2048
    rollout_new_tokens: int = 512
    rollout_batch: int = 64


SMOKE = Sizes(
    sites=2,
    centered_bp=600,
    nexttoken_bp=600,
    tile_bp=1200,
    min_context=600,
    scan_tiles=3,
    scan_batch_tiles=1,
    prompts=2,
    prompt_bp=120,
    pairs=2,
    pair_bp=120,
    repeats=1,
    warmup=0,
    compare_sites=2,
    ablation_windows=4,
    known_answer_steps=20,
    rollout_prompt_tokens=64,
    rollout_new_tokens=24,
    rollout_batch=2,
)


@dataclass
class Model:
    name: str
    shape: dict[str, int]
    loaded: LoadedModel
    batch_tokens: int

    def engine(self, upcast: bool = False, batch_tokens: int | None = None) -> Engine:
        m = self.loaded
        return Engine(
            m.model,
            m.vocab,
            m.device,
            batch_size=8,
            batch_tokens=self.batch_tokens if batch_tokens is None else batch_tokens,
            upcast_output_layer=upcast,
        )


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
    loaded = LoadedModel(model, tokenizer, vocab, device, spec)
    # what the GPU profiles set for a GPU of this memory (config/gpus.py); a toy CPU budget
    total = torch.cuda.mem_get_info(device)[1] if device.type == "cuda" else 0
    tokens = profile_batch_tokens(total / 1e9) if total else 4096
    return Model(name, shape, loaded, tokens)


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


@dataclass
class Inputs:
    """A synthetic genome (random ACGT, numpy seed 0) and the workloads on it."""

    fasta: Path
    sites: list[int]  # 1-based SNV sites on `panel`, each with >= nexttoken_bp left context
    scan_bp: int
    sizes: Sizes
    genome: str = field(repr=False, default="")

    def snvs(self, reference, n: int | None = None) -> pl.DataFrame:
        rows = []
        for pos in self.sites[:n]:
            ref = reference.fetch("panel", pos - 1, pos)
            rows += [("panel", pos, ref, alt) for alt in "ACGT" if alt != ref]
        return pl.DataFrame(rows, schema=["ref_chrom", "pos", "ref", "alt"], orient="row")

    def shard(self, reference, recipe: str, window_bp: int, n: int | None = None):
        return RECIPES[recipe].add_windows(self.snvs(reference, n), reference.lengths, window_bp)


def make_inputs(folder: Path, sizes: Sizes) -> Inputs:
    rng = np.random.default_rng(0)
    first = sizes.nexttoken_bp + 100
    spacing = max(sizes.centered_bp // 8, 60)
    panel_bp = first + sizes.sites * spacing + sizes.centered_bp
    scan_bp = sizes.min_context + sizes.scan_tiles * (sizes.tile_bp - sizes.min_context)
    bases = np.array(list("ACGT"))
    genome = "".join(bases[rng.integers(0, 4, panel_bp)])
    fasta = write_fasta(
        folder / "genome.fa",
        {
            "panel": genome,
            "scan": "".join(bases[rng.integers(0, 4, scan_bp)]),
        },
    )
    sites = [first + i * spacing for i in range(sizes.sites)]
    return Inputs(fasta, sites, scan_bp, sizes, genome)


def haystack_fasta(work: Path, bp: int) -> Path:
    """A random ACGT contig `hay` of `bp` bases (numpy seed 2) for the Genomic-NIAH cells of
    the niah and vllm steps; written once a size and shared."""
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
