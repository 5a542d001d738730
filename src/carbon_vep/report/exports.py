"""Per-SNV scores for the annotation tools users already run, as a tabix TSV.

- `write_tabix_tsv`: per-SNV scores as a bgzipped, tabix-indexed TSV, CADD-style: a `#chrom pos
  ref alt ...` header line, sorted by contig then position, indexed on column 1 (sequence) and
  column 2 (start = end = POS, 1-based). vcfanno reads it (`columns=[5]`; the `ref`/`alt` header
  names make it match alleles, not only positions), as do tools that read CADD tables.
- `export_tabix`: a scores Parquet through it, on the reference's contigs.

A panel's scores as a VCF are report.vcf_export's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from carbon_vep.atomic import indexed_bgzf
from carbon_vep.genome.reference import open_reference

log = logging.getLogger("carbon_vep")
KEY_COLUMNS = ("chrom", "pos", "ref", "alt")
# rows formatted as text at a time: the whole table as one string would be ~50 bytes a row, twice
# (the str and its encoding), on top of the table
TSV_BATCH_ROWS = 100_000


def _contig_rank(frame: pl.DataFrame, contig_order: Sequence[str] | None) -> pl.Expr:
    """Sort key for contigs: the reference order when given, else first appearance."""
    order = list(contig_order or dict.fromkeys(frame["chrom"].to_list()))
    rank = {c: i for i, c in enumerate(order)}
    missing = set(frame["chrom"].unique().to_list()) - set(rank)
    if missing:
        raise ValueError(f"contigs {sorted(missing)} are not in the contig order")
    return pl.col("chrom").replace_strict(rank, return_dtype=pl.Int64)


def write_tabix_tsv(
    frame: pl.DataFrame,
    out_path: str | Path,
    columns: Sequence[str],
    contig_order: Sequence[str] | None = None,
) -> Path:
    """bgzip + tabix a `#chrom pos ref alt <columns>` table; returns the path of the .gz.

    `frame` needs chrom, pos (1-based), ref, alt and the named value columns. Rows are sorted
    by contig (reference order if given) and position; missing values are written as `.`.
    """
    out_path = Path(out_path)
    if not out_path.name.endswith(".gz"):
        raise ValueError(f"{out_path}: a tabix-indexed table must end in .gz")
    missing = [c for c in (*KEY_COLUMNS, *columns) if c not in frame.columns]
    if missing:
        raise ValueError(f"columns {missing} missing from the table to export")
    table = (
        frame.select(*KEY_COLUMNS, *columns)
        .with_columns(_contig_rank(frame, contig_order).alias("_rank"))
        .sort("_rank", "pos", "ref", "alt")
        .drop("_rank")
        .rename({"chrom": "#chrom"})
    )

    longest = int(table["pos"].max() or 0)  # a .csi where a position passes what a .tbi holds
    text = {"separator": "\t", "null_value": "."}
    with indexed_bgzf(out_path, longest=longest) as handle:
        handle.write(table.clear().write_csv(None, **text).encode())  # the header line
        for batch in table.iter_slices(TSV_BATCH_ROWS):
            handle.write(batch.write_csv(None, include_header=False, **text).encode())
    return out_path


def export_tabix(scores: str, value_columns: list[str], reference: str | None, out: str) -> int:
    """Per-SNV scores (Parquet) as the tabix TSV `out` (`write_tabix_tsv`), contigs in the
    reference's order when one is given. A panel's scores.parquet is written on the
    reference's contig (`ref_chrom` where present, as results.vcf.gz). Rows that cannot be
    placed (no contig, POS or REF, POS below 1, a contig the reference lacks) are left out,
    with a warning; returns their count."""
    present = pl.read_parquet_schema(scores)
    needed = ("ref_chrom", *KEY_COLUMNS, *value_columns)  # the others stay on disk
    frame = pl.read_parquet(scores, columns=[c for c in dict.fromkeys(needed) if c in present])
    if "ref_chrom" in frame.columns:
        frame = frame.with_columns(pl.coalesce("ref_chrom", "chrom").alias("chrom"))
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
    placed = frame.filter(placeable.fill_null(False))
    left_out = frame.height - placed.height
    if left_out:
        log.warning(
            "%d rows of %s cannot be placed (no contig, POS or REF, POS below 1, or a contig "
            "the reference lacks); left out of %s",
            left_out,
            scores,
            out,
        )
    write_tabix_tsv(placed, out, value_columns, order)
    return left_out
