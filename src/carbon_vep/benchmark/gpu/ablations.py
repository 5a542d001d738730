"""Phase 3 of the GPU check: each GPU cost the code removed, before (the loop as it was:
benchmark.published) and after, on the same inputs, with host synchronisations counted."""

from __future__ import annotations

import statistics
import sys
from functools import partial
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
    """Every removed cost, before and after, in the order of the report."""
    run = Ablations(model, reference, inputs, work, device)
    run.engine_loops()
    run.scan_chunks()
    run.upcast()
    return run.rows


class Ablations:
    """The same inputs for every comparison; `compare` times before and after, interleaved."""

    def __init__(self, model: Model, reference, inputs: Inputs, work: Path, device) -> None:
        self.model, self.reference, self.inputs, self.work = model, reference, inputs, work
        self.device, self.sizes = device, inputs.sizes
        self.engine = model.engine()
        rng = np.random.default_rng(2)
        usable = self.sizes.centered_bp - self.sizes.centered_bp % K
        starts = rng.integers(0, len(inputs.genome) - usable, self.sizes.ablation_windows)
        self.windows = [inputs.genome[s : s + usable] for s in starts]
        ids = [self.engine.vocab.encode(w) for w in self.windows]
        self.batch = ids[: min(8, len(ids))]
        self.groups = [
            (
                w,
                [
                    w[: len(w) // 2] + b + w[len(w) // 2 + 1 :]
                    for b in "ACGT"
                    if b != w[len(w) // 2]
                ],
            )
            for w in self.windows[: max(2, len(self.windows) // 4)]
        ]
        self.rows: list[dict] = []

    def compare(self, change, before, after, items, values=None) -> None:
        runs = self.sizes.warmup + self.sizes.repeats  # alternating, warm-ups dropped
        times = [(timed(before, self.device)[0], timed(after, self.device)[0]) for _ in range(runs)]
        t_before, t_after = zip(*times[self.sizes.warmup :], strict=True)
        b, a = statistics.median(t_before), statistics.median(t_after)
        row = {
            "model": self.model.name,
            "change": change,
            "items": items,
            "before_s": b,
            "after_s": a,
            "speedup": b / a,
        }
        self.rows.append(row | (values() if values is not None else {}))
        print(
            f"[gpu-check] {self.model.name} / {change}: {b:.3f} s -> {a:.3f} s ({b / a:.2f}x)",
            file=sys.stderr,
        )

    def _syncs(self, before, after) -> dict:
        n_before, how = host_syncs(before, self.device)
        n_after, _ = host_syncs(after, self.device)
        return {"syncs_before": n_before, "syncs_after": n_after, "counted_by": how}

    def engine_loops(self) -> None:
        """The attention mask on equal-length batches, a host read per item, per group."""
        engine, batch, windows, groups = self.engine, self.batch, self.windows, self.groups

        def same_hidden():
            with torch.inference_mode():
                ours = engine.hidden_states(batch)[0]
                diff = ours - published.masked_hidden_states(engine, batch)
            return {"max_abs_difference": float(diff.abs().max())}

        with torch.inference_mode():
            self.compare(
                f"attention mask dropped ({len(batch)} x {len(batch[0])} tokens, forward only)",
                lambda: published.masked_hidden_states(engine, batch),
                lambda: engine.hidden_states(batch),
                len(batch),
                same_hidden,
            )
        before = partial(published.per_item_sequence_scores, engine, windows, "token", "dna_block")
        after = partial(engine.sequence_scores, windows, "token", "dna_block")

        def sequence_values():
            same = [(s.total, s.count) for s in after()] == before()
            return self._syncs(before, after) | {"identical_values": same}

        self.compare(
            f"one copy per batch ({len(windows)} windows, token, dna_block)",
            before,
            after,
            len(windows),
            sequence_values,
        )
        group_before = lambda: [  # noqa: E731
            published.per_item_window_group(engine, r, a, "token", "full_vocab") for r, a in groups
        ]
        group_after = lambda: [  # noqa: E731
            engine.window_group_scores(r, a, "token", "full_vocab") for r, a in groups
        ]
        self.compare(
            f"one copy per window group ({len(groups)} groups of 3 alternates, full_vocab)",
            group_before,
            group_after,
            len(groups),
            lambda: self._syncs(group_before, group_after),
        )

    def scan_chunks(self) -> None:
        """scan-chunk as it was (per-tile copies, rows written before the next batch) against
        now, and the writer thread alone."""
        sizes, reference, work = self.sizes, self.reference, self.work
        engine = self.model.engine(batch_tokens=sizes.scan_batch_tiles * (sizes.tile_bp // K + 1))
        tiles = TileSettings(sizes.tile_bp, sizes.min_context)
        length = reference.lengths["scan"]
        plan = plan_scan(
            reference, {"scan": [(0, length)]}, tiles, ScanChunkSettings(chunk_bp=length)
        )
        pieces = chunk_pieces(plan, 0)
        cut = [(p.chrom, t) for p in pieces for t in p.tiles(tiles)]
        shares = {}

        def chunk_before():
            writer = BaseWriter(work / "ablation_before.parquet")
            published.per_tile_scan_chunk(engine, reference, cut, writer)
            writer.close()

        def chunk(overlap):
            def run():
                writer = BaseWriter(work / f"ablation_{overlap}.parquet")
                stats = scan_chunk(
                    engine, reference, pieces, tiles, writer, "gpu-check", overlap=overlap
                )
                writer.close()
                shares[overlap] = 1 - stats["device_s"] / stats["wall_s"]
                return stats

            return run

        def same_file(a: str, b: str) -> bool:
            return (work / a).read_bytes() == (work / b).read_bytes()

        self.compare(
            f"scan-chunk as it was -> now ({len(cut)} tiles: per-tile copies, rows written "
            "before the next batch -> one copy a batch, one batch ahead, rows written on a "
            "thread)",
            chunk_before,
            chunk(True),
            len(cut),
            lambda: {
                "device_idle_after": shares[True],
                "identical_files": same_file("ablation_before.parquet", "ablation_True.parquet"),
            },
        )
        self.compare(
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

    def upcast(self) -> None:
        """What `upcast_output_layer` costs on the centered recipe, both normalisations."""
        upcast = self.model.engine(upcast=True)
        shard = self.inputs.shard(
            self.reference, "centered", self.sizes.centered_bp, self.sizes.compare_sites
        )
        for normalization in ("dna_block", "full_vocab"):
            settings = RecipeSettings("centered", normalization)
            self.compare(
                f"upcast_output_layer cost: centered, {normalization} (before = off)",
                lambda s=settings: score_shard(shard, self.reference, self.engine, s),
                lambda s=settings: score_shard(shard, self.reference, upcast, s),
                shard.height,
            )
