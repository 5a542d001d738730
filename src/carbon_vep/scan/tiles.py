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

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from carbon_vep import columns
from carbon_vep.columns import SCAN_BASES
from carbon_vep.config.stages import TileSettings
from carbon_vep.genome.reference import Reference
from carbon_vep.model.batching import in_batches
from carbon_vep.model.context import positions_needed
from carbon_vep.model.engine import Engine
from carbon_vep.model.timing import DeviceClock
from carbon_vep.model.tokens import BASES, base_codes
from carbon_vep.progress import Progress
from carbon_vep.scan.background import BackgroundWriter
from carbon_vep.scan.snvs import at_base
from carbon_vep.scan.targets import target_pieces
from carbon_vep.scan.tiling import Tile

_TO_ATCG = [BASES.index(b) for b in SCAN_BASES]


def scan_tiles(engine: Engine, reference: Reference, chrom: str, tiles: list[Tile]) -> pl.DataFrame:
    """Per-position probabilities for the scored bases of each tile (SCAN_POSITION columns)."""
    progress = Progress(
        sum(t.score_end - t.score_start for t in tiles), "bases", f"scan of {chrom}"
    )
    cut, timing = [(chrom, t) for t in tiles], _new_timing()
    batches = _scored_batches(engine, reference, cut, progress, timing, log=False)
    frames = [frame for batch in batches for frame in batch.frames(engine.k)]
    progress.close()
    if not frames:
        return pl.DataFrame(schema=columns.schema(columns.SCAN_POSITION))
    return pl.concat(frames)


@dataclass
class TileBatch:
    """One batch of tiles and its per-base values: [tiles, 2, bases, 4] (FNS marginal,
    within-token conditional; ATCG order), log-probabilities or probabilities (`log`). Until
    `ready` they may still be on their way from the device (one copy per batch)."""

    tiles: list[tuple[str, Tile, str]]  # chrom, tile, its sequence
    values: Any  # torch.Tensor on the host (pinned on a GPU) until ready, then numpy
    log: bool
    marks: tuple[Any, ...]  # DeviceClock marks: launched, forward done, values done, copied
    on_device: Any = None  # the device tensor, kept alive until its copy has landed
    first: int = 0  # the tile base the values start at (the bases before: context only)

    def bases(self) -> int:
        return sum(t.score_end - t.score_start for _, t, _ in self.tiles)

    def frames(self, k: int) -> list[pl.DataFrame]:
        """One frame of per-base rows per tile (host only: numpy and polars, no device)."""
        out = []
        for (chrom, tile, seq), values in zip(self.tiles, self.values, strict=True):
            lo, hi = tile.score_start - tile.start, tile.score_end - tile.start
            marginal, conditional = (
                v[lo - self.first : hi - self.first][:, _TO_ATCG] for v in values
            )
            out.append(
                _base_frame(chrom, tile, seq, marginal, conditional, lo, hi, k, log=self.log)
            )
        return out


def _new_timing() -> dict[str, float]:
    return {"forward_s": 0.0, "device_s": 0.0}


@torch.inference_mode()
def _scored_batches(
    engine: Engine,
    reference: Reference,
    cut: list[tuple[str, Tile]],
    progress: Progress,
    timing: dict[str, float],
    *,
    log: bool,
) -> Iterator[TileBatch]:
    """The tile loop of every scan: each batch of tiles with its per-base values, in order.

    Batches hold tiles of one length (a batch never pads, so no attention mask) and halve on
    running out of memory; a tile that fails alone stops the job (a tile has no row status to
    fail with). Values are the region scan's probabilities (`log=False`, SCAN_POSITION) or the
    genome scan's log-probabilities (`log=True`, SCAN_BASE).

    The device runs one batch ahead: batch i+1 is queued before the host waits for batch i's
    values (one copy per batch), so the device computes while the caller builds and writes
    batch i's rows. `progress` counts bases; `timing` adds up, from the device's own clock,
    `forward_s` (the model's forward passes: body and the 4,096-row DNA head) and `device_s`
    (all the device's work: forward, marginals, conditionals)."""
    if not cut:
        return
    engine.check_window_bp(max(t.end - t.start for _, t in cut), "scan tiles", "tile_bp")
    tiles = _TileLauncher(engine, reference, DeviceClock(engine.device), log, progress, timing)
    lengths = [t.end - t.start for _, t in cut]
    tokens = [positions_needed(n, engine.k) for n in lengths]
    pending = None
    for index, values in in_batches(
        cut,
        tiles.launch,
        engine.batch_size,
        engine.device,
        tokens=tokens,
        batch_tokens=engine.batch_tokens,
        keys=lengths,
    ):
        if values[0] is None:
            chrom, tile = cut[index[0]]
            raise torch.OutOfMemoryError(
                f"scan tile {chrom}:{tile.start + 1}-{tile.end} ({tile.end - tile.start} bp) "
                "runs out of memory even alone; lower tile_bp"
            )
        if pending is not None:
            yield tiles.ready(pending)
        pending = values[0]
    if pending is not None:
        yield tiles.ready(pending)


