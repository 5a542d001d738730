"""Windows around variants, 6-mer alignment, reverse complement, and deterministic shards.

Coordinates: panels are 1-based; windows are 0-based half-open [start, end) on the reference
contig; `variant_index` is the 0-based offset of the variant base inside the window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl

from carbon_vep.columns import VARIANT_KEY, Status

_COMPLEMENT = str.maketrans("ACGTNacgtn", "TGCANtgcan")


@dataclass(frozen=True)
class Window:
    start: int
    end: int
    variant_index: int

    @property
    def length(self) -> int:
        return self.end - self.start


def centered_window(pos: int, contig_length: int, window_bp: int) -> Window:
    """The published centered window: genome[max(0,p-flank) : min(len,p+flank)], p = pos-1,
    flank = window_bp // 2."""
    p, flank = pos - 1, window_bp // 2
    start = max(0, p - flank)
    return Window(start, min(contig_length, p + flank), p - start)


def right_end_window(pos: int, contig_length: int, window_bp: int) -> Window:
    """The bases strictly before the variant: genome[max(0,p-window_bp) : p]; the variant comes
    next (`contig_length` is not needed: the window ends before the variant)."""
    p = pos - 1
    start = max(0, p - window_bp)
    return Window(start, p, p - start)


def kmer_usable_length(length: int, k: int = 6) -> int:
    """Length kept when a sequence is cut to whole k-mers from the right (seq[:L - L % k])."""
    return length - length % k


def prepare_right_context(context: str, k: int = 6) -> str:
    """Strip leading N, then trim from the LEFT to a multiple of k (variant = next base 0)."""
    context = context.lstrip("N")
    return context[len(context) % k :]


def reverse_complement(seq: str) -> str:
    return seq.translate(_COMPLEMENT)[::-1]


def rc_index(window_length: int, index: int) -> int:
    """Index of a base after reverse-complementing a window of `window_length` bases."""
    return window_length - 1 - index


def substitute(seq: str, index: int, ref: str, alt: str) -> str:
    """`seq` with `ref` at `index` replaced by `alt`; refuses if the window disagrees with REF."""
    if seq[index : index + len(ref)] != ref:
        found = seq[index : index + len(ref)]
        raise ValueError(f"window has {found!r} at {index}, expected REF {ref!r}")
    return seq[:index] + alt + seq[index + len(ref) :]


def add_windows(
    variants: pl.DataFrame,
    lengths: dict[str, int],
    window: Callable[[int, int, int], Window],
    window_bp: int,
) -> pl.DataFrame:
    """Attach window_start / window_end / variant_index, cut by a recipe's `window` function."""
    # into int64 arrays as they are cut: a Window object a row would hold ~0.2 kB of Python
    # objects per variant at once (~1 GB for a ClinVar-size panel)
    bounds = np.empty((3, variants.height), dtype=np.int64)
    for i, (chrom, pos) in enumerate(variants.select("ref_chrom", "pos").iter_rows()):
        w = window(pos, lengths[chrom], window_bp)
        bounds[:, i] = w.start, w.end, w.variant_index
    return variants.with_columns(
        pl.Series("window_start", bounds[0], dtype=pl.Int64),
        pl.Series("window_end", bounds[1], dtype=pl.Int64),
        pl.Series("variant_index", bounds[2], dtype=pl.Int64),
    )


# the checked panel's columns unique_variants reads: make-shards reads no others
UNIQUE_VARIANT_INPUT = ("status", *VARIANT_KEY)


def unique_variants(checked: pl.DataFrame) -> pl.DataFrame:
    """The scoreable variants, one row per key (duplicates in the panel are scored once)."""
    scoreable = checked.filter(pl.col("status") == Status.OK)
    return scoreable.select(VARIANT_KEY).unique().sort(VARIANT_KEY)


def assign_shards(variants: pl.DataFrame, shard_size: int) -> pl.DataFrame:
    """Deterministic shard ids: sorted by key, whole sites kept together, ~shard_size per shard.

    Alleles of one site share a reference window, so they are never split across shards.
    """
    if shard_size < 1:
        raise ValueError("shard_size must be >= 1")
    ordered = variants.sort(VARIANT_KEY)
    shard_ids: list[int] = []
    shard, filled, last_site = 0, 0, None
    for site in ordered.select("ref_chrom", "pos").iter_rows():
        if site != last_site and filled >= shard_size:
            shard, filled = shard + 1, 0
        shard_ids.append(shard)
        filled += 1
        last_site = site
    return ordered.with_columns(pl.Series("shard", shard_ids, dtype=pl.Int64))


def split_shards(sharded: pl.DataFrame) -> Iterator[pl.DataFrame]:
    """Each shard of `assign_shards`' frame in shard order, without its `shard` column: slices
    of the frame (its rows are sorted by shard), not a pass over every row per shard. An empty
    frame gives one empty shard."""
    if not sharded.height:
        yield sharded.drop("shard")
        return
    sizes = sharded["shard"].rle()
    offset = 0
    for length in sizes.struct.field("len").to_list():
        yield sharded.slice(offset, length).drop("shard")
        offset += length
