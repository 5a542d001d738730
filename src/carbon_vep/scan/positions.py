"""A scan's per-base Parquet files (no torch): the chunk files and their merge into output
files.

A scan job writes its chunk as Parquet row groups as it goes (`BaseWriter`): one row per scored
base (columns.SCAN_BASE). `merge_group` streams the rows of one output file's contigs (the
plan's `files`: a large contig alone, or a run of small ones) from the chunks holding them, in
plan order (which is reference order), into `positions/<name>.parquet`: per-base rows with
their `chrom`; the folder is one dataset that pyarrow, polars and DuckDB read as one table
(row-group statistics on `chrom` and `pos` let them skip to one contig or region). Its SNVs are
counted from that file (`scan.counts`) and its TSV written from it (`scan.tsv`).

`<name>` is the contig's name encoded (`genome.contigs.encode_name`), or
`<first contig>+<N more>` for a shared file. Nothing is half-written: every file goes to a
temporary name and is renamed when complete, and the merge reads only completed chunks; the
same chunks give byte-identical merged files.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from carbon_vep import columns
from carbon_vep.atomic import PendingFile

BASE_SCHEMA = columns.schema(columns.SCAN_BASE)
_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 9,
    "use_dictionary": ["chrom", "ref", "phase"],
    "column_encoding": {"pos": "DELTA_BINARY_PACKED", "context_bp": "DELTA_BINARY_PACKED"},
    # row-group min/max of chrom and pos: readers (annotate, DuckDB, polars) skip row groups
    "write_statistics": ["chrom", "pos"],
    "store_schema": False,
}
ROW_GROUP_ROWS = 1 << 20  # bases per row group of the merged dataset (~12 MB written)
# the fewest bases a scan chunk's row group holds: a batch of tiles is one, but a draft
# assembly's scaffolds make a batch each (tiles of one length are batched), and a chunk of
# thousands of row groups of a few hundred bases costs each merge that reads it ~3 ms a group
CHUNK_GROUP_MIN_ROWS = 1 << 16


class BaseWriter:
    """Per-base rows into one Parquet file, a row group per `write` (or, with `min_rows`, per
    run of writes holding at least that many rows: the rest held until then or `close`), under
    a temporary name until `close` renames it into place (a killed job leaves no file at
    `path`)."""

    def __init__(self, path: str | Path, min_rows: int = 0) -> None:
        self.path = Path(path)
        self.file = PendingFile(self.path)  # a killed writer's file removed first
        self.schema = pl.DataFrame(schema=BASE_SCHEMA).to_arrow().schema
        self.writer = pq.ParquetWriter(self.file.tmp, self.schema, **_WRITE_OPTIONS)
        self.rows, self.min_rows = 0, min_rows
        self._held: list[pl.DataFrame] = []
        self._held_rows = 0

    def write(self, frame: pl.DataFrame) -> None:
        if frame.height:
            self._held.append(frame)
            self._held_rows += frame.height
            self.rows += frame.height
            if self._held_rows >= self.min_rows:
                self._flush()

    def _flush(self) -> None:
        if self._held:
            self.writer.write_table(pl.concat(self._held).to_arrow().cast(self.schema))
            self._held, self._held_rows = [], 0

    def close(self) -> None:
        self._flush()
        self.writer.close()
        self.file.publish()

    def abort(self) -> None:
        self.writer.close()
        self.file.discard()


def read_chunk_rows(chunks: Sequence[str | Path], contigs: Sequence[str]) -> Iterator[pl.DataFrame]:
    """The rows of `contigs` in the chunk files, row group by row group, in order: each chunk is
    read once, whatever the number of contigs; a row group of one other contig (its statistics
    say so) is not read at all. The contigs are made a Series once: built per row group, they
    made a merge of many scaffolds quadratic (a row group a scaffold, each against them all)."""
    wanted, names = set(contigs), pl.Series("chrom", list(contigs), dtype=pl.Utf8)
    for path in chunks:
        parquet = pq.ParquetFile(path)
        column = parquet.schema_arrow.get_field_index("chrom")
        for group in range(parquet.num_row_groups):
            only = _only_value(parquet.metadata.row_group(group).column(column))
            if only is not None and only not in wanted:
                continue
            frame = pl.from_arrow(parquet.read_row_group(group))
            part = frame if only is not None else frame.filter(pl.col("chrom").is_in(names))
            if part.height:
                yield part


def _only_value(column: pq.ColumnChunkMetaData) -> str | None:
    """The one value of a row group's column where its statistics show a single one."""
    stats = column.statistics
    if stats is None or not stats.has_min_max or stats.null_count or stats.min != stats.max:
        return None
    return stats.min