class _TileLauncher:
    """Queues a batch of tiles on the device (`launch`) and takes its values once they have
    landed on the host (`ready`), timing both on the device's clock."""

    def __init__(
        self,
        engine: Engine,
        reference: Reference,
        clock: DeviceClock,
        log: bool,
        progress: Progress,
        timing: dict[str, float],
    ) -> None:
        self.engine, self.reference, self.clock, self.log = engine, reference, clock, log
        self.progress, self.timing = progress, timing

    def launch(self, batch: list[tuple[str, Tile]]) -> list[TileBatch]:
        engine, clock = self.engine, self.clock
        seqs = [self.reference.fetch(chrom, t.start, t.end) for chrom, t in batch]
        ids = [engine.vocab.encode(s) for s in seqs]
        codes = engine.to_device(np.stack([base_codes(s, engine.k) for s in seqs]))
        # the tokens whose bases no tile of the batch scores (its context): the last layer, the
        # DNA rows and the per-base values skip them (model.last_layer; tiles of a batch have
        # one length)
        skip = min(t.score_start - t.start for _, t in batch) // engine.k
        began = clock.mark()
        hidden, _ = engine.forward(np.stack(ids), keep_last=len(ids[0]) - skip)
        # each row's positions but the last (it predicts past the tile)
        kmer_lps = [engine.dna_log_probs(rows[:-1], "dna_block") for rows in hidden]
        forward = clock.mark()
        values = torch.stack(
            [_per_base(engine, lp, codes[row, skip:]) for row, lp in enumerate(kmer_lps)]
        )
        values = values if self.log else values.exp()
        done = clock.mark()
        host = engine.to_host_async(values)  # lands by `ready`
        tiles = [(chrom, t, seq) for (chrom, t), seq in zip(batch, seqs, strict=True)]
        marks = (began, forward, done, clock.mark())
        first = skip * engine.k
        return [TileBatch(tiles, host, self.log, marks, values, first)] * len(batch)

    def ready(self, batch: TileBatch) -> TileBatch:
        began, forward, done, copied = batch.marks
        self.clock.wait(copied)
        self.timing["forward_s"] += self.clock.seconds(began, forward)
        self.timing["device_s"] += self.clock.seconds(began, done)
        batch.values, batch.on_device = batch.values.numpy(), None
        self.progress.update(batch.bases())
        return batch


def _per_base(engine: Engine, kmer_lp: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """FNS marginals and within-token conditionals of every base of one tile: [2, bases, 4]
    (log-probabilities, ATCG order); `codes` [tokens, k] are the tile's base codes."""
    marginals = engine.kmer_base_marginals(kmer_lp)
    conditional = engine.within_token_conditionals(kmer_lp, codes, marginals)
    return torch.stack([marginals.reshape(-1, 4), conditional.reshape(-1, 4)])


def _base_frame(chrom, tile, seq, marginal, conditional, lo, hi, k, *, log: bool) -> pl.DataFrame:
    """One row per base of tile[lo:hi] from its values (numpy, ACGT order): the region scan's
    probabilities (SCAN_POSITION), or the genome scan's log-probabilities (SCAN_BASE, stored
    as float16 by the merge)."""
    prefix = "log_" if log else ""
    offsets = np.arange(lo, hi)
    values = {
        "chrom": [chrom] * (hi - lo),
        "pos": tile.start + offsets + 1,
        "ref": list(seq[lo:hi]),
        "context_bp": offsets,
        "phase": offsets % k,
    }
    values |= {f"{prefix}fns_{b}": marginal[:, i] for i, b in enumerate(SCAN_BASES)}
    values |= {f"{prefix}cond_{b}": conditional[:, i] for i, b in enumerate(SCAN_BASES)}
    table = columns.SCAN_BASE if log else columns.SCAN_POSITION
    return pl.DataFrame(values, schema=columns.schema(table))


def snv_scores(positions: pl.DataFrame) -> pl.DataFrame:
    """Every possible SNV of the scanned positions (3 per ACGT reference base)."""
    frames = []
    for alt in SCAN_BASES:
        part = positions.filter(pl.col("ref") != alt).filter(pl.col("ref").is_in(list(SCAN_BASES)))
        p_ref, c_ref = at_base(pl.col("ref"), "fns_{}"), at_base(pl.col("ref"), "cond_{}")
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
            )
        )
    snvs = pl.concat(frames).sort("chrom", "pos", "alt")
    return snvs.select(columns.names(columns.SCAN_SNV))


