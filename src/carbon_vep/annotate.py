"""Annotate a panel from an existing scan: every row gets the scan's score by lookup, or a
status saying why not. No model, no torch.

The panel goes through the same ingest as every panel (aliases, REF check, SNV/indel triage);
its `ok` SNVs are joined on (contig, position) with the scan's per-base dataset
(`<scan>/positions/chrom=<contig>/part-0.parquet`, reading only the row groups whose position
range holds a panel position), then

- `scored`: score = log m(ref) − log m(alt) from the stored log-marginals (as the scan's TSV),
- `not_scanned`: the position is not in the scan (outside its regions, an N, a short run),
- `ref_mismatch`: the scan's base at the position differs from the panel's REF (a scan of
  another reference); rows that failed the checks keep their check status.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from . import columns
from .columns import SCAN_BASES, Status

_READ = ["pos", "ref", "context_bp", *(f"log_{k}_{b}" for k in ("fns", "cond") for b in "ACGT")]


def partition(scan_dir: str | Path, contig: str) -> Path:
    return Path(scan_dir) / "positions" / f"chrom={contig}" / "part-0.parquet"


def _lookup(scan_dir: str | Path, contig: str, positions: list[int]) -> pl.DataFrame:
    path = partition(scan_dir, contig)
    if not path.is_file() or not positions:
        return pl.DataFrame(schema={c: columns.schema(columns.SCAN_BASE)[c] for c in _READ})
    table = pq.read_table(path, columns=_READ, filters=[("pos", "in", positions)])
    return pl.from_arrow(table)


def annotate_panel(checked: pl.DataFrame, scan_dir: str | Path) -> pl.DataFrame:
    """`checked` (ingest's table) with the ANNOTATION columns and final statuses."""
    if not (Path(scan_dir) / "positions").is_dir():
        raise FileNotFoundError(f"{scan_dir}: no positions/ dataset (not a scan's output folder)")
    todo = checked.filter(
        (pl.col("status") == Status.OK) & (pl.col("variant_type") == "snv")
    ).select("row_id", "ref_chrom", "pos", "ref", "alt")
    found = []
    for contig in todo["ref_chrom"].unique(maintain_order=True).to_list():
        rows = todo.filter(pl.col("ref_chrom") == contig)
        bases = _lookup(scan_dir, contig, rows["pos"].unique().sort().to_list())
        found.append(rows.join(bases.rename({"ref": "scan_ref"}), on="pos", how="left"))
    schema = {**todo.schema, "scan_ref": pl.Utf8, **{c: pl.Float32 for c in _READ[2:]}}
    hits = pl.concat(found, how="diagonal_relaxed") if found else pl.DataFrame(schema=schema)

    def pick(kind: str, allele: str) -> pl.Expr:
        return pl.coalesce(
            [pl.when(pl.col(allele) == b).then(pl.col(f"log_{kind}_{b}")) for b in SCAN_BASES]
        ).cast(pl.Float32)

    scored = hits.select(
        "row_id",
        pl.when(pl.col("scan_ref").is_null()).then(pl.lit(Status.NOT_SCANNED.value))
        .when(pl.col("scan_ref") != pl.col("ref")).then(pl.lit(Status.REF_MISMATCH.value))
        .otherwise(pl.lit(Status.SCORED.value)).alias("_status"),
        pl.when(pl.col("scan_ref").is_null()).then(pl.lit("position not in the scan"))
        .when(pl.col("scan_ref") != pl.col("ref"))
        .then(pl.format("the scan's base here is {}", pl.col("scan_ref"))).alias("_reason"),
        (pick("fns", "ref") - pick("fns", "alt")).alias("score"),
        (pick("cond", "ref") - pick("cond", "alt")).alias("score_conditional"),
        pick("fns", "ref").exp().alias("p_ref"),
        pick("fns", "alt").exp().alias("p_alt"),
        pl.col("context_bp").cast(pl.Int64).alias("window_bp"),
    )  # fmt: skip
    valid = pl.col("_status") == Status.SCORED.value
    scored = scored.with_columns(
        [pl.when(valid).then(pl.col(c.name)).alias(c.name) for c in columns.ANNOTATION]
    )
    out = checked.drop([c.name for c in columns.ANNOTATION], strict=False).join(
        scored, on="row_id", how="left"
    )
    return out.with_columns(
        pl.coalesce("_status", "status").alias("status"),
        pl.when(pl.col("_status").is_not_null()).then(pl.col("_reason"))
        .otherwise(pl.col("reason")).alias("reason"),
    ).drop("_status", "_reason").sort("row_id")  # fmt: skip
