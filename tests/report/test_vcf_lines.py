"""A results VCF's records formatted by polars (`vcf_lines.RecordLines`) are the text htslib
writes for the same record (`pysam_line`: a pysam record built as export-vcf built them before
it formatted them itself), field by field, on values chosen to catch each rule: a Float
rounded to 32 bits and written `%g`, an Integer at the edges of what BCF stores, a Flag, text
with the characters INFO cannot hold, FILTER lists as htslib keeps them, IDs, QUAL."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from carbon_vep.report.vcf_export import _vcf_header
from carbon_vep.report.vcf_lines import RecordLines, pysam_line

INFOS = {
    "score": {"ID": "CVEP_SCORE", "Number": "A", "Type": "Float", "Description": "s"},
    "status": {"ID": "CVEP_STATUS", "Number": "A", "Type": "String", "Description": "s"},
    "count": {"ID": "N", "Number": "1", "Type": "Integer", "Description": "n"},
    "flag": {"ID": "F", "Number": "0", "Type": "Flag", "Description": "f"},
    "mc": {"ID": "MC", "Number": ".", "Type": "String", "Description": "m"},
    "af32": {"ID": "AF", "Number": "A", "Type": "Float", "Description": "a"},
}
FILTERS = {"q10": "low quality", "lowq": "x", "a_b": "spaces"}


def _header(infos=INFOS):
    return _vcf_header([("chr1", 1_000_000), ("chrX", None)], list(infos.values()), FILTERS, "t")


def _batch(n: int, seed: int = 3) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    magnitudes = 10.0 ** rng.integers(-9, 10, n)
    floats = rng.normal(size=n) * magnitudes
    specials = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-4, 9.99999e-5, 999999.5, 1e39, 1 / 3]
    floats[: len(specials)] = specials
    ints = rng.integers(-1000, 1000, n).astype(np.int64)
    edges = [2**31 - 1, -(2**31) + 8, -(2**31) + 1, -(2**31) + 7, 0, -1]
    ints[-len(edges) :] = edges
    texts = ["benign", "a b;c=d,e\tf", "", "héllo", "x,y", None, "Pathogenic/Likely_pathogenic"]
    ids = [None, ".", "", "rs1", "rs1;rs2", "a b,c", "1"]
    filters = [
        None,
        ".",
        "PASS",
        "q10;lowq",
        "PASS;q10",
        "q10;PASS",
        "q10;q10",
        " q10 ; lowq ",
        "a b",
    ]
    alts = ["C", "G", "*", ".", "<DEL>", "T"]
    qual = rng.normal(size=n) * 100
    qual[:3] = [np.nan, 0.1, 1e7]
    return pl.DataFrame(
        {
            "_contig": rng.choice(["chr1", "chrX"], n),
            "_pos": rng.integers(1, 900_000, n),
            "_ref": rng.choice(["A", "AC", "N"], n),
            "_alt": [alts[i % len(alts)] for i in range(n)],
            "id": [ids[i % len(ids)] for i in range(n)],
            "qual": pl.Series(qual).set(pl.Series(rng.random(n) < 0.2), None),
            "filter": [filters[i % len(filters)] for i in range(n)],
            "score": pl.Series(floats).set(pl.Series(rng.random(n) < 0.1), None),
            "status": [texts[i % len(texts)] for i in range(n)],
            "count": pl.Series(ints).set(pl.Series(rng.random(n) < 0.1), None),
            "flag": pl.Series(rng.random(n) < 0.5).set(pl.Series(rng.random(n) < 0.1), None),
            "mc": [texts[(i * 3) % len(texts)] for i in range(n)],
            "af32": pl.Series(rng.random(n), dtype=pl.Float32),
        }
    )


def _htslib_lines(header, batch: pl.DataFrame, infos) -> list[str]:
    """Each row through a pysam record, as export-vcf wrote records before."""
    lines = RecordLines(header, infos)
    values = batch.select(
        "_contig",
        "_pos",
        "_ref",
        "_alt",
        pl.col(lines.end_column) if lines.end_column else pl.lit(None).alias("_end"),
        "id",
        "qual",
        "filter",
        *lines.written_columns,
    )
    return [pysam_line(header, row, lines.written) for row in values.iter_rows()]


def test_record_lines_are_the_text_htslib_writes():
    header, batch = _header(), _batch(4_000)
    lines = RecordLines(header, INFOS)
    ours = lines(batch).decode().splitlines(keepends=True)
    assert ours == _htslib_lines(header, batch, INFOS)
    # most rows formatted by polars (the symbolic ALT's and the reserved integers' by htslib)
    assert lines.rows_by_htslib < len(batch) // 5
    assert any("CVEP_SCORE=" in line and "\tq10;lowq\t" in line for line in ours)


def test_record_lines_with_a_carried_end_and_a_value_of_another_type():
    """A carried END (htslib writes the record's end) and an INFO column held as another type
    than declared (an Integer column declared String): those rows are htslib's."""
    infos = {
        **INFOS,
        "END": {"ID": "END", "Number": "1", "Type": "Integer", "Description": "end"},
        "year": {"ID": "YEAR", "Number": "1", "Type": "String", "Description": "y"},
    }
    batch = _batch(300, seed=4).with_columns(
        pl.when(pl.int_range(pl.len()) % 3 == 0).then(pl.col("_pos") + 50).alias("END"),
        pl.when(pl.int_range(pl.len()) % 4 == 0).then(pl.lit(2024)).alias("year"),
    )
    header = _header(infos)
    lines = RecordLines(header, infos)
    ours = lines(batch).decode().splitlines(keepends=True)
    assert ours == _htslib_lines(header, batch, infos)
    assert any("\tEND=" in line or ";END=" in line for line in ours)
    assert 0 < lines.rows_by_htslib < len(batch)


@pytest.mark.parametrize("rows", [0, 1])
def test_record_lines_of_tiny_batches(rows):
    header, batch = _header(), _batch(50).head(rows)
    assert RecordLines(header, INFOS)(batch).decode().splitlines(keepends=True) == _htslib_lines(
        header, batch, INFOS
    )


def test_record_lines_past_the_filter_cache(monkeypatch):
    """FILTER texts beyond the cache are formatted for each batch, the same text."""
    from carbon_vep.report import vcf_lines

    monkeypatch.setattr(vcf_lines, "FILTER_CACHE", 2)
    header, batch = _header(), _batch(500, seed=6)
    lines = RecordLines(header, INFOS)
    for part in (batch.head(200), batch.tail(300)):
        ours = lines(part).decode().splitlines(keepends=True)
        assert ours == _htslib_lines(header, part, INFOS)
    assert len(lines._filters) == 2
