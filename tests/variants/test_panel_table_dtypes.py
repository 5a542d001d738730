"""A table panel's standard columns (id, qual, filter) in the dtypes docs/outputs.md gives
them (a VCF panel's), also when empty or numeric."""

from __future__ import annotations

import polars as pl
import pytest

from carbon_vep.columns import VCF_RECORD
from carbon_vep.variants.panel import read_panel


@pytest.mark.parametrize("fmt", ["tsv", "parquet"])
def test_a_tables_empty_standard_columns_have_their_documented_dtypes(tmp_path, fmt):
    table = pl.DataFrame(
        {
            "chrom": ["chr1", "chr1"],
            "pos": [20, 21],
            "ref": ["G", "G"],
            "alt": ["T", "C"],
            "id": [None, None],
            "qual": [None, None],
            "filter": [None, None],
        }
    )
    path = tmp_path / f"panel.{fmt}"
    if fmt == "tsv":
        table.write_csv(path, separator="\t")
    else:
        table.write_parquet(path)  # all-null columns: Null in the file
    rows = read_panel(path)
    documented = {c.name: c.dtype for c in VCF_RECORD}
    assert {c: rows.schema[c] for c in ("id", "qual", "filter")} == {
        c: documented[c] for c in ("id", "qual", "filter")
    }
    assert rows["qual"].null_count() == 2


def test_a_tables_filled_standard_columns_keep_their_values(tmp_path):
    path = tmp_path / "panel.tsv"
    path.write_text("chrom\tpos\tref\talt\tid\tqual\tfilter\nchr1\t20\tG\tT\t007\t50\tPASS\n")
    rows = read_panel(path)
    assert rows.select("id", "qual", "filter").rows() == [("007", 50.0, "PASS")]
    assert rows.schema["id"] == pl.Utf8 and rows.schema["qual"] == pl.Float64


def test_a_tables_qual_with_text_stays_as_read(tmp_path):
    path = tmp_path / "panel.tsv"
    path.write_text("chrom\tpos\tref\talt\tqual\nchr1\t20\tG\tT\t.\nchr1\t21\tG\tC\t9.5\n")
    assert read_panel(path)["qual"].to_list() == [None, 9.5]
    path.write_text("chrom\tpos\tref\talt\tqual\nchr1\t20\tG\tT\thigh\n")
    assert read_panel(path)["qual"].to_list() == ["high"]
