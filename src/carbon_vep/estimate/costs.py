"""What one item of each kind of work costs a model, for the estimate: the tokens it puts through
the model and their matmul FLOPs (config.gpus: 2 x the body's parameters a token, QK^T and AV
over the tokens before it, 2 x hidden size for each output-layer row at each scored position),
GPU seconds at ASSUMED_EFFICIENCY of a GPU class's bf16 peak, and the rates the GPU check
measured on an H100 for the same path. Arithmetic on shapes, not a measurement. No torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from carbon_vep.config.gpus import (
    ASSUMED_EFFICIENCY,
    CARBON_SHAPES,
    CARBON_VOCAB,
    GPU_CLASSES,
    MODEL_SHAPES,
    attention_flops,
    body_flops,
    kv_bytes_per_token,
    model_shape,
    output_flops,
    weight_bytes,
)
from carbon_vep.config.stages import (
    ModelSettings,
    PerturbationSettings,
    RecipeSettings,
    RecoverySettings,
)
from carbon_vep.config.tasks import PERTURBATION, SEQUENCE_RECOVERY

K = 6  # bases a token
DNA_ROWS = 4**K
_SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


@dataclass(frozen=True)
class Shape:
    name: str  # a Carbon size, or the model folder whose config.json gave it
    dims: dict[str, int] | None  # None: not estimated
    source: str


@dataclass(frozen=True)
class Decode:
    """An item's greedy steps after its prefill (whose pass gives the first new token): `steps`
    one-token passes, each reading `context` tokens of the item's cache on average (a static
    cache: all its slots), `rows` items a batch (they share each step's read of the weights),
    the steps' FLOPs, and the job's `decode_cache`."""

    steps: int
    context: float
    rows: int
    flops: float
    cache: str

    def batches(self, items: int) -> int:
        """The batches `items` items are decoded in."""
        return -(-items // self.rows)


@dataclass(frozen=True)
class Work:
    tokens: float  # tokens through the model for one item
    flops: float  # their matmul FLOPs (a generation's decode steps included)
    what: str  # the arithmetic's assumption, as the estimate prints it
    path: str | None = None  # the GPU check's name of the same path (for a measured rate)
    decode: Decode | None = None  # a generation's steps after the prefill

    @property
    def prefill_flops(self) -> float:
        """The FLOPs before the decode steps (all of them without a decode)."""
        return self.flops - (self.decode.flops if self.decode else 0.0)


def shape_of(model: ModelSettings) -> Shape:
    """A local model folder's own config.json; else model_shape's: a model the run builds
    (build_demo) at the demo model's shape, a Hub id at the Carbon size its name says."""
    config = os.path.join(model.path, "config.json")
    if os.path.isfile(config):
        return _local_shape(model.path, config)
    name = model_shape(model.path, model.build_demo)
    dims = {**MODEL_SHAPES[name], "vocab_size": CARBON_VOCAB}
    if model.build_demo:
        return Shape(name, dims, "build_demo: the demo model's shape, built by the run")
    if name.split("-")[1].lower() in model.path.lower():
        return Shape(name, dims, "its name")
    # a name that says no Carbon size is reckoned as Carbon-3B, and no measured rate applies
    return Shape(f"{name}, assumed", dims, "assumed: its name says no Carbon size")


def _local_shape(folder: str, config: str) -> Shape:
    with open(config) as handle:
        raw = json.load(handle)
    if not all(key in raw for key in _SHAPE_KEYS):
        return Shape(os.path.basename(folder), None, f"{config}: not a Llama-style config")
    dims = {key: int(raw[key]) for key in _SHAPE_KEYS}
    dims["num_key_value_heads"] = int(raw.get("num_key_value_heads") or dims["num_attention_heads"])
    dims["head_dim"] = int(
        raw.get("head_dim") or dims["hidden_size"] // dims["num_attention_heads"]
    )
    dims["vocab_size"] = int(raw.get("vocab_size") or CARBON_VOCAB)
    same = [n for n, s in MODEL_SHAPES.items() if all(dims[k] == v for k, v in s.items())]
    return Shape(same[0] if same else os.path.basename(folder), dims, f"{config}")


def pass_flops(
    dims: Mapping[str, int],
    tokens: float,
    rows: int,
    *,
    positions: float | None = None,
    context: float = 0,
) -> float:
    """FLOPs of `tokens` tokens after `context` cached ones (each attends, on average, to the
    context and half the new tokens), with `rows` output rows at `positions` positions (every
    token by default)."""
    attention = attention_flops(dims) * tokens * (context + tokens / 2)
    scored = tokens if positions is None else positions
    return tokens * body_flops(dims) + attention + scored * output_flops(dims, rows)


def gpu_seconds(flops: float, gpu: str) -> float:
    """Seconds of `flops` at ASSUMED_EFFICIENCY of the GPU class's bf16 peak."""
    return flops / (GPU_CLASSES[gpu].bf16_tflops * 1e12 * ASSUMED_EFFICIENCY)


def decode_read_bytes(decode: Decode, dims: Mapping[str, int]) -> float:
    """Bytes an item's decode steps read: each step reads every weight once for its batch (an
    item's share: 1 / rows) and the item's own KV cache."""
    weights = weight_bytes(dims, vocab=dims.get("vocab_size", CARBON_VOCAB)) / decode.rows
    return decode.steps * (weights + kv_bytes_per_token(dims) * decode.context)


def item_seconds(work: Work, dims: Mapping[str, int], gpu: str) -> float:
    """Seconds of an item on a GPU class (arithmetic): its FLOPs at ASSUMED_EFFICIENCY of the
    bf16 peak; a generation's decode steps at the larger of that and the memory floor (what
    they read at the data sheet's bandwidth: a step is memory-bound at small batches)."""
    decode = work.decode
    if decode is None:
        return gpu_seconds(work.flops, gpu)
    bandwidth = GPU_CLASSES[gpu].memory_tb_s
    floor = decode_read_bytes(decode, dims) / (bandwidth * 1e12) if bandwidth else 0.0
    return gpu_seconds(work.prefill_flops, gpu) + max(gpu_seconds(decode.flops, gpu), floor)


def _rows(normalization: str, dims: Mapping[str, int]) -> int:
    return DNA_ROWS if normalization == "dna_block" else dims["vocab_size"]


# ---- variant panels ------------------------------------------------------------------------
def panel_work(scoring: RecipeSettings, dims: Mapping[str, int]) -> Work | None:
    """A variant's cost under its dataset's recipe (None: scored by lookup, no model). Each
    variant is taken as its own site: alternates of one site share the reference window (and a
    next-token context), so a panel of several alternates a site costs less."""
    recipe = scoring.definition
    norm = scoring.resolved_normalization
    window = scoring.window_bp or recipe.default_window_bp
    if recipe.likelihood in ("token", "bp"):
        return _window_work(scoring, dims, window // K + 1, norm)
    if recipe.likelihood == "next_base":
        tokens = window // K + 1
        flops = pass_flops(dims, tokens, _rows(norm, dims), positions=1)
        what = f"{tokens:,}-token left context ({window:,} bp), {norm} at its end"
        return Work(tokens, flops, what, f"nexttoken {norm}")
    if recipe.likelihood == "scan":
        tokens = scoring.tiles.tile_bp // K + 1
        what = f"<= one {tokens:,}-token tile a variant (nearby variants share tiles)"
        return Work(tokens, pass_flops(dims, tokens, DNA_ROWS), what)
    return None


def _window_work(scoring: RecipeSettings, dims: Mapping[str, int], tokens: int, norm: str) -> Work:
    """centered / fns: the reference window and the alternate's; with prefix sharing the
    alternate runs only from the variant (half the window) off the reference's cache."""
    rows = _rows(norm, dims)
    whole = pass_flops(dims, tokens, rows)
    if scoring.share_prefix:
        half = tokens / 2
        flops, count = whole + pass_flops(dims, half, rows, context=half), 1.5
        how = f"ref window of {tokens:,} tokens + alt's {tokens // 2:,} after the variant"
    else:
        flops, count, how = 2 * whole, 2.0, f"ref + alt windows of {tokens:,} tokens"
    views = 2 if scoring.rc_average else 1
    what = f"{how}, {norm}" + (", x 2 (reverse complement)" if views == 2 else "")
    path = f"{scoring.recipe} {norm}" + (" shared" if scoring.share_prefix else "")
    return Work(views * count * tokens, views * flops, what, path)


# ---- suite tasks ---------------------------------------------------------------------------
def recovery_work(
    settings: RecoverySettings, model: ModelSettings, dims: Mapping[str, int], bp: int | None
) -> Work:
    """A prompt of at most max_prompt_bp (whole 6-mers, after <dna>), its pass giving the first
    new token, then new_tokens - 1 greedy steps off its cache, each over the whole vocabulary,
    in batches of what the model's batch settings hold (one prompt at a time with a draft)."""
    prompt = min(bp or settings.max_prompt_bp, settings.max_prompt_bp) // K + 1
    new = settings.new_tokens
    steps = new - 1  # the prefill's pass gives the first new token
    step_flops = pass_flops(dims, steps, dims["vocab_size"], context=prompt + 1)
    flops = pass_flops(dims, prompt, dims["vocab_size"], positions=1) + step_flops
    rows = recovery_batch_rows(model, prompt + new)
    # a static cache (static, captured) is read whole every step, its empty slots masked (the
    # kernel that takes the mask reads them too); a dynamic one as far as it is filled
    static = settings.decode_cache != "dynamic"
    read = prompt + new - 1 if static else prompt + 1 + steps / 2
    decode = Decode(steps, read, rows, step_flops, settings.decode_cache)
    what = f"<= {prompt:,}-token prompt + {new} generated, {rows:,} a batch"
    path = "recovery token" if settings.decoder == "token" else None  # the one measured
    return Work(prompt + new, flops, what, path, decode)


def recovery_batch_rows(model: ModelSettings, tokens: int) -> int:
    """Prompts a recovery batch holds, each of `tokens` (prompt and new tokens): as many as
    fit in batch_tokens when set, else batch_size; one with a draft (suite.rollouts)."""
    if model.draft_model:
        return 1
    return max(model.batch_tokens // tokens, 1) if model.batch_tokens else model.batch_size


def perturbation_work(
    settings: PerturbationSettings, model: ModelSettings, dims: Mapping[str, int], bp: int | None
) -> Work | None:
    """Both sequences of a pair, each one pass (None: their length is unknown)."""
    if bp is None:
        return None
    tokens = bp // K + 1
    norm = settings.resolved_normalization
    what = f"2 x <= {tokens:,} tokens (original, perturbed), {norm}"
    path = f"perturbation {norm}" if settings.scoring == "token" else None
    return Work(2 * tokens, 2 * pass_flops(dims, tokens, _rows(norm, dims)), what, path)


# an item of each task kind (config.tasks): (its settings, the model's settings and dims, its
# bp if known) -> Work
TASK_WORK: dict[str, Callable[[Any, ModelSettings, Mapping[str, int], int | None], Work | None]] = {
    SEQUENCE_RECOVERY.name: recovery_work,
    PERTURBATION.name: perturbation_work,
}


# ---- measured on an H100 -------------------------------------------------------------------
# The GPU check on an H100 80GB HBM3, 2026-11-26 (docs/benchmarks.md, run 1; random weights with
# Carbon's shapes, bf16, batch_tokens 131,072): tokens/s of each path, by shape
MEASURED_H100_TOKENS_S: dict[tuple[str, str], float] = {
    ("Carbon-3B", "centered full_vocab shared"): 34_203,
    ("Carbon-3B", "centered full_vocab"): 55_609,
    ("Carbon-3B", "centered dna_block shared"): 37_397,
    ("Carbon-3B", "fns dna_block shared"): 32_776,
    ("Carbon-3B", "nexttoken acgt_strings"): 63_795,
    ("Carbon-3B", "nexttoken dna_block"): 64_035,
    ("Carbon-3B", "recovery token"): 47_936,
    ("Carbon-3B", "perturbation full_vocab"): 55_669,
    ("Carbon-500M", "centered full_vocab shared"): 33_118,
    ("Carbon-500M", "centered full_vocab"): 166_657,
    ("Carbon-500M", "centered dna_block shared"): 25_342,
    ("Carbon-500M", "fns dna_block shared"): 29_683,
    ("Carbon-500M", "nexttoken acgt_strings"): 263_281,
    ("Carbon-500M", "nexttoken dna_block"): 266_731,
    ("Carbon-500M", "recovery token"): 78_297,
    ("Carbon-500M", "perturbation full_vocab"): 110_815,
}
# scan-chunk with the default tiles (49,146 bp, min_context 24,000): scored bases/s
MEASURED_H100_SCAN_BASES_S = {"Carbon-3B": 180_543, "Carbon-500M": 646_185}
# Genomic-NIAH on our engine, s a row (generation and both likelihoods included), by shape and
# context: (in prefill chunks of 8,192 under the lower-right causal bias, model.attention; the
# whole prompt at once). Carbon-3B: run 5, 2-4 rows a context; Carbon-8B: run 7, one row
# (docs/gpu-results/2026-11-27-h100-run{5,7}-*)
MEASURED_H100_NIAH_S = {
    "Carbon-3B": {32_768: (1.21, 1.01), 65_536: (3.53, 2.76), 131_072: (11.72, 8.95)},
    "Carbon-8B": {65_536: (5.48, 3.87), 131_072: (17.75, 12.08)},
}


# The recovery rate above: 16 prompts of 1,029 tokens and 5 new tokens in one batch, so its 4
# decode steps (the prefill gives the first) are in it; longer rollouts pay each further step.
MEASURED_RECOVERY_STEPS = 4
# A decode step of transformers' `generate` on its dynamic cache (`decode_cache: dynamic`), the
# steps' median on an H100 (2026-11-26, run 4: 88.4 ms at batch 64, 2,048-token prompts;
# docs/generation.md): host-bound (6.9 ms of GPU work against ~30 ms of host time at batch 1),
# so about the same from batch 1 to 64. Measured on Carbon-3B's shape only.
MEASURED_H100_DECODE_STEP_S = {"Carbon-3B": 8192 / 723.7 / 128}
# the host's time a step, which a time limit takes for every shape, class and cache (Carbon-500M's
# step alone at batch 1 measured as dear: 68.1 ms, docs/generation.md)
HOST_BOUND_STEP_S = MEASURED_H100_DECODE_STEP_S["Carbon-3B"]


def recovery_job_seconds(work: Work, dims: Mapping[str, int], items: int, gpu: str) -> float:
    """A recovery job's seconds, for its time limit: the larger of its arithmetic
    (item_seconds) and its prefills' arithmetic with every decode step at the step measured on
    an H100 (host-bound, so the host's cost: taken for every shape, class and cache, a limit
    errs long)."""
    arithmetic = items * item_seconds(work, dims, gpu)
    decode = work.decode
    if decode is None:
        return arithmetic
    host = decode.batches(items) * decode.steps * HOST_BOUND_STEP_S
    return max(arithmetic, items * gpu_seconds(work.prefill_flops, gpu) + host)


def measured_work_hours(shape: str, work: Work, items: int) -> float | None:
    """H100-hours of `items` at the check's measured tokens/s for the same path, if measured;
    a generation's steps beyond the measured ones at the measured step (dynamic cache only:
    the static and captured caches are not measured on a GPU)."""
    rate = MEASURED_H100_TOKENS_S.get((shape, work.path or ""))
    if rate is None:
        return None
    extra = work.decode.steps - MEASURED_RECOVERY_STEPS if work.decode else 0
    hours = items * (work.tokens - max(extra, 0)) / rate / 3600  # the part the rate covers
    if extra <= 0:
        return hours
    step = MEASURED_H100_DECODE_STEP_S.get(shape)
    if step is None or work.decode.cache != "dynamic":
        return None
    return hours + work.decode.batches(items) * extra * step / 3600


def measured_niah_hours(shape: str, ctx: int, prefill_chunk: int, rows: int) -> float | None:
    """H100-hours of `rows` NIAH rows of this shape at `ctx`, as measured (chunked or whole)."""
    measured = MEASURED_H100_NIAH_S.get(shape, {})
    if ctx not in measured:
        return None
    if prefill_chunk not in (0, 8192) and prefill_chunk < ctx:
        return None  # another chunk size was not measured
    chunked, whole = measured[ctx]
    return rows * (chunked if 0 < prefill_chunk < ctx else whole) / 3600


# ---- a model job's start-up, measured on an H200 -------------------------------------------
# The GPU check's product step on an H200 (run 10, 2026-11-28; docs/gpu-results/2026-11-28-h200-
# run10-product-official/gpu_check.json, `product.rules`): its 10 model jobs, every model rule,
# of a Carbon-3B-shaped bf16 checkpoint (6.90 GB) on that machine's local disk. Of their
# processes' 199.77 s, 65.06 s came after the load (the work: tokens / tokens_per_s); before it,
# 39.8 s loading the weights and 94.91 s the rest (the interpreter, the imports, CUDA's start,
# reading the inputs). Per job: 9.49 s, and the weights at 1.73 GB/s.
MEASURED_H200_JOBS = 10
MEASURED_H200_BEFORE_LOAD_S = 199.77 - 65.06 - 39.8
MEASURED_H200_LOAD_GB_S = weight_bytes(CARBON_SHAPES["Carbon-3B"]) / 1e9 * MEASURED_H200_JOBS / 39.8


def job_start_seconds(dims: Mapping[str, int]) -> float:
    """A model job's seconds before its work: the measured start, and its model's weights
    (bf16) at the measured load rate. A cluster's shared filesystem may load slower."""
    weights_gb = weight_bytes(dims, vocab=dims.get("vocab_size", CARBON_VOCAB)) / 1e9
    return MEASURED_H200_BEFORE_LOAD_S / MEASURED_H200_JOBS + weights_gb / MEASURED_H200_LOAD_GB_S