def scan_region(
    engine: Engine, reference: Reference, chrom: str, start: int, end: int, tiles: TileSettings
) -> pl.DataFrame:
    """Per-position table for the ACGT bases of [start, end) (0-based, half-open) of `chrom`,
    planned as the workflow's scans are (scan.targets.target_pieces: N and other non-ACGT bases
    skipped, context restarting after a gap, the same window for a base as in a genome scan
    from the same start)."""
    pieces, _ = target_pieces(reference, {chrom: [(start, end)]})
    return scan_pieces(engine, reference, pieces, tiles)


def scan_pieces(engine: Engine, reference: Reference, pieces, tiles: TileSettings) -> pl.DataFrame:
    """Per-position table (SCAN_POSITION) of the bases of `pieces` (scan.targets.Piece), in
    order."""
    frames = [
        scan_tiles(engine, reference, chrom, [t for p in group for t in p.tiles(tiles)])
        for chrom, group in itertools.groupby(pieces, key=lambda p: p.chrom)
    ]
    if not frames:
        return pl.DataFrame(schema=columns.schema(columns.SCAN_POSITION))
    return pl.concat(frames)


# ---- whole-genome chunks: streamed, bounded memory ------------------------------------------
def scan_chunk(
    engine: Engine,
    reference: Reference,
    pieces,
    tiles: TileSettings,
    writer,
    what: str,
    *,
    overlap: bool = True,
) -> dict[str, float]:
    """Score every base of `pieces` (scan.targets.Piece) and hand each batch's rows to
    `writer.write` as soon as they are on the host: memory holds a few batches of tiles,
    whatever the chunk's size. With `overlap` the rows are built and written on a worker thread
    while the device computes the next batch (the same calls in the same order: the same
    file). Returns the bases written and timings: wall; `forward_s` (the model's forward
    passes, body and DNA output layer) and `device_s` (all of the device's work) on the device's
    clock; `write_s` (building and writing the rows) and `writer_wait_s` (time the scan waited
    for the writer)."""
    cut = [(p.chrom, t) for p in pieces for t in p.tiles(tiles)]
    progress = Progress(sum(t.score_end - t.score_start for _, t in cut), "bases", what)
    start, timing, written = time.monotonic(), _new_timing(), 0
    writing = [0.0]  # seconds building and writing rows (on the writer's thread)

    def write(batch: TileBatch) -> None:  # a row group a batch, or a run of small ones
        began = time.monotonic()
        writer.write(pl.concat(batch.frames(engine.k)))
        writing[0] += time.monotonic() - began

    with BackgroundWriter(write, threaded=overlap) as sink:
        for batch in _scored_batches(engine, reference, cut, progress, timing, log=True):
            sink.put(batch)
            written += batch.bases()
    progress.close()
    return {
        "bases": written,
        "wall_s": time.monotonic() - start,
        **timing,
        "write_s": writing[0],
        "writer_wait_s": sink.wait_s,
    }


def scan_chunk_file(
    engine: Engine, reference: Reference, pieces, tiles: TileSettings, out: str, what: str
) -> dict[str, float]:
    """scan_chunk streamed into the Parquet file `out`, published whole or not at all."""
    from carbon_vep.scan.positions import CHUNK_GROUP_MIN_ROWS, BaseWriter

    writer = BaseWriter(out, min_rows=CHUNK_GROUP_MIN_ROWS)
    try:
        stats = scan_chunk(engine, reference, pieces, tiles, writer, what)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return stats
