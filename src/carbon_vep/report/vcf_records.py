"""The records of a results VCF, read from the table a batch at a time in the VCF's order.

`placed_rows`: the rows that can be VCF records, as the panel wrote them, on their reference
contig. `survey` reads the table once a slice at a time for what the header needs and each
record's key (contig rank, POS, row); `sorted_batches` reads the records back `BATCH_ROWS` at a
time in that order from the slices that hold them (`table_slices`, export-tabix's way too);
`vcf_lines` formats them.
Memory: a slice's and a batch's columns and 16 bytes a record, not the table (a whole ClinVar
VCF is ~4 M rows: the table in memory took 6.6 GB).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from carbon_vep.report.table_slices import batches_in_order, slices
from carbon_vep.variants.panel_columns import INPUT_COLUMNS, parse_positions

# rows read from the table and written at a time, their columns in polars
BATCH_ROWS = 100_000
# the sort key; `_row` (the table's row index) keeps rows of one POS in the table's order
ORDER = ("_rank", "_pos", "_row")

BASES = r"^[ACGTNacgtn]+$"
_VCF_ALT = (
    r"^(?:[ACGTNacgtn]+|\*|\.|<[^<>\s,;=]+>"  # bases, `*`, missing, symbolic
    r"|\.[ACGTNacgtn]+|[ACGTNacgtn]+\."  # single breakends
    r"|[ACGTNacgtn]*[\[\]][^\s,;\[\]]+[\[\]][ACGTNacgtn]*)$"  # breakends
)


def _as_written(table: pl.LazyFrame, names: Sequence[str]) -> pl.LazyFrame:
    """`_pos`, `_ref`, `_alt`: the record as the panel wrote it (`input_pos` / `input_ref` /
    `input_alt`, so a padded SNV `GG>AG` keeps its own POS and alleles and annotation tools
    match it; one ALT per row), else the checked `pos` / `ref` / `alt`; plain bases
    upper-cased, a missing ALT `.`."""

    def allele(column: str) -> pl.Expr:
        raw = pl.col(f"input_{column}").str.strip_chars() if has_input else pl.lit(None, pl.Utf8)
        value = pl.coalesce(raw, pl.col(column))
        return pl.when(value.str.contains(BASES)).then(value.str.to_uppercase()).otherwise(value)

    has_input = all(c in names for c in INPUT_COLUMNS)
    pos = parse_positions(pl.col("input_pos")) if has_input else pl.lit(None, pl.Int64)
    return table.with_columns(
        pl.coalesce(pos, pl.col("pos")).alias("_pos"),
        allele("ref").alias("_ref"),
        allele("alt").fill_null(".").alias("_alt"),
    )


def placed_rows(
    table: pl.LazyFrame, contig_lengths: Mapping[str, int], written: Sequence[str], offset: int = 0
) -> pl.LazyFrame:
    """The rows of `table` that can be VCF records, as the panel wrote them (`_as_written`), on
    their reference contig (`_contig`: `ref_chrom`, else the panel's `chrom`), with their row
    index (`_row`, from `offset`: `table` a slice of the whole), the `written` columns and
    those of the key only. A row is left out without CHROM, POS or REF, at a POS below 1 or
    with a REF that ends past its contig's end, or with alleles that are not VCF's (REF of
    A/C/G/T/N; ALT of bases, symbolic, `*`, a breakend or missing: not `-`, IUPAC codes or
    text with spaces)."""
    schema = table.collect_schema()
    needed = ["chrom", "pos", "ref", "alt", "ref_chrom", *INPUT_COLUMNS, *written]
    table = table.with_row_index("_row", offset=offset).select(
        "_row", *dict.fromkeys(c for c in needed if c in schema)
    )
    contig = pl.coalesce("ref_chrom", "chrom") if "ref_chrom" in schema else pl.col("chrom")
    length = pl.col("_contig").replace_strict(
        dict(contig_lengths), default=None, return_dtype=pl.Int64
    )
    placeable = (
        pl.col("chrom").is_not_null()
        & pl.col("_pos").is_not_null()
        & (pl.col("_pos") >= 1)
        & pl.col("_ref").str.contains(BASES).fill_null(False)
        & pl.col("_alt").str.contains(_VCF_ALT).fill_null(False)
        & (length.is_null() | (pl.col("_pos") + pl.col("_ref").str.len_chars() - 1 <= length))
    )
    rows = _as_written(table, schema.names()).with_columns(contig.alias("_contig"))
    rows = rows.filter(placeable)
    if "qual" in schema and "qual" in written and not schema["qual"].is_numeric():
        rows = rows.with_columns(pl.col("qual").cast(pl.Float64, strict=False))
    return rows


@dataclass
class Placed:
    """What the header and the batches need of the placed rows (`survey`): the table's row
    count, the placed rows' count, the last position a record reaches, whether an ALT is
    symbolic, the header's contigs (the reference's, then those it lacks in the order of
    their first row), each distinct FILTER text in the order of its first record, the panel
    contigs written under another name, and every record's key sorted (`ORDER`)."""

    n_rows: int
    n_placed: int
    end: int | None
    symbolic: bool
    contigs: list[tuple[str, int | None]]
    filters: list[object]
    renamed: list[tuple[object, str]]
    keys: pl.DataFrame


