"""Per-SNV scores for the annotation tools users already run, as a tabix TSV.

- `write_tabix_tsv`: per-SNV scores as a bgzipped, tabix-indexed TSV, CADD-style: a `#chrom pos
  ref alt ...` header line, sorted by contig then position, indexed on column 1 (sequence) and
  column 2 (start = end = POS, 1-based). vcfanno reads it (`columns=[5]`; the `ref`/`alt` header
  names make it match alleles, not only positions), as do tools that read CADD tables.
- `export_tabix`: a scores Parquet through it, on the reference's contigs.

Neither holds the table: one pass keeps each line's sort key (contig rank, POS, row: 16 bytes a
row), then the lines are read back `TSV_BATCH_ROWS` at a time in that order (`table_slices`, as
export-vcf does: from the slices of the table that hold them, or, for a table scattered against
that order, dealt once to spill files beside the output) and formatted a batch at a time.

A panel's scores as a VCF are report.vcf_export's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import polars as pl

from carbon_vep.atomic import indexed_bgzf
from carbon_vep.errors import InputError, reading_parquet
from carbon_vep.genome.reference import open_reference
from carbon_vep.report.table_slices import ROW, batches_in_order, slices

log = logging.getLogger("carbon_vep")
KEY_COLUMNS = ("chrom", "pos", "ref", "alt")
# rows read back and formatted as text at a time: the whole table as one string would be ~50
# bytes a row, twice (the str and its encoding), on top of the table
TSV_BATCH_ROWS = 100_000
# what of a slice of the table is written: its rows (numbered `ROW`) that can be placed
Rows = Callable[[pl.LazyFrame], pl.LazyFrame]


def _sort_keys(
    table: pl.LazyFrame, rows: Rows, contig_order: Sequence[str] | None
) -> tuple[pl.DataFrame, dict[str, int]]:
    """Each written row's key (contig rank, POS, row number: 16 bytes), sorted, and the
    contigs' ranks: the reference order when given, else first appearance. One pass a slice
    at a time, as the slices come in order a contig is ranked at its first row."""
    rank = {c: i for i, c in enumerate(contig_order or ())}
    n_rows = table.select(pl.len()).collect().item()
    keys = []
    for offset, piece in slices(table, 0, n_rows, TSV_BATCH_ROWS):
        placed = rows(piece.with_row_index(ROW, offset=offset)).select("chrom", "pos", ROW)
        placed = placed.collect()
        firsts = placed.group_by("chrom").agg(pl.col(ROW).min()).sort(ROW)["chrom"]
        new = [c for c in firsts if c not in rank]
        if new and contig_order:
            raise ValueError(f"contigs {sorted(new)} are not in the contig order")
        rank.update((c, len(rank) + i) for i, c in enumerate(new))
        keys.append(placed.select(_ranked(rank), "pos", ROW))
    if not keys:
        return pl.DataFrame(schema={"_rank": pl.UInt32, "pos": pl.Int64, ROW: pl.UInt32}), rank
    return pl.concat(keys).sort("_rank", "pos", ROW), rank


def _ranked(rank: dict[str, int]) -> pl.Expr:
    return pl.col("chrom").replace_strict(rank, return_dtype=pl.UInt32).alias("_rank")


def _batch_ends(keys: pl.DataFrame, size: int) -> Iterator[tuple[int, int]]:
    """Batches of about `size` sorted keys, each ending where a position ends: a position's
    lines are sorted by their alleles within a batch, so none is split over two."""
    run = pl.col("_rank").ne_missing(pl.col("_rank").shift()) | pl.col("pos").ne_missing(
        pl.col("pos").shift()
    )
    starts = keys.select(pl.arg_where(run)).to_series().to_numpy()
    first = 0
    while first < keys.height:
        after = starts.searchsorted(first + size)  # the first position starting past the size
        end = int(starts[after]) if after < starts.size else keys.height
        yield first, end
        first = end


def _write_sorted(
    table: pl.LazyFrame,
    rows: Rows,
    out_path: Path,
    columns: Sequence[str],
    keys: pl.DataFrame,
    rank: dict[str, int],
) -> None:
    size = TSV_BATCH_ROWS

    def lines(piece: pl.LazyFrame, offset: int) -> pl.LazyFrame:
        return rows(piece.with_row_index(ROW, offset=offset)).select(ROW, *KEY_COLUMNS, *columns)

    header = lines(table.head(0), 0).drop(ROW).rename({"chrom": "#chrom"}).collect()
    longest = int(keys["pos"].max() or 0)  # a .csi where a position passes what a .tbi holds
    text = {"separator": "\t", "null_value": "."}
    with indexed_bgzf(out_path, longest=longest) as handle:
        handle.write(header.write_csv(None, **text).encode())  # the header line
        batches = [keys[ROW][first:end] for first, end in _batch_ends(keys, size)]
        for batch in batches_in_order(table, batches, lines, size, out_path):
            batch = batch.with_columns(_ranked(rank)).sort("_rank", "pos", "ref", "alt", ROW)
            batch = batch.drop("_rank", ROW).rename({"chrom": "#chrom"})
            handle.write(batch.write_csv(None, include_header=False, **text).encode())


def _keyed(
    frame: pl.DataFrame | pl.LazyFrame,
    out_path: Path,
    columns: Sequence[str],
    contig_order: Sequence[str] | None,
    rows: Rows,
) -> tuple[pl.LazyFrame, pl.DataFrame, dict[str, int]]:
    """The table to export, checked, with its lines' sorted keys and contig ranks."""
    if not out_path.name.endswith(".gz"):
        raise InputError(out_path, "a tabix-indexed table must end in .gz")
    table = frame.lazy()
    present = rows(table.with_row_index(ROW)).collect_schema()
    missing = [c for c in (*KEY_COLUMNS, *columns) if c not in present]
    if missing:
        raise ValueError(f"columns {missing} missing from the table to export")
    return table, *_sort_keys(table, rows, contig_order)


