"""Phase 3 of the GPU check: each GPU cost the code removed, before (the loop as it was:
benchmark.published) and after, on the same inputs, with host synchronisations counted."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import torch

from carbon_vep.benchmark import published
from carbon_vep.benchmark.gpu.device import host_syncs
from carbon_vep.benchmark.gpu.workload import Inputs, K, Model
from carbon_vep.benchmark.harness import timed
from carbon_vep.config.stages import (
    RecipeSettings,
    ScanChunkSettings,
    TileSettings,
)
from carbon_vep.scan.outputs import BaseWriter
from carbon_vep.scan.plan import chunk_pieces, plan_scan
from carbon_vep.scan.tiles import scan_chunk
from carbon_vep.scoring.shard import score_shard


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
            diff = engine.hidden_states(batch)[0] - published.masked_hidden_states(engine, batch)
        return {"max_abs_difference": float(diff.abs().max())}

    with torch.inference_mode():
        compare(
            f"attention mask dropped ({len(batch)} x {len(batch[0])} tokens, forward only)",
            lambda: published.masked_hidden_states(engine, batch),
            lambda: engine.hidden_states(batch),
            len(batch),
            same_hidden,
        )

    def sequence_syncs():
        before, how = host_syncs(
            lambda: published.per_item_sequence_scores(engine, windows, "token", "dna_block"),
            device,
        )
        after, _ = host_syncs(lambda: engine.sequence_scores(windows, "token", "dna_block"), device)
        ours = [(s.total, s.count) for s in engine.sequence_scores(windows, "token", "dna_block")]
        same = ours == published.per_item_sequence_scores(engine, windows, "token", "dna_block")
        return {
            "syncs_before": before,
            "syncs_after": after,
            "counted_by": how,
            "identical_values": same,
        }

    compare(
        f"one copy per batch ({len(windows)} windows, token, dna_block)",
        lambda: published.per_item_sequence_scores(engine, windows, "token", "dna_block"),
        lambda: engine.sequence_scores(windows, "token", "dna_block"),
        len(windows),
        sequence_syncs,
    )

    def group_syncs():
        before, how = host_syncs(
            lambda: [
                published.per_item_window_group(engine, r, a, "token", "full_vocab")
                for r, a in groups
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
            published.per_item_window_group(engine, r, a, "token", "full_vocab") for r, a in groups
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
        published.per_tile_scan_chunk(scan_engine, reference, cut, writer)
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