def _ranked(rows: pl.DataFrame, rank: Mapping[str, int]) -> pl.DataFrame:
    return rows.with_columns(
        pl.col("_contig").replace_strict(dict(rank), return_dtype=pl.UInt32).alias("_rank")
    )


def survey(table: pl.LazyFrame, contig_lengths: Mapping[str, int]) -> Placed:
    """One pass over `table` a slice at a time (`placed_rows`): what the header needs, and the
    key of every record (16 bytes a row), not the columns written. A contig the reference lacks is
    ranked after its contigs in the order of its first row, as the slices come in order."""
    n_rows = table.select(pl.len()).collect().item()
    rank = {name: i for i, name in enumerate(contig_lengths)}
    keys, firsts, renamed = [], [], set()
    n_placed, end, symbolic = 0, None, False
    has_filter = "filter" in table.collect_schema()
    for offset, piece in slices(table, 0, n_rows, BATCH_ROWS):
        rows = placed_rows(piece, contig_lengths, ["filter"], offset).collect()
        extra = rows.filter(~pl.col("_contig").is_in(list(rank)))
        for name in extra.group_by("_contig").agg(pl.col("_row").min()).sort("_row")["_contig"]:
            rank[name] = len(rank)
        rows = _ranked(rows, rank)
        n_placed += rows.height
        if rows.height:
            last = rows.select((pl.col("_pos") + pl.col("_ref").str.len_chars() - 1).max()).item()
            end = last if end is None or (last is not None and last > end) else end
            symbolic = symbolic or bool(rows["_alt"].str.starts_with("<").any())
        if has_filter:
            firsts.append(_first_of_each(rows.filter(pl.col("filter").is_not_null()), "filter"))
        moved = rows.filter(pl.col("chrom") != pl.col("_contig")).select("chrom", "_contig")
        renamed.update(moved.unique().iter_rows())
        keys.append(rows.select(*ORDER))
    filters = _first_of_each(pl.concat(firsts), "filter")["filter"].to_list() if firsts else []
    lengths = dict(contig_lengths)
    return Placed(
        n_rows=n_rows,
        n_placed=n_placed,
        end=end,
        symbolic=symbolic,
        contigs=[(name, lengths.get(name)) for name in rank],
        filters=filters,
        renamed=sorted(renamed),
        keys=pl.concat(keys).sort(*ORDER) if keys else pl.DataFrame(),
    )


def _first_of_each(rows: pl.DataFrame, column: str) -> pl.DataFrame:
    """Each distinct value of `column` with the key (`ORDER`) of its first record, in order."""
    first = pl.col(*ORDER).bottom_k_by(list(ORDER), k=1).first()
    return rows.group_by(column).agg(first).sort(*ORDER).select(column, *ORDER)


def sorted_batches(
    table: pl.LazyFrame,
    contig_lengths: Mapping[str, int],
    written: Sequence[str],
    placed: Placed,
    beside: Path,
) -> Iterator[pl.DataFrame]:
    """The placed rows in the VCF's order (`ORDER`), `BATCH_ROWS` records at a time: each
    batch's rows read back from the slices of the table that hold them (one or two where the
    table keeps a contig's rows together, as a merged panel does), or, for a table scattered
    against that order, dealt once to spill files beside the output `beside`
    (`table_slices.batches_in_order`)."""
    rank = {name: i for i, (name, _) in enumerate(placed.contigs)}
    batches = [
        placed.keys["_row"].slice(first, BATCH_ROWS)
        for first in range(0, placed.n_placed, BATCH_ROWS)
    ]

    def rows(piece: pl.LazyFrame, offset: int) -> pl.LazyFrame:
        return placed_rows(piece, contig_lengths, written, offset)

    for batch in batches_in_order(table, batches, rows, BATCH_ROWS, beside):
        yield _ranked(batch, rank).sort(*ORDER)
