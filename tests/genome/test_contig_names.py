"""Contig names in file names: percent-encoded so that any name is a portable, shell-safe file
name that decodes back exactly, with the decoding that hive readers (pyarrow, polars, DuckDB)
apply to partition values."""

from __future__ import annotations

import shlex

import polars as pl
import pytest

from carbon_vep.genome.contigs import decode_name, encode_name

AWKWARD = [
    "chr1",
    "HLA-A*01:01:01:01",
    "gi|9626243|ref|NC_001416.1|",
    "chrUn_JTFH01000001v1_decoy",
    "chr1_KI270706v1_random",
    "tig00000001|arrow",
    "NODE_1_length_5000_cov_3.142857",
    "_unplaced",  # a leading `_` or `.`: pyarrow's dataset discovery would skip the file
    ".hidden",
    "-dash",
    "a b+c%d=e/f\\g'h\"i",
    "chrÜ_ümlaut",
    "%41",  # already looks encoded: encoded again, so it still decodes to itself
]


@pytest.mark.parametrize("name", AWKWARD)
def test_names_round_trip_and_need_no_quoting(name):
    encoded = encode_name(name)
    assert decode_name(encoded) == name
    assert shlex.quote(encoded) == encoded and encoded.isascii()
    assert "/" not in encoded and "+" not in encoded
    assert encoded[0].isalnum() or encoded[0] == "%"


def test_which_characters_are_encoded():
    assert encode_name("chr1") == "chr1"
    assert encode_name("NODE_1_length_50_cov_3.5") == "NODE_1_length_50_cov_3.5"
    assert encode_name("HLA-A*01:01:01:01") == "HLA-A%2A01%3A01%3A01%3A01"
    assert encode_name("gi|9|ref|NC_1.1|") == "gi%7C9%7Cref%7CNC_1.1%7C"
    assert encode_name("_x.y-z") == "%5Fx.y-z"  # `._-` are kept except as the first character
    assert encode_name(".x") == "%2Ex" and encode_name("-x") == "%2Dx"
    assert encode_name("ü") == "%C3%BC"  # the bytes of the UTF-8
    assert encode_name("%") == "%25" and encode_name("+") == "%2B"
    assert len({encode_name(n) for n in AWKWARD}) == len(AWKWARD)


def test_hive_readers_decode_the_encoded_names(tmp_path):
    """The encoding is the one pyarrow, polars and DuckDB decode in `key=value` folder names."""
    import pyarrow.dataset as ds

    for index, name in enumerate(AWKWARD):
        folder = tmp_path / f"chrom={encode_name(name)}"
        folder.mkdir()
        pl.DataFrame({"row": [index]}).write_parquet(folder / "part-0.parquet")
    expected = sorted(AWKWARD)
    by_polars = pl.read_parquet(tmp_path, hive_partitioning=True)
    assert sorted(by_polars["chrom"].to_list()) == expected
    by_arrow = ds.dataset(tmp_path, partitioning="hive").to_table()
    assert sorted(by_arrow["chrom"].to_pylist()) == expected
    duckdb = pytest.importorskip("duckdb", reason="duckdb not installed (pip install duckdb)")
    query = f"SELECT chrom, row FROM read_parquet('{tmp_path}/*/*.parquet', hive_partitioning=1)"
    rows = duckdb.sql(query).fetchall()
    assert sorted(rows) == sorted((name, i) for i, name in enumerate(AWKWARD))