def write_tabix_tsv(
    frame: pl.DataFrame | pl.LazyFrame,
    out_path: str | Path,
    columns: Sequence[str],
    contig_order: Sequence[str] | None = None,
) -> Path:
    """bgzip + tabix a `#chrom pos ref alt <columns>` table; returns the path of the .gz.

    `frame` needs chrom, pos (1-based), ref, alt and the named value columns. Rows are sorted
    by contig (reference order if given), position and alleles, rows of one key in the
    table's order; missing values are written as `.`.
    """
    out_path = Path(out_path)
    table, keys, rank = _keyed(frame, out_path, columns, contig_order, _every_row)
    _write_sorted(table, _every_row, out_path, columns, keys, rank)
    return out_path


def _every_row(piece: pl.LazyFrame) -> pl.LazyFrame:
    return piece


def scan_table(path: str | Path, needed: Sequence[str]) -> tuple[pl.LazyFrame, pl.Schema]:
    """The Parquet file a user named, lazily, with its schema; a file that cannot be read, or
    lacks a column of `needed`, is an error naming it (and the columns it has)."""
    with reading_parquet(path):
        table = pl.scan_parquet(path)
        schema = table.collect_schema()
    missing = [c for c in dict.fromkeys(needed) if c not in schema]
    if missing:
        has = ", ".join(schema)
        raise InputError(path, f"no column {', '.join(missing)} (its columns: {has})")
    return table, schema


def export_tabix(scores: str, value_columns: list[str], reference: str | None, out: str) -> int:
    """Per-SNV scores (Parquet) as the tabix TSV `out` (`write_tabix_tsv`), contigs in the
    reference's order when one is given. A panel's scores.parquet is written on the
    reference's contig (`ref_chrom` where present, as results.vcf.gz). Rows that cannot be
    placed (no contig, POS or REF, POS below 1, a contig the reference lacks) are left out,
    with a warning; returns their count."""
    table, present = scan_table(scores, (*KEY_COLUMNS, *value_columns))
    needed = ("ref_chrom", *KEY_COLUMNS, *value_columns)  # the others stay on disk
    kept = [c for c in dict.fromkeys(needed) if c in present]
    order = None
    placeable = (
        pl.col("chrom").is_not_null()
        & pl.col("pos").is_not_null()
        & (pl.col("pos") >= 1)
        & pl.col("ref").is_not_null()
    )
    if reference:
        with open_reference(reference) as fasta:
            order = list(fasta.lengths)
        placeable &= pl.col("chrom").is_in(order)

    def placed(piece: pl.LazyFrame) -> pl.LazyFrame:
        piece = piece.select(ROW, *kept)
        if "ref_chrom" in present:
            piece = piece.with_columns(pl.coalesce("ref_chrom", "chrom").alias("chrom"))
        return piece.filter(placeable.fill_null(False))

    table, keys, rank = _keyed(table, Path(out), value_columns, order, placed)
    left_out = table.select(pl.len()).collect().item() - keys.height
    if left_out:
        log.warning(
            "%d rows of %s cannot be placed (no contig, POS or REF, POS below 1, or a contig "
            "the reference lacks); left out of %s",
            left_out,
            scores,
            out,
        )
    _write_sorted(table, placed, Path(out), value_columns, keys, rank)
    return left_out
