"""Scan mode: one forward pass per tiled window scores every possible SNV of a region.

Tiles are windows of at most `window_bp` bases cut into whole k-mers from their own start. Each
tile scores the bases from `min_context` bp after its start (fewer only where the contig starts
sooner), so every scored base sees at least `min_context` bp of left context; consecutive tiles
overlap by that context. For every scored base the pass yields

- the FNS marginal m_j(b): the 6-mer-block distribution at its token, summed to base j, given
  the preceding tokens only (what the model's `score_sequence` returns per base), and
- the exact within-token conditional P(b_j = b | preceding tokens, b_0..b_{j-1}).

At phase 0 the two coincide and equal the right-end next-token marginal (dna_block
normalisation) with the tile's left context. SNV score = log m(ref) - log m(alt) (larger = more
damaging); `score_conditional` is the same with the conditional.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import polars as pl
import torch

from carbon_vep import columns
from carbon_vep.columns import SCAN_BASES
from carbon_vep.config.stages import TileSettings
from carbon_vep.genome.reference import Reference
from carbon_vep.model.batching import in_batches
from carbon_vep.model.engine import Engine
from carbon_vep.model.tokens import BASES, base_codes
from carbon_vep.progress import Progress
from carbon_vep.scan.tiling import Tile, tile_region

_TO_ATCG = [BASES.index(b) for b in SCAN_BASES]


def scan_tiles(engine: Engine, reference: Reference, chrom: str, tiles: list[Tile]) -> pl.DataFrame:
    """Per-position probabilities for the scored bases of each tile (SCAN_POSITION columns)."""
    progress = Progress(
        sum(t.score_end - t.score_start for t in tiles), "bases", f"scan of {chrom}"
    )
    cut, timing = [(chrom, t) for t in tiles], {"forward_s": 0.0}
    frames = list(_scored_batches(engine, reference, cut, progress, timing, log=False))
    progress.close()
    if not frames:
        return pl.DataFrame(schema=columns.schema(columns.SCAN_POSITION))
    return pl.concat(frames)


@torch.inference_mode()
def _scored_batches(
    engine: Engine,
    reference: Reference,
    cut: list[tuple[str, Tile]],
    progress: Progress,
    timing: dict[str, float],
    *,
    log: bool,
) -> Iterator[pl.DataFrame]:
    """The tile loop of every scan: one frame of per-base rows per batch of tiles, in order.

    Batches hold tiles of one length (consecutive equal-length runs: a batch never pads) and
    halve on running out of memory; a tile that fails alone stops the job (a tile has no row
    status to fail with). Rows are the region scan's probabilities (`log=False`, SCAN_POSITION)
    or the genome scan's log-probabilities (`log=True`, SCAN_BASE). `progress` counts bases;
    `timing["forward_s"]` adds up the model's forward passes (body and the 4,096-row DNA head),
    the rest being overhead."""
    if cut:
        engine.check_window_bp(max(t.end - t.start for _, t in cut), "scan tiles")

    def work(batch: list[tuple[str, Tile]]) -> list[pl.DataFrame]:
        seqs = [reference.fetch(chrom, t.start, t.end) for chrom, t in batch]
        ids = [engine.vocab.encode(s) for s in seqs]
        began = time.monotonic()
        hidden, _ = engine.hidden_states(ids)
        kmer_lps = [engine.dna_log_probs(hidden[row, : len(seq) // engine.k], "dna_block")
                    for row, seq in enumerate(seqs)]  # fmt: skip
        if hidden.device.type == "cuda":
            torch.cuda.synchronize(hidden.device)
        timing["forward_s"] += time.monotonic() - began
        return [
            _tile_frame(engine, chrom, tile, seq, kmer_lp, log=log)
            for (chrom, tile), seq, kmer_lp in zip(batch, seqs, kmer_lps, strict=True)
        ]

    for run in _equal_length_runs(cut):
        for index, values in in_batches(run, work, engine.batch_size, engine.device):
            if values[0] is None:
                chrom, tile = run[index[0]]
                raise torch.OutOfMemoryError(
                    f"scan tile {chrom}:{tile.start + 1}-{tile.end} ({tile.end - tile.start} bp) "
                    "runs out of memory even alone; lower tile_bp"
                )
            frame = pl.concat(values)
            progress.update(frame.height)
            yield frame


def _equal_length_runs(tiles: list[tuple[str, Tile]]) -> list[list[tuple[str, Tile]]]:
    """Consecutive tiles of equal length grouped (a batch never pads; order is kept)."""
    runs: list[list[tuple[str, Tile]]] = []
    for item in tiles:
        _, tile = item
        if runs and runs[-1][0][1].end - runs[-1][0][1].start == tile.end - tile.start:
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def _tile_frame(
    engine: Engine, chrom: str, tile: Tile, seq: str, kmer_lp: torch.Tensor, *, log: bool
) -> pl.DataFrame:
    """The scored bases of one tile: FNS marginals and within-token conditionals per base."""
    codes = torch.as_tensor(base_codes(seq, engine.k), device=kmer_lp.device)
    marginals = engine.kmer_base_marginals(kmer_lp)
    conditional = engine.within_token_conditionals(kmer_lp, codes, marginals)
    marginal, conditional = marginals.reshape(-1, 4), conditional.reshape(-1, 4)
    lo, hi = tile.score_start - tile.start, tile.score_end - tile.start
    return _base_frame(chrom, tile, seq, marginal, conditional, lo, hi, engine.k, log=log)


def _base_frame(chrom, tile, seq, marginal, conditional, lo, hi, k, *, log: bool) -> pl.DataFrame:
    """One row per base of tile[lo:hi]: the region scan's probabilities (SCAN_POSITION), or
    the genome scan's log-probabilities (SCAN_BASE, stored as float16 by the merge)."""
    m, c = (x[lo:hi] if log else x[lo:hi].exp() for x in (marginal, conditional))
    m, c = (x.cpu().numpy()[:, _TO_ATCG] for x in (m, c))
    prefix = "log_" if log else ""
    offsets = np.arange(lo, hi)
    values = {
        "chrom": [chrom] * (hi - lo),
        "pos": tile.start + offsets + 1,
        "ref": list(seq[lo:hi]),
        "context_bp": offsets,
        "phase": offsets % k,
    }
    values |= {f"{prefix}fns_{b}": m[:, i] for i, b in enumerate(SCAN_BASES)}
    values |= {f"{prefix}cond_{b}": c[:, i] for i, b in enumerate(SCAN_BASES)}
    table = columns.SCAN_BASE if log else columns.SCAN_POSITION
    return pl.DataFrame(values, schema=columns.schema(table))


