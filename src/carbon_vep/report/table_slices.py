"""A table read back in another order than its own without holding it: export-vcf's records and
export-tabix's lines.

An export first keeps each row's sort key with its row number (a few bytes a row), sorts those,
then reads the rows back a batch at a time in that order (`batches_in_order`). Where the table
keeps a contig's rows together (a merged panel, a VCF, a table sorted by position) a batch lies
in one or two slices of the table (`slices`), read for it (`rows_by_number`). A table whose
rows are scattered against that order (a panel sorted by gene) would have every slice read for
every batch: the reads grow with the square of the rows (a 3.2 M-row panel in 50-row genes: 32
batches, each reading ~32 slices). Such a table is read once instead, each row dealt to its
batch's run of batches in a spill file (`SpillFiles`) beside the output, then the runs read
back in order: the same batches, the same rows in each, in the table's order.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.spill import SpillFiles

ROW = "_row"  # the table's row number, from 0: what a sort key points back with
# slice reads a table may take, as a multiple of its slices, before it is dealt to spill files
# instead: a table in order takes about two (a batch can straddle two slices)
REREAD_LIMIT = 3
SPILL_FILES = 128  # runs of batches dealt to at most (files open at once)
_BATCH, _RUN = "_batch", "_run"


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


def batches_in_order(
    table: pl.LazyFrame,
    batches: Sequence[pl.Series],
    rows: Callable[[pl.LazyFrame, int], pl.LazyFrame],
    size: int,
    beside: Path,
) -> Iterator[pl.DataFrame]:
    """Each batch's rows (`rows_by_number` of each of `batches`: row numbers, none empty), one
    batch after another. Read from the slices that hold each batch, unless that would read the
    table more than `REREAD_LIMIT` times over: then dealt once to spill files in a folder
    beside the output file `beside` (`dealt_batches`)."""
    n_slices = (max((int(b.max()) for b in batches), default=-1) // size) + 1
    if slice_reads(batches, size) <= REREAD_LIMIT * n_slices:
        for wanted in batches:
            yield rows_by_number(table, wanted, rows, size)
        return
    with tempfile.TemporaryDirectory(prefix=f".{beside.name}.spill-", dir=beside.parent) as tmp:
        yield from dealt_batches(table, batches, rows, size, Path(tmp) / "runs")


def slice_reads(batches: Sequence[pl.Series], size: int) -> int:
    """The slices `rows_by_number` reads for all of `batches` (every slice from a batch's first
    row to its last)."""
    return sum(int(b.max()) // size - int(b.min()) // size + 1 for b in batches)


def dealt_batches(
    table: pl.LazyFrame,
    batches: Sequence[pl.Series],
    rows: Callable[[pl.LazyFrame, int], pl.LazyFrame],
    size: int,
    folder: Path,
) -> Iterator[pl.DataFrame]:
    """`batches_in_order` by one pass over the table, a slice at a time: each row kept is dealt
    to the spill file of its batch's run (`SPILL_FILES` runs of consecutive batches at most);
    then each run is read back and cut into its batches. Held at once: a slice, a run and
    4 bytes a row of the table (each row's batch)."""
    n_rows = max(int(b.max()) for b in batches) + 1
    batch_of = np.full((n_rows - 1) // size * size + size, -1, dtype=np.int32)  # whole slices
    for number, wanted in enumerate(batches):
        batch_of[wanted.to_numpy()] = number
    n_runs = min(len(batches), SPILL_FILES)
    run = (pl.col(_BATCH).cast(pl.Int64) * n_runs // len(batches)).alias(_RUN)
    with SpillFiles(folder) as spill:
        for offset, piece in slices(table, 0, n_rows, size):
            kept = rows(piece, offset).collect()
            numbers = pl.Series(_BATCH, batch_of[kept[ROW].to_numpy()])
            kept = kept.with_columns(numbers).filter(pl.col(_BATCH) >= 0)
            for (number,), part in (
                kept.with_columns(run).partition_by(_RUN, include_key=False, as_dict=True).items()
            ):
                spill.append(number, part)
        expected = 0
        for number in spill.numbers():
            parts = spill.read(number).partition_by(_BATCH, include_key=False, as_dict=True)
            for (batch,), part in sorted(parts.items()):
                if batch != expected:
                    raise RuntimeError(f"batch {expected} of {len(batches)} dealt no row")
                expected += 1
                yield part
        if expected != len(batches):
            raise RuntimeError(f"{len(batches) - expected} of {len(batches)} batches dealt no row")
