"""Scan tiles: how a region is cut into windows so that one forward pass per tile scores every
base, each with at least `min_context` bp of left context. Geometry only (no torch), so plans
and tests need no model.
"""

from __future__ import annotations

from dataclasses import dataclass

from carbon_vep.errors import InputError


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


def tile_segment(
    segment: tuple[int, int],
    start: int,
    end: int,
    window_bp: int,
    min_context: int,
    k: int = 6,
    anchor: int | None = None,
) -> list[Tile]:
    """Tiles scoring [start, end) inside a run of ACGT bases `segment` = [seg_start, seg_end)
    (a contig, or the bases between two assembly gaps): context reaches back to the segment's
    start at most, as at a contig start, so no tile holds an N. Each tile starts `min_context`
    bp before its first scored base (or at the segment start) and is `window_bp` long, cut to
    whole k-mers; unlike `tile_region`, the last bases of the segment that fit no whole k-mer
    from there are scored by a tile that ends on the segment's end. Only a segment shorter than
    k bases is left unscored.

    The tiling runs from `anchor` (default `start`): where the scan's target begins in this
    segment. A chunk of a longer target passes the target's anchor, so its tiles are the
    target's own tiles (the one cut by the chunk's edge scored in part on each side) and a
    base's tile, and its scores, do not depend on how the scan was cut into jobs."""
    seg_start, seg_end = segment
    anchor = start if anchor is None else anchor
    if not seg_start <= anchor <= start <= end <= seg_end:
        raise ValueError(
            f"[{start}, {end}) from {anchor} is not inside the segment [{seg_start}, {seg_end})"
        )
    window_bp -= window_bp % k
    if window_bp - min_context < k:
        raise ValueError(f"window_bp {window_bp} leaves no room after min_context {min_context}")
    if seg_end - seg_start < k:
        return []
    tiles = []
    pos = anchor
    while pos < end:
        tile_start = max(seg_start, pos - min_context)
        span = min(window_bp, (seg_end - tile_start) // k * k)
        if tile_start + span <= pos:  # the segment's last bases: a tile ending on its end
            span = min(window_bp, (seg_end - seg_start) // k * k)
            tile_start = seg_end - span
        score_end = min(end, tile_start + span)
        if score_end > start:  # tiles before `start` belong to an earlier chunk
            tiles.append(Tile(tile_start, tile_start + span, max(pos, start), score_end))
        pos = score_end
    return tiles


def tiles_for_positions(
    positions: list[int], contig_length: int, window_bp: int, min_context: int, k: int = 6
) -> list[Tile]:
    """Tiles for sparse 0-based positions, on a grid fixed by the contig: a position's tile is
    the `tile_region` tile of its grid cell [g, g + stride), g a multiple of the stride
    (window_bp - min_context, after rounding to whole k-mers). So a position's window, and its
    score, depend on the position alone, not on the other positions of its shard."""
    stride = window_bp - window_bp % k - min_context
    if stride < k:
        raise ValueError(f"window_bp {window_bp} leaves no room after min_context {min_context}")
    cells = sorted({pos // stride * stride for pos in positions})
    return [
        tile_region(contig_length, g, min(g + stride, contig_length), window_bp, min_context, k)[0]
        for g in cells
        if g < contig_length
    ]


def parse_region(region: str, what: str = "--region") -> tuple[str, int, int]:
    """'chr1:1,001-2,000' (1-based, inclusive) -> ('chr1', 1000, 2000) (0-based half-open); a
    region that is not one is an InputError naming `what` (the flag or config key)."""
    chrom, _, span = region.rpartition(":")
    first, dash, last = span.replace(",", "").partition("-")
    if not chrom or not dash or not first.isdigit() or not last.isdigit():
        raise InputError(what, f"region {region!r} is not CHROM:START-END (1-based, inclusive)")
    start, end = int(first) - 1, int(last)
    if start < 0 or end <= start:
        raise InputError(
            what,
            f"region {region!r} is empty or starts before 1 (START-END is 1-based and "
            "inclusive, START <= END)",
        )
    return chrom, start, end