def snv_scores(positions: pl.DataFrame) -> pl.DataFrame:
    """Every possible SNV of the scanned positions (3 per ACGT reference base)."""
    frames = []
    for alt in SCAN_BASES:
        part = positions.filter(pl.col("ref") != alt).filter(pl.col("ref").is_in(list(SCAN_BASES)))
        p_ref = pl.coalesce(
            [pl.when(pl.col("ref") == b).then(pl.col(f"fns_{b}")) for b in SCAN_BASES]
        )
        c_ref = pl.coalesce(
            [pl.when(pl.col("ref") == b).then(pl.col(f"cond_{b}")) for b in SCAN_BASES]
        )
        frames.append(
            part.select(
                "chrom",
                "pos",
                "ref",
                pl.lit(alt).alias("alt"),
                (p_ref.log() - pl.col(f"fns_{alt}").log()).alias("score"),
                (c_ref.log() - pl.col(f"cond_{alt}").log()).alias("score_conditional"),
                p_ref.alias("p_ref"),
                pl.col(f"fns_{alt}").alias("p_alt"),
                "context_bp",
            )  # fmt: skip
        )
    snvs = pl.concat(frames).sort("chrom", "pos", "alt")
    return snvs.select(columns.names(columns.SCAN_SNV))


def scan_region(
    engine: Engine, reference: Reference, chrom: str, start: int, end: int, tiles: TileSettings
) -> pl.DataFrame:
    """Per-position table for [start, end) (0-based, half-open) of `chrom`."""
    length = reference.lengths[chrom]
    cut = tile_region(length, start, end, tiles.tile_bp, tiles.min_context, engine.k)
    return scan_tiles(engine, reference, chrom, cut)


# ---- whole-genome chunks: streamed, bounded memory ------------------------------------------
def scan_chunk(
    engine: Engine, reference: Reference, pieces, tiles: TileSettings, writer, what: str
) -> dict[str, float]:
    """Score every base of `pieces` (scan.plan.Piece) and hand each batch's rows to
    `writer.write` as soon as it is done: memory holds one batch of tiles, whatever the chunk's
    size. Returns timings (wall; the model's forward passes, body and DNA output layer, the
    rest being overhead: marginals, conditionals, tables, Parquet) and the bases written."""
    cut = [(p.chrom, t) for p in pieces for t in p.tiles(tiles)]
    progress = Progress(sum(t.score_end - t.score_start for _, t in cut), "bases", what)
    start, timing, written = time.monotonic(), {"forward_s": 0.0}, 0
    for frame in _scored_batches(engine, reference, cut, progress, timing, log=True):
        writer.write(frame)
        written += frame.height
    progress.close()
    return {"bases": written, "wall_s": time.monotonic() - start, **timing}
