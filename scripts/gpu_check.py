"""Every GPU measurement in one run: `make gpu-check` (or `python scripts/gpu_check.py --out DIR`).

On the device it finds (CUDA when there is one; `--smoke`: the CPU at toy sizes, what the test
suite runs), in one process and within `--budget-s` (420 s by default, sized for 8 minutes on an
H100 with start-up included; docs/gpu.md has the arithmetic):

1. the bf16 matmul peak of this device, measured (square 8,192 matmuls);
2. random-weight models with Carbon-3B's and Carbon-500M's exact shapes (no download), bf16,
   through the package's own code on a synthetic genome: `score` centered (full_vocab with and
   without prefix sharing, dna_block), fns, nexttoken (acgt_strings, dna_block), the genome
   `scan-chunk`, sequence recovery and perturbation pairs. Per path: tokens/s, bp/s (bases
   through the model), variants/s (SNVs/s for the scan, prompts/s, pairs/s), the fraction of
   the measured peak (matmul FLOPs the path must do: body, attention, output rows used),
   peak allocated memory; for the scan the share of wall time outside the forward pass and the
   device's idle share while the host builds and writes rows;
3. each GPU cost the code removed, before and after on the same inputs (the loops as they were
   live in tests/support/naive.py): the attention mask on equal-length batches, a host read per
   item, writing on the scan's thread, per-tile copies; and what `upcast_output_layer` costs;
   host synchronisations per run counted by CUDA's sync debug mode;
4. bf16 against float32 on the same inputs and weights (Spearman of the scores, max and median
   absolute difference of the raw log-likelihoods, with and without upcast_output_layer), and
   the AUROC of a trained known-answer model (tests/support/known_answer.py) in each;
5. torch-profiler top-10 tables of the Carbon-3B centered and scan paths.

Writes `gpu_check.json`, `gpu_check.md` (a section for docs/benchmarks.md) and the profiler
tables under `--out`, after every step (a run cut short keeps what it measured).

Usage: python scripts/gpu_check.py --out DIR [--smoke] [--budget-s 420] [--device cuda]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STARTED = time.monotonic()  # the budget counts the imports and CUDA's start-up too

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loops as they were, the known-answer model
from support import known_answer, naive  # noqa: E402
from support.files import write_fasta  # noqa: E402
from support.host_reads import HostReads  # noqa: E402

from carbon_vep.config.gpus import (  # noqa: E402
    CARBON_SHAPES,
    attention_flops,
    body_flops,
    output_flops,
    profile_batch_tokens,
)
from carbon_vep.config.recipes import RECIPES  # noqa: E402
from carbon_vep.config.stages import (  # noqa: E402
    EvaluationSettings,
    LabelSettings,
    MetricSettings,
    ModelSettings,
    PanelSettings,
    PerturbationSettings,
    RecipeSettings,
    RecoverySettings,
    ScanChunkSettings,
    TileSettings,
)
from carbon_vep.evaluate.metrics import vep_metrics  # noqa: E402
from carbon_vep.genome.reference import open_reference  # noqa: E402
from carbon_vep.genome.windows import unique_variants  # noqa: E402
from carbon_vep.model.demo import make_tokenizer  # noqa: E402
from carbon_vep.model.engine import Engine  # noqa: E402
from carbon_vep.model.loading import LoadedModel, load_model  # noqa: E402
from carbon_vep.model.tokens import dna_vocab  # noqa: E402
from carbon_vep.scan.outputs import BaseWriter  # noqa: E402
from carbon_vep.scan.plan import chunk_pieces, plan_scan  # noqa: E402
from carbon_vep.scan.tiles import scan_chunk, scan_region  # noqa: E402
from carbon_vep.scoring.merge import merge_scores  # noqa: E402
from carbon_vep.scoring.shard import score_shard  # noqa: E402
from carbon_vep.suite.perturbation import score_pairs  # noqa: E402
from carbon_vep.suite.recovery import recover  # noqa: E402
from carbon_vep.variants.ingest import ingest_panel  # noqa: E402

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
)


# ---- clocks, budget, counters --------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """Wall seconds of `run`, the device drained before and after reading the clock."""
    sync(device)
    began = time.perf_counter()
    out = run()
    sync(device)
    return time.perf_counter() - began, out


class Budget:
    def __init__(self, seconds: float) -> None:
        self.seconds, self.start = seconds, STARTED
        self.skipped: list[str] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def allows(self, step: str, needs_s: float) -> bool:
        if self.seconds - self.elapsed() >= needs_s:
            return True
        self.skipped.append(
            f"{step} (needs ~{needs_s:.0f} s, {self.seconds - self.elapsed():.0f} s left)"
        )
        print(f"[gpu-check] skipped, time budget: {step}", file=sys.stderr)
        return False


class BodyCounter:
    """Tokens through the model's body and the attention FLOPs they cost (a forward pre-hook:
    engine and `generate` both call the decoder)."""

    def __init__(self, body: torch.nn.Module, shape: dict[str, int]) -> None:
        self.tokens, self.attention_flops = 0, 0.0
        self.per_pair = attention_flops(shape)
        body.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids")
        if ids is None:
            return
        batch, length = ids.shape
        cache = kwargs.get("cache")
        past = cache.get_seq_length() if cache is not None else 0
        self.tokens += batch * length
        self.attention_flops += self.per_pair * batch * length * (past + (length + 1) / 2)

    def reset(self) -> tuple[int, float]:
        out = (self.tokens, self.attention_flops)
        self.tokens, self.attention_flops = 0, 0.0
        return out


def host_syncs(run: Callable[[], Any], device: torch.device) -> tuple[int, str]:
    """Host synchronisations during `run`: CUDA's sync debug mode on a GPU; on a CPU (nothing
    waits there), the operations that would wait (support/host_reads.py)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught), "CUDA sync debug mode"
    with HostReads() as reads:
        run()
    return reads.total, "host reads counted on CPU"


