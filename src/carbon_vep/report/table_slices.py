"""A table read back in another order than its own without holding it: export-vcf's records and
export-tabix's lines.

An export first keeps each row's sort key with its row number (a few bytes a row), sorts those,
then reads the rows back a batch at a time in that order: `rows_by_number` reads a batch's rows
from the slices of the table (`slices`) that hold them. Where the table keeps a contig's rows
together (a merged panel, a VCF, a table sorted by position) a batch lies in one or two slices;
a shuffled table reads every slice for every batch: slower, the memory the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import polars as pl

ROW = "_row"  # the table's row number, from 0: what a sort key points back with


def slices(
    table: pl.LazyFrame, start: int, stop: int, size: int
) -> Iterator[tuple[int, pl.LazyFrame]]:
    """The table's rows `start` to `stop` as slices of `size` rows, each with its first row's
    number (on a grid of `size`, so a slice of a Parquet scan written in row groups of `size`
    decodes only its own)."""
    for offset in range(start - start % size, stop, size):
        yield offset, table.slice(offset, size)


def rows_by_number(
    table: pl.LazyFrame,
    wanted: pl.Series,
    rows: Callable[[pl.LazyFrame, int], pl.LazyFrame],
    size: int,
) -> pl.DataFrame:
    """The rows of `table` whose number is in `wanted` (not empty), in the table's order.
    `rows(piece, offset)` gives what to keep of a slice, with `ROW` numbered from `offset`."""
    pieces = [
        rows(piece, offset).filter(pl.col(ROW).is_in(wanted.implode())).collect()
        for offset, piece in slices(table, wanted.min(), wanted.max() + 1, size)
    ]
    return pl.concat(pieces)