def _in_order(frames: Iterator[pl.DataFrame], contigs: Sequence[str]) -> Iterator[pl.DataFrame]:
    """`frames`, checked to run through `contigs` in the given order, each by rising position
    (what tabix and the annotate lookup rely on); a chunk out of order stops the merge."""
    names = pl.Series(list(contigs), dtype=pl.Utf8)  # once: not a contig-sized Series a frame
    ranks = pl.Series(range(len(names)), dtype=pl.Int64)
    last = (-1, 0)
    for frame in frames:
        order = frame.select(
            pl.col("chrom").replace_strict(names, ranks, return_dtype=pl.Int64).alias("rank"), "pos"
        )
        keys = order["rank"].cast(pl.Int64) * (1 << 32) + order["pos"]
        first = (order["rank"][0], order["pos"][0])
        if first <= last or not keys.diff().drop_nulls().gt(0).all():
            chrom = frame["chrom"][0]
            raise ValueError(f"{chrom}: chunk rows out of order at {frame['pos'][0]}")
        last = (order["rank"][-1], order["pos"][-1])
        yield frame


def _row_groups(frames: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    """Frames regrouped into row groups of ROW_GROUP_ROWS (the last one shorter): large row
    groups compress well; annotate still reads only the groups holding its positions."""
    pending: list[pl.DataFrame] = []
    held = 0
    for frame in frames:
        pending.append(frame)
        held += frame.height
        while held >= ROW_GROUP_ROWS:
            merged = pl.concat(pending)
            yield merged.head(ROW_GROUP_ROWS)
            pending, held = [merged.slice(ROW_GROUP_ROWS)], held - ROW_GROUP_ROWS
    if held:
        yield pl.concat(pending)


def merge_plan_file(
    entry: Mapping[str, Any], chunks: Sequence[str | Path], parquet_out: str | Path
) -> dict[str, Any]:
    """One output file of the plan (`entry`, scan.plan.plan_file) from its chunks: merge_group,
    then the bases written checked against the bases the plan scores."""
    stats = merge_group(chunks, entry["contigs"], parquet_out)
    if stats["bases"] != entry["scored_bp"]:
        raise ValueError(
            f"{entry['name']}: the chunks hold {stats['bases']} bases of its contigs; "
            f"the plan scores {entry['scored_bp']}"
        )
    stats.pop("bases_per_contig")
    return stats


def merge_group(
    chunks: Sequence[str | Path], contigs: Sequence[str], parquet_out: str | Path
) -> dict[str, Any]:
    """Stream the rows of `contigs` (reference order) in `chunks` into one Parquet file (its
    SNVs are counted for the calibration from that file, in a job of its own: count_positions)."""
    writer = BaseWriter(parquet_out)
    start, rows, bases = time.monotonic(), 0, dict.fromkeys(contigs, 0)
    try:
        for part in _row_groups(_in_order(read_chunk_rows(chunks, contigs), contigs)):
            writer.write(part)
            rows += part.height
            for chrom, n in part.group_by("chrom").len().iter_rows():
                bases[chrom] += n
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return {
        "contigs": len(contigs),
        "bases": rows,
        "bases_per_contig": bases,
        "snvs": 3 * rows,
        "parquet_bytes": Path(parquet_out).stat().st_size,
        "merge_s": round(time.monotonic() - start, 3),
    }