def peak_memory_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def bf16_peak_tflops(device: torch.device, n: int, iters: int) -> float:
    """Dense bf16 matmul throughput of this device: the median of 3 timed runs of `iters`
    n x n x n matmuls after a warm-up, the device drained around each clock read."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(max(3, iters // 5)):
        torch.matmul(a, b, out=out)
    rates = []
    for _ in range(3):
        seconds, _ = timed(lambda: [torch.matmul(a, b, out=out) for _ in range(iters)], device)
        rates.append(2 * n**3 * iters / seconds / 1e12)
    return statistics.median(rates)


# ---- models and inputs ---------------------------------------------------------------------------
@dataclass
class Model:
    name: str
    shape: dict[str, int]
    loaded: LoadedModel
    counter: BodyCounter
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


def random_model(name: str, shape: dict[str, int], tokenizer, vocab, device, dtype) -> Model:
    """A Llama with this shape and Carbon's vocabulary, random weights (seeded), built on the
    device in `dtype` (no float32 copy on the host)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=32_768,  # Carbon's native context (docs/gpu.md)
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
    return Model(name, shape, loaded, BodyCounter(model.get_decoder(), shape), tokens)


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


# ---- measuring one path --------------------------------------------------------------------------
@dataclass
class PathRun:
    name: str
    run: Callable[[], Any]
    items: int
    unit: str  # variants, SNVs, prompts, pairs
    head_rows: int  # output-layer rows per scored position
    positions: Callable[[int], int] | None = None  # scored positions from body tokens
    extra: Callable[[Any], dict] | None = None  # path-specific numbers from a run's result
    batch_tokens: int | None = None  # the engine's token budget, when not the model's


def measure(model: Model, path: PathRun, device: torch.device, sizes: Sizes, peak: float):
    """`sizes.warmup` untimed runs, then `sizes.repeats` timed runs: the median (tokens and
    attention FLOPs counted over the timed runs, per run)."""
    counter = model.counter
    for _ in range(sizes.warmup):
        path.run()
    counter.reset()
    reset_peak(device)
    seconds, results = [], []
    for _ in range(sizes.repeats):
        took, out = timed(path.run, device)
        seconds.append(took)
        results.append(out)
    tokens, attention = counter.reset()
    tokens, attention = tokens // sizes.repeats, attention / sizes.repeats
    median = statistics.median(seconds)
    positions = path.positions(tokens) if path.positions else tokens
    flops = body_flops(model.shape) * tokens + attention
    flops += output_flops(model.shape, path.head_rows) * positions
    weights = sum(p.numel() * p.element_size() for p in model.loaded.model.parameters()) / 1e9
    row = {
        "model": model.name,
        "path": path.name,
        "items": path.items,
        "unit": path.unit,
        "tokens": tokens,
        "seconds": median,
        "seconds_all": seconds,
        "tokens_per_s": tokens / median,
        "bp_per_s": K * tokens / median,
        "items_per_s": path.items / median,
        "tflops": flops / median / 1e12,
        "fraction_of_peak": flops / median / 1e12 / peak,
        "peak_allocated_gb": peak_memory_gb(device),
        "weights_gb": weights,
        "batch_tokens": path.batch_tokens or model.batch_tokens,
    }
    if path.extra:
        row |= path.extra(results[seconds.index(median)] if sizes.repeats % 2 else results[-1])
    print(
        f"[gpu-check] {model.name} / {path.name}: {median:.3f} s, "
        f"{row['tokens_per_s']:,.0f} tokens/s, {row['fraction_of_peak']:.1%} of peak",
        file=sys.stderr,
    )
    return row


