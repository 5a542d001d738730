"""Exports for the annotation tools users already run.

- `write_tabix_tsv`: per-SNV scores as a bgzipped, tabix-indexed TSV, CADD-style: a `#chrom pos
  ref alt ...` header line, sorted by contig then position, indexed on column 1 (sequence) and
  column 2 (start = end = POS, 1-based). vcfanno reads it (`columns=[5]`; the `ref`/`alt` header
  names make it match alleles, not only positions), as do tools that read CADD tables.
- `write_results_vcf`: one VCF record per panel row (ALT), scores in INFO fields with
  Number/Type/Description, `##contig` lines from the reference; rows that were not scored keep
  their status (and reason) and carry no score, so nothing is dropped. Bgzipped and
  tabix-indexed when the name ends in `.gz` (Ensembl VEP `--custom ...,format=vcf`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pysam

from carbon_vep import columns
from carbon_vep.atomic import indexed_bgzf, indexed_file
from carbon_vep.genome.reference import open_reference

log = logging.getLogger("carbon_vep")
KEY_COLUMNS = ("chrom", "pos", "ref", "alt")
_VCF_TYPES = {pl.Float64: "Float", pl.Float32: "Float", pl.Boolean: "Flag"}
_INFO_UNSAFE = str.maketrans({" ": "_", ";": "|", "=": ":", "\t": "_", ",": "|"})


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

    with indexed_bgzf(out_path) as handle:
        handle.write(table.write_csv(None, separator="\t", null_value=".").encode())
    return out_path


# ---- VCF -----------------------------------------------------------------------------------
def info_header(name: str, dtype: pl.DataType, description: str) -> dict[str, str]:
    kind = next((v for k, v in _VCF_TYPES.items() if dtype == k), None)
    if kind is None:
        kind = "Integer" if dtype.is_integer() else "String"
    return {
        "ID": name,
        "Number": "0" if kind == "Flag" else "A",
        "Type": kind,
        "Description": description,
    }


def _info_value(value: object) -> object:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return value.translate(_INFO_UNSAFE) or None
    return value


def _vcf_header(
    contigs: Sequence[tuple[str, int | None]], infos: Sequence[dict[str, str]], source: str
) -> pysam.VariantHeader:
    header = pysam.VariantHeader()
    header.add_meta("source", source)
    for contig, length in contigs:
        header.contigs.add(contig, length=length)
    for info in infos:
        header.add_meta("INFO", items=list(info.items()))
    return header


SCORE_FIELDS = {
    "score": "carbon-vep score, larger = more damaging (recipe: ##carbon_vep_recipe)",
    "delta": "LL(alt window) - LL(ref window), mean per token or base (centered, fns)",
    "delta_rc": "the same delta on the reverse-complement windows (rc_average)",
    "ref_ll": "log-likelihood of the reference window, or log P(ref base) (nexttoken, scan)",
    "alt_ll": "log-likelihood of the alternate window, or log P(alt base) (nexttoken, scan)",
    "p_ref": "P(ref base) at the variant (nexttoken, scan)",
    "p_alt": "P(alt base) at the variant (nexttoken, scan)",
    "label_conflict": "the panel gives this variant conflicting labels (left out of metrics)",
    # a scan's scales (recipe from_scan): as the scan's TSV and calibration tables define them
    **{c.name: c.description for c in columns.CALIBRATED},
}


def default_fields(frame: pl.DataFrame) -> dict[str, str]:
    """The score columns of `frame` that hold at least one value, with their descriptions."""
    return {
        column: text
        for column, text in SCORE_FIELDS.items()
        if column in frame.columns and frame[column].null_count() < frame.height
    }


def _placed_rows(
    merged: pl.DataFrame, contig_lengths: Mapping[str, int]
) -> tuple[pl.DataFrame, list[tuple[str, int | None]]]:
    """The rows that can be VCF records (CHROM, POS and REF known) on their reference contig
    (`_contig`) in reference order, and the header's contigs: the reference's, then those of
    rows on contigs it lacks (no length)."""
    contig = pl.coalesce("ref_chrom", "chrom") if "ref_chrom" in merged.columns else pl.col("chrom")
    placeable = (
        pl.col("chrom").is_not_null() & pl.col("pos").is_not_null() & pl.col("ref").is_not_null()
    )
    rows = merged.with_columns(contig.alias("_contig")).filter(placeable)
    extra = [c for c in dict.fromkeys(rows["_contig"].to_list()) if c not in contig_lengths]
    contigs = [*contig_lengths.items(), *((c, None) for c in extra)]
    rank = {c: i for i, (c, _) in enumerate(contigs)}
    rows = rows.with_columns(
        pl.col("_contig").replace_strict(rank, return_dtype=pl.Int64).alias("_rank")
    ).sort("_rank", "pos", maintain_order=True)
    return rows, contigs


def _vcf_record(vcf: Any, row: dict, ids: Mapping[str, str]) -> Any:
    """One row as a record: its alleles (a missing ALT as `.`), its set INFO fields."""
    record = vcf.new_record(
        contig=row["_contig"], start=row["pos"] - 1, alleles=(row["ref"], row["alt"] or ".")
    )
    for column, info_id in ids.items():
        value = _info_value(row[column])
        if value is not None and value is not False:
            record.info[info_id] = value
    return record


def write_results_vcf(
    merged: pl.DataFrame,
    contig_lengths: Mapping[str, int],
    out_path: str | Path,
    fields: Mapping[str, str] | None = None,
    prefix: str = "CVEP_",
    source: str = "carbon-vep",
) -> int:
    """Write every row of a merged scores table as a VCF record, scores in INFO.

    `fields` maps a column to its INFO description (default: the score columns present, see
    `SCORE_FIELDS`); INFO ids are `prefix` + column in upper case. The recipe and
    normalisation of the scored rows go in `##carbon_vep_recipe` / `_normalization` lines.
    `status` and `reason` are always written, so unscored rows say why. Records use the
    reference contig (`ref_chrom`, else the panel's `chrom`) in reference order; contigs not in
    the reference (status `unknown_contig`) get a header line without a length and come last.
    Rows without CHROM/POS/REF cannot be VCF records: they are counted in a
    `##carbon_vep_rows_not_written` header line and the count is returned.
    """
    out_path = Path(out_path)
    all_fields = {
        "status": "carbon-vep row status (scored, ref_mismatch, skipped, ...)",
        "reason": "why the row was not scored (absent when scored)",
        **(default_fields(merged) if fields is None else fields),
    }
    missing = [c for c in (*KEY_COLUMNS, *all_fields) if c not in merged.columns]
    if missing:
        raise ValueError(f"columns {missing} missing from the table to export")
    rows, contigs = _placed_rows(merged, contig_lengths)
    n_unwritable = merged.height - rows.height
    ids = {column: prefix + column.upper() for column in all_fields}
    infos = [info_header(ids[c], merged[c].dtype, text) for c, text in all_fields.items()]
    header = _vcf_header(contigs, infos, source)
    if n_unwritable:
        header.add_meta("carbon_vep_rows_not_written", f"{n_unwritable}")
    for column in ("recipe", "normalization"):
        if column in merged.columns and merged[column].drop_nulls().len():
            values = ",".join(sorted(merged[column].drop_nulls().unique().to_list()))
            header.add_meta(f"carbon_vep_{column}", values)

    def write(path: Path) -> None:
        with pysam.VariantFile(str(path), "wz" if indexed else "w", header=header) as vcf:
            for row in rows.iter_rows(named=True):
                vcf.write(_vcf_record(vcf, row, ids))

    indexed = out_path.name.endswith(".gz")
    with indexed_file(out_path, {"preset": "vcf"} if indexed else None) as work:
        write(work)
    return n_unwritable


def export_vcf(merged: str, reference: str, extra_fields: Mapping[str, str], out: str) -> None:
    """A panel's merged results (Parquet) as the VCF `out` (`write_results_vcf`), contigs from
    the reference, INFO fields: the score columns present and `extra_fields` (column ->
    description)."""
    with open_reference(reference) as fasta:
        lengths = dict(fasta.lengths)
    frame = pl.read_parquet(merged)
    fields = {**default_fields(frame), **extra_fields}
    unwritten = write_results_vcf(frame, lengths, out, fields)
    if unwritten:
        log.warning("%d rows without CHROM/POS/REF are not VCF records (see Parquet)", unwritten)


def export_tabix(scores: str, value_columns: list[str], reference: str | None, out: str) -> None:
    """Per-SNV scores (Parquet) as the tabix TSV `out` (`write_tabix_tsv`), contigs in the
    reference's order when one is given."""
    order = None
    if reference:
        with open_reference(reference) as fasta:
            order = list(fasta.lengths)
    write_tabix_tsv(pl.read_parquet(scores), out, value_columns, order)
