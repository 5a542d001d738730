"""Phase 2 of the GPU check: every model path through the package's own code (the recipes, the
scan, recovery, perturbation), each measured: tokens/s, bp/s, items/s, the fraction of the
measured peak, peak allocated memory."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from carbon_vep.benchmark.gpu.workload import Inputs, K, Model, Sizes, pair_table, recovery_table
from carbon_vep.benchmark.harness import device_peak_gb, reset_device_peak, timed
from carbon_vep.config.gpus import (
    body_flops,
    output_flops,
)
from carbon_vep.config.stages import (
    PerturbationSettings,
    RecipeSettings,
    RecoverySettings,
    ScanChunkSettings,
    TileSettings,
)
from carbon_vep.scan.outputs import BaseWriter
from carbon_vep.scan.plan import chunk_pieces, plan_scan
from carbon_vep.scan.tiles import scan_chunk
from carbon_vep.scoring.shard import score_shard
from carbon_vep.suite.perturbation import score_pairs
from carbon_vep.suite.recovery import recover


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
    reset_device_peak(device)
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
        "peak_allocated_gb": device_peak_gb(device),
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
    """Every path in the report's order: the recipes, the scan, recovery, perturbation."""
    return (
        _recipe_paths(model, reference, inputs)
        + [_scan_path(model, reference, inputs, work)]
        + _suite_paths(model, inputs)
    )


def _recipe_paths(model: Model, reference, inputs: Inputs) -> list[PathRun]:
    sizes, engine = inputs.sizes, model.engine()
    vocab_rows = len(model.loaded.tokenizer)
    n_snvs = 3 * len(inputs.sites)
    centered = inputs.shard(reference, "centered", sizes.centered_bp)
    nexttoken = inputs.shard(reference, "nexttoken", sizes.nexttoken_bp)
    contexts = len(inputs.sites)  # one left context per site, shared by its 3 alternates

    def score(shard, recipe, normalization="published", share=True):
        settings = RecipeSettings(recipe, normalization, share_prefix=share)
        return lambda: score_shard(shard, reference, engine, settings)

    def per_context(_: int) -> int:
        return contexts

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
            positions=per_context,
        ),
        PathRun(
            "nexttoken, dna_block",
            score(nexttoken, "nexttoken", "dna_block"),
            n_snvs,
            "variants",
            4096,
            positions=per_context,
        ),
    ]


def _scan_path(model: Model, reference, inputs: Inputs, work: Path) -> PathRun:
    sizes = inputs.sizes
    scan_tokens = sizes.scan_batch_tiles * (sizes.tile_bp // K + 1)
    engine = model.engine(batch_tokens=scan_tokens)
    tiles = TileSettings(sizes.tile_bp, sizes.min_context)
    targets = {"scan": [(0, inputs.scan_bp)]}
    plan = plan_scan(reference, targets, tiles, ScanChunkSettings(chunk_bp=inputs.scan_bp))
    pieces = chunk_pieces(plan, 0)

    def run():
        writer = BaseWriter(work / "scan_chunk.parquet")
        stats = scan_chunk(engine, reference, pieces, tiles, writer, "gpu-check", overlap=True)
        writer.close()
        return stats

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

    return PathRun(
        "scan-chunk (writer thread)",
        run,
        3 * plan["totals"]["scored_bp"],
        "SNVs",
        4096,
        extra=scan_extra,
        batch_tokens=scan_tokens,
    )


def _suite_paths(model: Model, inputs: Inputs) -> list[PathRun]:
    sizes, engine, loaded = inputs.sizes, model.engine(), model.loaded
    vocab_rows = len(loaded.tokenizer)
    recovery = recovery_table(inputs, sizes)
    pairs = pair_table(inputs, sizes)
    return [
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