def model_paths(model: Model, reference, inputs: Inputs, work: Path) -> list[PathRun]:
    sizes = inputs.sizes
    engine = model.engine()
    scan_tokens = sizes.scan_batch_tiles * (sizes.tile_bp // K + 1)
    scan_engine = model.engine(batch_tokens=scan_tokens)
    vocab_rows = len(model.loaded.tokenizer)
    n_snvs = 3 * len(inputs.sites)
    centered = inputs.shard(reference, "centered", sizes.centered_bp)
    nexttoken = inputs.shard(reference, "nexttoken", sizes.nexttoken_bp)
    contexts = len(inputs.sites)  # one left context per site, shared by its 3 alternates

    def score(shard, recipe, normalization="published", share=True):
        settings = RecipeSettings(recipe, normalization, share_prefix=share)
        return lambda: score_shard(shard, reference, engine, settings)

    tiles = TileSettings(sizes.tile_bp, sizes.min_context)
    targets = {"scan": [(0, inputs.scan_bp)]}
    plan = plan_scan(reference, targets, tiles, ScanChunkSettings(chunk_bp=inputs.scan_bp))
    pieces = chunk_pieces(plan, 0)
    scan_bases = plan["totals"]["scored_bp"]

    def scan(overlap: bool = True):
        def run():
            writer = BaseWriter(work / "scan_chunk.parquet")
            stats = scan_chunk(
                scan_engine, reference, pieces, tiles, writer, "gpu-check", overlap=overlap
            )
            writer.close()
            return stats

        return run

    def scan_extra(stats: dict) -> dict:
        return {
            "scan_tiles": plan["totals"]["tiles"],
            "scored_bases_per_s": stats["bases"] / stats["wall_s"],
            "outside_forward_share": 1 - stats["forward_s"] / stats["wall_s"],
            "device_idle_share": 1 - stats["device_s"] / stats["wall_s"],
            "writer_wait_s": stats["writer_wait_s"],
            "write_us_per_base": 1e6 * stats["write_s"] / stats["bases"],
            "device_us_per_base": 1e6 * stats["device_s"] / stats["bases"],
            "scan_stats": stats,
        }

    recovery = _recovery_table(inputs, sizes)
    pairs = _pair_table(inputs, sizes)
    loaded = model.loaded
    return [
        PathRun(
            "centered, full_vocab, prefix sharing",
            score(centered, "centered"),
            n_snvs,
            "variants",
            vocab_rows,
        ),
        PathRun(
            "centered, full_vocab, no prefix sharing",
            score(centered, "centered", share=False),
            n_snvs,
            "variants",
            vocab_rows,
        ),
        PathRun(
            "centered, dna_block",
            score(centered, "centered", "dna_block"),
            n_snvs,
            "variants",
            4096,
        ),
        PathRun("fns (bp, dna_block)", score(centered, "fns"), n_snvs, "variants", 4096),
        PathRun(
            "nexttoken, acgt_strings",
            score(nexttoken, "nexttoken"),
            n_snvs,
            "variants",
            vocab_rows,
            positions=lambda _: contexts,
        ),
        PathRun(
            "nexttoken, dna_block",
            score(nexttoken, "nexttoken", "dna_block"),
            n_snvs,
            "variants",
            4096,
            positions=lambda _: contexts,
        ),
        PathRun(
            "scan-chunk (writer thread)",
            scan(),
            3 * scan_bases,
            "SNVs",
            4096,
            extra=scan_extra,
            batch_tokens=scan_tokens,
        ),
        PathRun(
            "sequence recovery (token decoder, 5 tokens)",
            lambda: recover(recovery, loaded, RecoverySettings(), 8, model.batch_tokens),
            recovery.height,
            "prompts",
            vocab_rows,
            positions=lambda _: recovery.height * RecoverySettings().new_tokens,
        ),
        PathRun(
            "perturbation pairs (full_vocab)",
            lambda: score_pairs(pairs, engine, PerturbationSettings()),
            pairs.height,
            "pairs",
            vocab_rows,
        ),
    ]


def _recovery_table(inputs: Inputs, sizes: Sizes) -> pl.DataFrame:
    rows = [
        {"sequence": inputs.genome[p - sizes.prompt_bp : p], "label": inputs.genome[p : p + 30]}
        for p in inputs.sites[: sizes.prompts]
    ]
    while len(rows) < sizes.prompts:  # more prompts than sites: shifted copies
        p = inputs.sites[len(rows) % len(inputs.sites)] + 6 * len(rows)
        rows.append(
            {"sequence": inputs.genome[p - sizes.prompt_bp : p], "label": inputs.genome[p : p + 30]}
        )
    return pl.DataFrame(rows).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"), pl.lit("gpu-check").alias("source")
    )


