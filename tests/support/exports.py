"""A panel's rows, unscored, through export-vcf: what the VCF carries of the panel itself."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from carbon_vep.config.stages import PanelSettings
from carbon_vep.report.vcf_export import export_vcf
from carbon_vep.variants.panel import read_panel


def export_unscored_panel(tmp_path: Path, panel: Path, info_fields: tuple[str, ...]) -> Path:
    """Every row of `panel` as `skipped` on a 1,000 bp chr1, exported with `info_fields`."""
    rows = read_panel(panel, info_fields=info_fields)
    merged = rows.with_columns(
        pl.lit("chr1").alias("ref_chrom"),
        pl.lit("skipped").alias("status"),
        pl.lit("r").alias("reason"),
        pl.lit(None, pl.Float64).alias("score"),
    )
    merged.write_parquet(tmp_path / "scores.parquet")
    fasta = tmp_path / "ref.fa"
    fasta.write_text(">chr1\n" + "ACGT" * 250 + "\n")
    out = tmp_path / "results.vcf.gz"
    settings = PanelSettings(build="hg38", info_fields=info_fields)
    export_vcf(str(tmp_path / "scores.parquet"), str(fasta), {}, str(out), str(panel), settings)
    return out
