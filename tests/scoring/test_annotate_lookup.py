"""Looking a checked panel up in a scan (`annotate --checked`, the workflow's from_scan recipe)
on a scan folder written by hand: the scan's contig names are used whatever the spelling the
panel was checked under, and a scored row's reason is empty, as every recipe writes it. The
merge from files annotate runs (renaming the contigs, scores in the panel's order) equals the
merge in memory."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest

from carbon_vep.errors import InputError
from carbon_vep.scoring.annotate import scan_contig_names, scan_scores
from carbon_vep.scoring.merge import merge_score_files, merge_scores
from carbon_vep.scoring.shard import SCORE_SCHEMA

SEQ = "ACGTACGTAC"


def _scan(tmp_path: Path, contig: str = "chr1") -> Path:
    scan = tmp_path / "scan"
    (scan / "positions").mkdir(parents=True)
    record = {
        "layout": 2,
        "build": "hg38",
        "reference": str(tmp_path / "ref.fa"),
        "files": [{"name": "f1", "contigs": [contig]}],
        "contigs": {contig: {"file": "f1", "length": 1000, "scored_bp": len(SEQ)}},
    }
    (scan / "scan.json").write_text(json.dumps(record))
    log_fns = {b: [-1.0 if base == b else -3.0 for base in SEQ] for b in "ACGT"}
    pl.DataFrame(
        {
            "chrom": [contig] * len(SEQ),
            "pos": list(range(1, len(SEQ) + 1)),
            "ref": list(SEQ),
            "context_bp": [100] * len(SEQ),
            **{f"log_fns_{b}": pl.Series(v, dtype=pl.Float16) for b, v in log_fns.items()},
        }
    ).write_parquet(scan / "positions" / "f1.parquet")
    return scan


def _checked(tmp_path: Path, ref_chrom: str) -> Path:
    rows = [  # pos 1 is A, pos 2 is C in the scan
        (0, ref_chrom, 1, "A", "G", "snv", "ok", ""),
        (1, ref_chrom, 2, "G", "T", "snv", "ok", ""),  # the scan's base is C
        (2, ref_chrom, 500, "A", "C", "snv", "ok", ""),  # outside the scan
        (3, ref_chrom, 3, "GT", "G", "indel", "ok", ""),
        (4, None, 3, "G", "T", "snv", "unknown_contig", "contig not in the reference"),
    ]
    frame = pl.DataFrame(
        rows,
        schema=["row_id", "ref_chrom", "pos", "ref", "alt", "variant_type", "status", "reason"],
        orient="row",
    ).with_columns(pl.col("ref_chrom").alias("chrom"), pl.lit("x").alias("source"))
    path = tmp_path / "checked.parquet"
    frame.write_parquet(path)
    return path


def _annotated(tmp_path: Path, ref_chrom: str) -> pl.DataFrame:
    """The panel looked up and merged in memory; the same from files (as `annotate` runs it)
    must be equal."""
    scan = _scan(tmp_path)
    record = json.loads((scan / "scan.json").read_text())
    path = _checked(tmp_path, ref_chrom)
    checked = pl.read_parquet(path)
    renamed = scan_contig_names(checked, record, path)
    checked = checked.with_columns(pl.col("ref_chrom").replace(renamed))
    scores = pl.concat(scan_scores(checked, scan))  # the file's SNVs, then the others
    merged = merge_scores(checked, [scores])
    assert scores["pos"].to_list() == [1, 2, 500, 3]  # by position, the indel's last
    files = []
    for start in range(0, scores.height, 3):  # two score files
        files.append(tmp_path / f"scores_{start}.parquet")
        scores.slice(start, 3).write_parquet(files[-1])
    assert merge_score_files(path, files, tmp_path / "merged.parquet", renamed) == 5
    assert pl.read_parquet(tmp_path / "merged.parquet").equals(merged)
    return merged


def test_a_scored_rows_reason_is_empty_as_every_recipes(tmp_path):
    merged = _annotated(tmp_path, "chr1")
    assert merged.select("status", "reason").rows() == [
        ("scored", ""),
        ("ref_mismatch", "the scan's base here is C"),
        ("not_scanned", "position not in the scan"),
        ("skipped", "not an SNV: a scan scores SNVs only"),
        ("unknown_contig", "contig not in the reference"),
    ]
    assert duckdb.sql(
        "select count(*) from merged where status = 'scored' and reason = ''"
    ).fetchall() == [(1,)]
    assert set(merged.schema) >= set(SCORE_SCHEMA) - {"score_status", "score_reason"}


@pytest.mark.parametrize("spelling", ["1", "NC_000001.11"])
def test_a_panel_checked_under_another_contig_spelling_is_looked_up_on_the_scans(
    tmp_path, spelling
):
    merged = _annotated(tmp_path, spelling)
    assert merged["status"].to_list() == [
        "scored",
        "ref_mismatch",
        "not_scanned",
        "skipped",
        "unknown_contig",
    ]
    assert merged["ref_chrom"].to_list()[:4] == ["chr1"] * 4
    assert merged["chrom"].to_list()[:4] == [spelling] * 4  # as the panel wrote it
    assert merged["score"][0] == pytest.approx(2.0)  # log m(A) - log m(G) = -1 - -3


def test_a_panel_on_none_of_the_scans_contigs_is_refused(tmp_path):
    scan = _scan(tmp_path)
    record = json.loads((scan / "scan.json").read_text())
    path = _checked(tmp_path, "chr2")
    with pytest.raises(InputError, match="none of the checked panel's contigs"):
        scan_contig_names(pl.read_parquet(path), record, path)