def _pair_table(inputs: Inputs, sizes: Sizes) -> pl.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for i in range(sizes.pairs):
        start = inputs.sites[i % len(inputs.sites)] - sizes.pair_bp // 2 + 6 * i
        original = inputs.genome[start : start + sizes.pair_bp]
        middle = len(original) // 2
        shuffled = "".join(rng.permutation(list(original[middle - 24 : middle + 24])))
        rows.append(
            {
                "original_sequence": original,
                "sequence": original[: middle - 24] + shuffled + original[middle + 24 :],
            }
        )
    return pl.DataFrame(rows).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"), pl.lit("gpu-check").alias("source")
    )


# ---- the GPU costs removed: before and after -----------------------------------------------------
def ablations(model: Model, reference, inputs: Inputs, work: Path, device) -> list[dict]:
    sizes = inputs.sizes
    engine = model.engine()
    scan_engine = model.engine(batch_tokens=sizes.scan_batch_tiles * (sizes.tile_bp // K + 1))
    rng = np.random.default_rng(2)
    usable = sizes.centered_bp - sizes.centered_bp % K
    starts = rng.integers(0, len(inputs.genome) - usable, sizes.ablation_windows)
    windows = [inputs.genome[s : s + usable] for s in starts]
    ids = [engine.vocab.encode(w) for w in windows]
    batch = ids[: min(8, len(ids))]
    groups = [
        (w, [w[: len(w) // 2] + b + w[len(w) // 2 + 1 :] for b in "ACGT" if b != w[len(w) // 2]])
        for w in windows[: max(2, len(windows) // 4)]
    ]
    tiles = TileSettings(sizes.tile_bp, sizes.min_context)
    length = reference.lengths["scan"]
    rows = []

    def compare(change, before, after, items, values=None):
        runs = sizes.warmup + sizes.repeats  # before and after alternate, warm-ups dropped
        times = [(timed(before, device)[0], timed(after, device)[0]) for _ in range(runs)]
        t_before, t_after = zip(*times[sizes.warmup :], strict=True)
        b, a = statistics.median(t_before), statistics.median(t_after)
        row = {
            "model": model.name,
            "change": change,
            "items": items,
            "before_s": b,
            "after_s": a,
            "speedup": b / a,
        }
        if values is not None:
            row |= values()
        rows.append(row)
        print(
            f"[gpu-check] {model.name} / {change}: {b:.3f} s -> {a:.3f} s ({b / a:.2f}x)",
            file=sys.stderr,
        )

    def same_hidden():
        with torch.inference_mode():
            diff = engine.hidden_states(batch)[0] - naive.masked_hidden_states(engine, batch)
        return {"max_abs_difference": float(diff.abs().max())}

    with torch.inference_mode():
        compare(
            f"attention mask dropped ({len(batch)} x {len(batch[0])} tokens, forward only)",
            lambda: naive.masked_hidden_states(engine, batch),
            lambda: engine.hidden_states(batch),
            len(batch),
            same_hidden,
        )

    def sequence_syncs():
        before, how = host_syncs(
            lambda: naive.per_item_sequence_scores(engine, windows, "token", "dna_block"), device
        )
        after, _ = host_syncs(lambda: engine.sequence_scores(windows, "token", "dna_block"), device)
        ours = [(s.total, s.count) for s in engine.sequence_scores(windows, "token", "dna_block")]
        same = ours == naive.per_item_sequence_scores(engine, windows, "token", "dna_block")
        return {
            "syncs_before": before,
            "syncs_after": after,
            "counted_by": how,
            "identical_values": same,
        }

    compare(
        f"one copy per batch ({len(windows)} windows, token, dna_block)",
        lambda: naive.per_item_sequence_scores(engine, windows, "token", "dna_block"),
        lambda: engine.sequence_scores(windows, "token", "dna_block"),
        len(windows),
        sequence_syncs,
    )

    def group_syncs():
        before, how = host_syncs(
            lambda: [
                naive.per_item_window_group(engine, r, a, "token", "full_vocab") for r, a in groups
            ],
            device,
        )
        after, _ = host_syncs(
            lambda: [engine.window_group_scores(r, a, "token", "full_vocab") for r, a in groups],
            device,
        )
        return {"syncs_before": before, "syncs_after": after, "counted_by": how}

    compare(
        f"one copy per window group ({len(groups)} groups of 3 alternates, full_vocab)",
        lambda: [
            naive.per_item_window_group(engine, r, a, "token", "full_vocab") for r, a in groups
        ],
        lambda: [engine.window_group_scores(r, a, "token", "full_vocab") for r, a in groups],
        len(groups),
        group_syncs,
    )

    pieces = chunk_pieces(
        plan_scan(reference, {"scan": [(0, length)]}, tiles, ScanChunkSettings(chunk_bp=length)), 0
    )
    cut = [(p.chrom, t) for p in pieces for t in p.tiles(tiles)]
    shares = {}

    def chunk_before():
        writer = BaseWriter(work / "ablation_before.parquet")
        naive.per_tile_scan_chunk(scan_engine, reference, cut, writer)
        writer.close()

    def chunk(overlap):
        def run():
            writer = BaseWriter(work / f"ablation_{overlap}.parquet")
            stats = scan_chunk(
                scan_engine, reference, pieces, tiles, writer, "gpu-check", overlap=overlap
            )
            writer.close()
            shares[overlap] = 1 - stats["device_s"] / stats["wall_s"]
            return stats

        return run

    def same_file(a: str, b: str) -> bool:
        return (work / a).read_bytes() == (work / b).read_bytes()

    compare(
        f"scan-chunk as it was -> now ({len(cut)} tiles: per-tile copies, rows written before "
        "the next batch -> one copy a batch, one batch ahead, rows written on a thread)",
        chunk_before,
        chunk(True),
        len(cut),
        lambda: {
            "device_idle_after": shares[True],
            "identical_files": same_file("ablation_before.parquet", "ablation_True.parquet"),
        },
    )
    compare(
        "scan-chunk: rows written on a worker thread (the rest as now)",
        chunk(False),
        chunk(True),
        len(cut),
        lambda: {
            "device_idle_before": shares[False],
            "device_idle_after": shares[True],
            "identical_files": same_file("ablation_False.parquet", "ablation_True.parquet"),
        },
    )

    upcast = model.engine(upcast=True)
    shard = inputs.shard(reference, "centered", sizes.centered_bp, sizes.compare_sites)
    for normalization in ("dna_block", "full_vocab"):
        settings = RecipeSettings("centered", normalization)
        compare(
            f"upcast_output_layer cost: centered, {normalization} (before = off)",
            lambda s=settings: score_shard(shard, reference, engine, s),
            lambda s=settings: score_shard(shard, reference, upcast, s),
            shard.height,
        )
    return rows


# ---- bf16 against float32 ------------------------------------------------------------------------
def spearman(x, y) -> float:
    frame = pl.DataFrame({"x": np.asarray(x, float), "y": np.asarray(y, float)})
    return float(frame.select(pl.corr("x", "y", method="spearman")).item())


def compare_precision(model: Model, reference, inputs: Inputs) -> list[dict]:
    """The same inputs through the same weights in float32 (reference), bf16, and bf16 with
    the output layer in float32."""
    sizes = inputs.sizes
    fp32_model = copy.deepcopy(model.loaded.model).float()
    fp32 = Engine(
        fp32_model,
        model.loaded.vocab,
        model.loaded.device,
        batch_size=8,
        batch_tokens=model.batch_tokens,
    )
    engines = {"bf16": model.engine(), "bf16 + upcast_output_layer": model.engine(upcast=True)}
    centered = inputs.shard(reference, "centered", sizes.centered_bp, sizes.compare_sites)
    nexttoken = inputs.shard(reference, "nexttoken", sizes.nexttoken_bp, sizes.compare_sites)
    tiles = TileSettings(sizes.tile_bp, sizes.min_context)
    scan_end = min(inputs.scan_bp, sizes.tile_bp)
    cases = {
        "centered, full_vocab": lambda e: score_shard(
            centered, reference, e, RecipeSettings("centered")
        ),
        "nexttoken, dna_block": lambda e: score_shard(
            nexttoken, reference, e, RecipeSettings("nexttoken", "dna_block")
        ),
        "scan (log FNS marginals)": lambda e: _scan_rows(e, reference, scan_end, tiles),
    }
    rows = []
    for case, run in cases.items():
        expected = run(fp32)
        for label, engine in engines.items():
            got = run(engine)
            lls = [c for c in ("ref_ll", "alt_ll") if c in expected.columns]
            diff = np.abs(np.concatenate([got[c].to_numpy() - expected[c].to_numpy() for c in lls]))
            rows.append(
                {
                    "model": model.name,
                    "case": case,
                    "precision": label,
                    "n": expected.height,
                    "spearman_score": spearman(got["score"], expected["score"]),
                    "max_abs_ll_difference": float(diff.max()),
                    "median_abs_ll_difference": float(np.median(diff)),
                    "score_sd_float32": float(expected["score"].std()),
                }
            )
    del fp32, fp32_model
    if model.loaded.device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _scan_rows(engine, reference, end, tiles) -> pl.DataFrame:
    """Per SNV of the scan: score, and the log marginals of ref and alt as ref_ll / alt_ll."""
    from carbon_vep.scan.tiles import snv_scores

    snvs = snv_scores(scan_region(engine, reference, "scan", 0, end, tiles))
    return snvs.with_columns(ref_ll=pl.col("p_ref").log(), alt_ll=pl.col("p_alt").log())


def known_answer_aurocs(device: torch.device, work: Path, steps: int) -> list[dict]:
    """AUROC of the trained motif model (support/known_answer.py) in float32, bf16 and bf16
    with upcast_output_layer, through the package's loading and scoring path."""
    work.mkdir(parents=True, exist_ok=True)
    world = known_answer.build_world(work, steps=steps, device=str(device))
    panel = known_answer.write_panel(world)
    labels = LabelSettings(label_column="label")
    rows: list[dict] = []
    configs = {
        "float32": ("float32", False),
        "bf16": ("bfloat16", False),
        "bf16 + upcast_output_layer": ("bfloat16", True),
    }
    for label, (dtype, upcast) in configs.items():
        spec = ModelSettings(
            str(world["model"]),
            dtype=dtype,
            device=str(device),
            trust_remote_code=True,
            upcast_output_layer=upcast,
        )
        loaded = load_model(spec)
        engine = Engine(
            loaded.model, loaded.vocab, loaded.device, batch_size=8, upcast_output_layer=upcast
        )
        with open_reference(world["fasta"]) as reference:
            checked, _ = ingest_panel(panel, reference, PanelSettings(build="synthetic"))
            for recipe in ("centered", "nexttoken"):
                windows = RECIPES[recipe].add_windows(
                    unique_variants(checked), reference.lengths, known_answer.WINDOW_BP[recipe]
                )
                scores = score_shard(windows, reference, engine, RecipeSettings(recipe))
                merged = merge_scores(checked, [scores])
                auroc = vep_metrics(merged, labels, NO_BOOTSTRAP)["metrics"]["auroc"]
                rows.append(
                    {"recipe": recipe, "precision": label, "auroc": auroc, "n": merged.height}
                )
    return rows


# ---- profiles ------------------------------------------------------------------------------------
def profile_table(run: Callable[[], Any], device: torch.device) -> str:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        run()
        sync(device)
    key = "device_time_total" if device.type == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=10, max_name_column_width=60)


# ---- report --------------------------------------------------------------------------------------
def environment(device: torch.device, smoke: bool, peak: float, peak_n: int) -> dict:
    import transformers

    threads = torch.get_num_threads()
    cpu = f"CPU ({platform.machine()}, {threads} thread{'s' if threads > 1 else ''})"
    env = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "smoke": smoke,
        "bf16_peak_tflops": peak,
        "peak_matmul_n": peak_n,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env |= {
            "gpu_memory_gb": props.total_memory / 1e9,
            "cudnn": torch.backends.cudnn.version(),
            "flash_sdp_enabled": torch.backends.cuda.flash_sdp_enabled(),
        }
    return env


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"## GPU check: {env['device']}, {env['date']}",
        "",
        f"`make gpu-check` (`scripts/gpu_check.py`{' --smoke' if env['smoke'] else ''}), one "
        f"process, {report['elapsed_s']:.0f} s. torch {env['torch']}, "
        f"CUDA {env['cuda'] or 'none'}, "
        f"transformers {env['transformers']}. Random-weight models with Carbon's exact shapes "
        f"(toy shapes under --smoke), bf16, on a synthetic genome. Measured bf16 matmul peak: "
        f"**{env['bf16_peak_tflops']:,.1f} TFLOP/s** ({env['peak_matmul_n']:,}³ matmuls, same "
        "process). Times are medians of the timed runs after a warm-up run, the device drained "
        'before each clock read. "% of peak" counts the matmul FLOPs a path must do (body, '
        "attention, the output-layer rows it uses) against the measured peak.",
        "",
        "| model | path | items | tokens | s | tokens/s | bp/s | items/s | % of peak | peak "
        "alloc GB | batch_tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["paths"]:
        memory = "—" if r["peak_allocated_gb"] is None else f"{r['peak_allocated_gb']:.1f}"
        lines.append(
            f"| {r['model']} | {r['path']} | {r['items']:,} {r['unit']} | {r['tokens']:,} | "
            f"{r['seconds']:.3f} | {r['tokens_per_s']:,.0f} | {r['bp_per_s']:,.0f} | "
            f"{r['items_per_s']:,.1f} | {r['fraction_of_peak']:.1%} | {memory} | "
            f"{r['batch_tokens']:,} |"
        )
    scans = [r for r in report["paths"] if "scan_stats" in r]
    if scans:
        lines += [
            "",
            "Scan (per chunk job): share of wall time outside the model's forward "
            "passes, and the device's idle share (wall time minus the device's own busy "
            "time, CUDA events) while the host builds and writes rows on its thread.",
            "",
            "| model | tiles | SNVs/s | scored bases/s | outside forward | device idle | "
            "device µs/base | rows built + written µs/base | waited for the writer s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in scans:
            lines.append(
                f"| {r['model']} | {r['scan_tiles']} | {r['items_per_s']:,.0f} | "
                f"{r['scored_bases_per_s']:,.0f} | {r['outside_forward_share']:.1%} | "
                f"{r['device_idle_share']:.1%} | {r['device_us_per_base']:.2f} | "
                f"{r['write_us_per_base']:.2f} | {r['writer_wait_s']:.2f} |"
            )
    if report["ablations"]:
        lines += [
            "",
            "The GPU costs removed, before and after on the same inputs (before = the "
            "loop as it was, tests/support/naive.py):",
            "",
            "| model | change | before s | after s | speed-up | notes |",
            "|---|---|---|---|---|---|",
        ]
        for r in report["ablations"]:
            notes = "; ".join(
                f"{k}: {_note(k, v)}"
                for k, v in r.items()
                if k not in ("model", "change", "items", "before_s", "after_s", "speedup")
            )
            lines.append(
                f"| {r['model']} | {r['change']} | {r['before_s']:.3f} | "
                f"{r['after_s']:.3f} | {r['speedup']:.2f}x | {notes} |"
            )
    if report["precision"]:
        lines += [
            "",
            "bf16 against float32, same weights, same inputs (float32 is the reference; "
            "random weights: the scores are small, so this shows rounding, not accuracy):",
            "",
            "| model | case | precision | n | Spearman of scores | max abs Δ LL | "
            "median abs Δ LL | score sd (fp32) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in report["precision"]:
            lines.append(
                f"| {r['model']} | {r['case']} | {r['precision']} | {r['n']} | "
                f"{r['spearman_score']:.4f} | {r['max_abs_ll_difference']:.2e} | "
                f"{r['median_abs_ll_difference']:.2e} | {r['score_sd_float32']:.2e} |"
            )
    if report["known_answer"]:
        lines += [
            "",
            "Known answer (tests/support/known_answer.py: a tiny Llama trained on a "
            "genome with a planted motif; 30 motif-breaking vs 30 background SNVs):",
            "",
            "| recipe | precision | AUROC |",
            "|---|---|---|",
        ]
        for r in report["known_answer"]:
            lines.append(f"| {r['recipe']} | {r['precision']} | {r['auroc']:.3f} |")
    if report["profiles"]:
        names = ", ".join(f"`{p}`" for p in report["profiles"])
        lines += ["", f"Profiler top-10 tables (by device time): {names}."]
    if report["skipped"]:
        lines += ["", "Skipped for the time budget: " + "; ".join(report["skipped"]) + "."]
    return "\n".join(lines) + "\n"


def _note(key: str, value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1%}" if "idle" in key else f"{value:.3g}"
    return str(value)


def write_report(report: dict, out: Path, budget: Budget) -> None:
    """The JSON and the Markdown as they stand (after every step: a cut-short run keeps them)."""
    report["elapsed_s"] = budget.elapsed()
    for name, text in (
        ("gpu_check.json", json.dumps(report, indent=2, default=str)),
        ("gpu_check.md", markdown(report)),
    ):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)


# ---- the run -------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON, Markdown, profiles")
    parser.add_argument("--smoke", action="store_true", help="CPU, toy shapes, seconds")
    parser.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    parser.add_argument("--budget-s", type=float, default=420.0)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda" and not args.smoke:
        parser.error("no CUDA device: run with --smoke (toy sizes on the CPU)")
    sizes = SMOKE if args.smoke else Sizes()
    threads = torch.get_num_threads()
    if args.smoke:  # toy models: one thread is fastest and does not fight other processes
        torch.set_num_threads(1)
    try:
        return _run(args, out, device, sizes)
    finally:
        torch.set_num_threads(threads)


@dataclass
class Run:
    """The steps of one model, each written to the report as soon as it is done."""

    report: dict
    out: Path
    budget: Budget
    device: torch.device
    sizes: Sizes
    peak: float
    reference: Any
    inputs: Inputs
    work: Path

    def save(self) -> None:
        write_report(self.report, self.out, self.budget)

    def check_model(self, model: Model, headline: bool) -> None:
        paths = model_paths(model, self.reference, self.inputs, self.work)
        for path in paths:
            if self.budget.allows(f"{model.name} / {path.name}", 10):
                self.report["paths"].append(
                    measure(model, path, self.device, self.sizes, self.peak)
                )
                self.save()
        if not headline:
            return
        if self.budget.allows(f"{model.name} ablations", 90):
            self.report["ablations"] += ablations(
                model, self.reference, self.inputs, self.work, self.device
            )
            self.save()
        for path, short in ((paths[0], "centered"), (paths[6], "scan")):  # published, scan
            if self.budget.allows(f"profile of {model.name} / {path.name}", 15):
                table = profile_table(path.run, self.device)
                file = f"profile_{model.name}_{short}.txt"
                (self.out / file).write_text(f"{model.name} / {path.name}\n{table}\n")
                self.report["profiles"][file] = table
                print(f"\n{model.name} / {path.name}\n{table}")
                self.save()
        if self.budget.allows(f"{model.name} bf16 against float32", 45):
            self.report["precision"] += compare_precision(model, self.reference, self.inputs)
            self.save()


def _run(args: argparse.Namespace, out: Path, device: torch.device, sizes: Sizes) -> dict:
    shapes = TOY_SHAPES if args.smoke else CARBON_SHAPES
    budget = Budget(args.budget_s)
    peak_n, peak_iters = (256, 5) if args.smoke else (8192, 50)
    peak = bf16_peak_tflops(device, peak_n, peak_iters)
    report: dict = {
        "environment": environment(device, args.smoke, peak, peak_n),
        "paths": [],
        "ablations": [],
        "precision": [],
        "known_answer": [],
        "profiles": {},
        "skipped": budget.skipped,
    }
    print(
        f"[gpu-check] {report['environment']['device']}: bf16 peak {peak:,.1f} TFLOP/s",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        work = Path(tmp)
        # Carbon's tokenizer (155,776 ids); under --smoke the same layout with a 256-entry text
        # block (4,480 ids), so the full-vocabulary paths run in seconds on a CPU
        tokenizer = known_answer.make_tokenizer(work) if args.smoke else make_tokenizer()
        vocab = dna_vocab(tokenizer)
        report["environment"]["vocabulary"] = len(tokenizer)
        inputs = make_inputs(work, sizes)
        with open_reference(inputs.fasta) as reference:
            run = Run(report, out, budget, device, sizes, peak, reference, inputs, work)
            for name in ("Carbon-3B", "Carbon-500M"):  # the headline model first
                if budget.allows(f"{name} paths", 40 if name == "Carbon-3B" else 25):
                    model = random_model(name, shapes[name], tokenizer, vocab, device, BF16)
                    run.check_model(model, headline=name == "Carbon-3B")
                    del model
                    gc.collect()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                if name == "Carbon-3B" and budget.allows("known-answer AUROC", 30):
                    report["known_answer"] = known_answer_aurocs(
                        device, work / "known_answer", sizes.known_answer_steps
                    )
                    write_report(report, out, budget)
    write_report(report, out, budget)
    print((out / "gpu_check.md").read_text())
    return report


if __name__ == "__main__":
    main()
