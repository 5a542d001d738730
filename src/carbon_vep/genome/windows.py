"""Windows around variants, 6-mer alignment, reverse complement, and deterministic shards.

Coordinates: panels are 1-based; windows are 0-based half-open [start, end) on the reference
contig; `variant_index` is the 0-based offset of the variant base inside the window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl

from carbon_vep.columns import VARIANT_KEY, Status, repeats_previous_key

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
    """The scoreable variants, one row per key (duplicates in the panel are scored once),
    sorted by the key."""
    scoreable = checked.filter(pl.col("status") == Status.OK)
    ordered = scoreable.select(VARIANT_KEY).sort(VARIANT_KEY)
    # a duplicate is dropped once sorted (it is the row before it again): `unique`'s hash table
    # of every key held 2.5 times what the sort holds (160 MB against 65 at 0.47 M keys)
    return ordered.filter(~repeats_previous_key())


@dataclass(frozen=True)
class ShardFill:
    """Where the walk of `shard_numbers` stands after some variants: the shard being filled,
    the variants it holds, and the last site (ref_chrom, pos) seen."""

    shard: int = 0
    filled: int = 0
    site: tuple[str, int] | None = None


def shard_numbers(
    sites: Iterable[tuple[str, int]], shard_size: int, fill: ShardFill = ShardFill()
) -> tuple[list[int], ShardFill]:
    """Each variant's shard, from its site (ref_chrom, pos) in key order, and the walk's state
    after them: a new shard starts at a new site once the current one holds `shard_size`
    variants. `fill`: the state after the variants before these (a batch continues the last)."""
    shard, filled, last_site = fill.shard, fill.filled, fill.site
    numbers: list[int] = []
    for site in sites:
        if site != last_site and filled >= shard_size:
            shard, filled = shard + 1, 0
        numbers.append(shard)
        filled += 1
        last_site = site
    return numbers, ShardFill(shard, filled, last_site)


def _check_shard_size(shard_size: int) -> None:
    if shard_size < 1:
        raise ValueError("shard_size must be >= 1")


def assign_shards(variants: pl.DataFrame, shard_size: int) -> pl.DataFrame:
    """Deterministic shard ids: sorted by key, whole sites kept together, ~shard_size per shard.

    Alleles of one site share a reference window, so they are never split across shards.
    """
    _check_shard_size(shard_size)
    ordered = variants.sort(VARIANT_KEY)
    numbers, _ = shard_numbers(ordered.select("ref_chrom", "pos").iter_rows(), shard_size)
    return ordered.with_columns(pl.Series("shard", numbers, dtype=pl.Int64))


def _runs(sharded: pl.DataFrame) -> Iterator[tuple[int, pl.DataFrame]]:
    """(shard, its rows without the `shard` column) for each run of one shard in `sharded`:
    slices of the frame, not a pass over every row a shard."""
    runs = sharded["shard"].rle().struct.unnest()
    offset = 0
    for length, shard in runs.select("len", "value").iter_rows():
        yield shard, sharded.slice(offset, length).drop("shard")
        offset += length


def stream_shards(batches: Iterable[pl.DataFrame], shard_size: int) -> Iterator[pl.DataFrame]:
    """The shards of `assign_shards` (each without its `shard` column, in shard order) of the
    variants `batches` hold one after the other in key order (a site's alleles may straddle
    two batches), a batch at a time: each shard is yielded once complete (the next one begins
    or the batches end), so a batch and a shard are held, not every variant. No rows in any
    batch: one empty shard of the first batch's columns."""
    _check_shard_size(shard_size)
    fill, held, held_shard, columns = ShardFill(), [], 0, None
    for batch in batches:
        columns = batch.clear() if columns is None else columns
        numbers, fill = shard_numbers(
            batch.select("ref_chrom", "pos").iter_rows(), shard_size, fill
        )
        sharded = batch.with_columns(pl.Series("shard", numbers, dtype=pl.Int64))
        for shard, part in _runs(sharded):
            if shard != held_shard:
                yield _joined(held)
                held, held_shard = [], shard
            held.append(part)
    if held:
        yield _joined(held)
    elif columns is not None:
        yield columns


def _joined(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """A shard's parts from consecutive batches as one frame, one chunk (as a slice of the
    whole sorted frame was: the Parquet file written from it is the same)."""
    return pl.concat(parts).rechunk() if len(parts) > 1 else parts[0]
