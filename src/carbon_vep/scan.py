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

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from .engine import Engine
from .reference import Reference
from .tokens import BASES, base_codes

ALPHABETIC = "ACGT"  # output column order
_TO_ATCG = [BASES.index(b) for b in ALPHABETIC]


@dataclass(frozen=True)
class Tile:
    start: int  # window [start, end) on the contig, end - start a multiple of k
    end: int
    score_start: int  # bases [score_start, score_end) are scored from this tile
    score_end: int


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def tile_region(
    contig_length: int, start: int, end: int, window_bp: int, min_context: int, k: int = 6
) -> list[Tile]:
    """Tiles covering [start, end) (0-based) so each scored base has >= min_context bp before it
    (or everything back to the contig start)."""
    window_bp -= window_bp % k
    stride = window_bp - min_context
    if stride < k:
        raise ValueError(f"window_bp {window_bp} leaves no room after min_context {min_context}")
    tiles = []
    for score_start in range(start, end, stride):
        score_end = min(score_start + stride, end)
        tile_start = max(0, score_start - min_context)
        tile_end = tile_start + _round_up(score_end - tile_start, k)
        if tile_end > contig_length:  # slide left so the window stays on the contig
            shift = min(tile_end - contig_length, tile_start)
            tile_start -= shift
            tile_end = min(tile_end - shift, tile_start + (contig_length - tile_start) // k * k)
        tiles.append(Tile(tile_start, tile_end, score_start, min(score_end, tile_end)))
    return tiles


def tiles_for_positions(
    positions: list[int], contig_length: int, window_bp: int, min_context: int, k: int = 6
) -> list[Tile]:
    """Tiles for sparse 0-based positions: each tile starts at the first uncovered position."""
    tiles: list[Tile] = []
    for pos in sorted(set(positions)):
        if tiles and tiles[-1].score_start <= pos < tiles[-1].score_end:
            continue
        end = min(pos + window_bp - min_context, contig_length)
        tiles += tile_region(contig_length, pos, end, window_bp, min_context, k)[:1]
    return tiles


@torch.inference_mode()
def scan_tiles(engine: Engine, reference: Reference, chrom: str, tiles: list[Tile]) -> pl.DataFrame:
    """Per-position probabilities for the scored bases of each tile."""
    k = engine.k
    if tiles:
        engine.check_window_bp(max(t.end - t.start for t in tiles), "scan tiles")
    frames = []
    for batch in _batches(tiles, engine.batch_size):
        seqs = [reference.fetch(chrom, t.start, t.end) for t in batch]
        hidden, _ = engine.hidden_states([engine.vocab.encode(s) for s in seqs])
        for row, (tile, seq) in enumerate(zip(batch, seqs, strict=True)):
            n_tokens = len(seq) // k
            kmer_lp = engine.dna_log_probs(hidden[row, :n_tokens], "dna_block")
            codes = base_codes(seq, k)
            marginal = engine.kmer_base_marginals(kmer_lp).reshape(-1, 4)
            conditional = engine.within_token_conditionals(
                kmer_lp, torch.as_tensor(codes, device=kmer_lp.device)
            ).reshape(-1, 4)
            lo, hi = tile.score_start - tile.start, tile.score_end - tile.start
            frames.append(_position_frame(chrom, tile, seq, marginal, conditional, lo, hi, k))
    return pl.concat(frames) if frames else pl.DataFrame()


def _batches(tiles: list[Tile], size: int) -> Iterator[list[Tile]]:
    for i in range(0, len(tiles), size):
        yield tiles[i : i + size]


def _position_frame(chrom, tile, seq, marginal, conditional, lo, hi, k) -> pl.DataFrame:
    m = marginal[lo:hi].exp().cpu().numpy()[:, _TO_ATCG]
    c = conditional[lo:hi].exp().cpu().numpy()[:, _TO_ATCG]
    offsets = np.arange(lo, hi)
    columns = {
        "chrom": [chrom] * (hi - lo),
        "pos": tile.start + offsets + 1,
        "ref": list(seq[lo:hi]),
        "context_bp": offsets,
        "phase": offsets % k,
    }
    columns |= {f"fns_{b}": m[:, i] for i, b in enumerate(ALPHABETIC)}
    columns |= {f"cond_{b}": c[:, i] for i, b in enumerate(ALPHABETIC)}
    return pl.DataFrame(columns).with_columns(pl.col("pos").cast(pl.Int64))


def snv_scores(positions: pl.DataFrame) -> pl.DataFrame:
    """Every possible SNV of the scanned positions (3 per ACGT reference base)."""
    frames = []
    for alt in ALPHABETIC:
        part = positions.filter(pl.col("ref") != alt).filter(pl.col("ref").is_in(list(ALPHABETIC)))
        p_ref = pl.coalesce([pl.when(pl.col("ref") == b).then(pl.col(f"fns_{b}")) for b in "ACGT"])
        c_ref = pl.coalesce([pl.when(pl.col("ref") == b).then(pl.col(f"cond_{b}")) for b in "ACGT"])
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
    return pl.concat(frames).sort("chrom", "pos", "alt")


def scan_region(
    engine: Engine, reference: Reference, chrom: str, start: int, end: int,
    window_bp: int, min_context: int,
) -> pl.DataFrame:  # fmt: skip
    """Per-position table for [start, end) (0-based, half-open) of `chrom`."""
    tiles = tile_region(reference.lengths[chrom], start, end, window_bp, min_context, engine.k)
    return scan_tiles(engine, reference, chrom, tiles)


def parse_region(region: str) -> tuple[str, int, int]:
    """'chr1:1,001-2,000' (1-based, inclusive) -> ('chr1', 1000, 2000) (0-based half-open)."""
    chrom, _, span = region.rpartition(":")
    if not chrom:
        raise ValueError(f"region {region!r} is not CHROM:START-END")
    first, _, last = span.replace(",", "").partition("-")
    start, end = int(first) - 1, int(last)
    if start < 0 or end <= start:
        raise ValueError(f"region {region!r} is empty or starts before 1")
    return chrom, start, end
