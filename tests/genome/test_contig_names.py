"""Contig names in file names: encoded so that any name is a portable, shell-safe file name that
decodes back exactly, that pyarrow's dataset discovery does not skip, and that SLURM leaves
alone in a job's log path (no `%`, no backslash)."""

from __future__ import annotations

import shlex
from urllib.parse import unquote

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
    "a b+c%d=e/f\\g'h\"i@j",
    "chrÜ_ümlaut",
    "@41",  # already looks encoded: encoded again, so it still decodes to itself
    "%2A",
]


@pytest.mark.parametrize("name", AWKWARD)
def test_names_round_trip_and_are_safe_everywhere(name):
    encoded = encode_name(name)
    assert decode_name(encoded) == name
    assert unquote(encoded.replace("@", "%")) == name  # what the docs tell users to run
    assert shlex.quote(encoded) == encoded and encoded.isascii()  # no shell quoting
    assert not set(encoded) & set('%\\/+<>:"|?*')  # SLURM paths, Windows, our `+N` suffix
    assert encoded[0].isalnum() or encoded[0] == "@"


def test_which_characters_are_encoded():
    assert encode_name("chr1") == "chr1"
    assert encode_name("NODE_1_length_50_cov_3.5") == "NODE_1_length_50_cov_3.5"
    assert encode_name("HLA-A*01:01:01:01") == "HLA-A@2A01@3A01@3A01@3A01"
    assert encode_name("gi|9|ref|NC_1.1|") == "gi@7C9@7Cref@7CNC_1.1@7C"
    assert encode_name("_x.y-z") == "@5Fx.y-z"  # `._-` are kept except as the first character
    assert encode_name(".x") == "@2Ex" and encode_name("-x") == "@2Dx"
    assert encode_name("ü") == "@C3@BC"  # the bytes of the UTF-8
    assert encode_name("@") == "@40" and encode_name("%") == "@25" and encode_name("+") == "@2B"
    assert len({encode_name(n) for n in AWKWARD}) == len(AWKWARD)


def test_pyarrow_polars_and_duckdb_find_every_encoded_file(tmp_path):
    import pyarrow.dataset as ds

    encoded, raw = tmp_path / "encoded", tmp_path / "raw"
    encoded.mkdir()
    raw.mkdir()
    for index, name in enumerate(AWKWARD):
        frame = pl.DataFrame({"chrom": [name], "row": [index]})
        frame.write_parquet(encoded / f"{encode_name(name)}.parquet")
    expected = sorted(AWKWARD)
    assert sorted(ds.dataset(encoded).to_table()["chrom"].to_pylist()) == expected
    assert sorted(pl.read_parquet(encoded)["chrom"].to_list()) == expected
    for name in ("_unplaced", ".hidden", "chr1"):  # why a leading `_` or `.` is encoded
        pl.DataFrame({"chrom": [name], "row": [0]}).write_parquet(raw / f"{name}.parquet")
    assert ds.dataset(raw).to_table()["chrom"].to_pylist() == ["chr1"]  # pyarrow skips them
    duckdb = pytest.importorskip("duckdb", reason="duckdb not installed (pip install duckdb)")
    rows = duckdb.sql(f"SELECT chrom FROM read_parquet('{encoded}/*.parquet')").fetchall()
    assert sorted(r[0] for r in rows) == expected
