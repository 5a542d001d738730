"""A finished scan's outputs as tests read them."""

from __future__ import annotations

from pathlib import Path

import polars as pl


def scan_tsv_rows(scan_dir: Path) -> pl.DataFrame:
    """Every SNV row of a scan's tabix TSVs (`<scan_dir>/snvs/*.tsv.gz`), as printed: `.` read
    as no value, the contig column named `chrom`."""
    return pl.concat(
        pl.read_csv(
            path,
            separator="\t",
            comment_prefix="##",
            schema_overrides={"#chrom": pl.Utf8, "phred": pl.Float32},
            null_values=".",
        )
        for path in sorted((scan_dir / "snvs").glob("*.tsv.gz"))
    ).rename({"#chrom": "chrom"})
