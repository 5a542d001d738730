"""The merge of a scan's chunks into one output file of several contigs, without a model: rows
of each contig in order and nowhere else, the chunks read once, ASCII headers, and a merge
that refuses chunks out of order."""

from __future__ import annotations

import numpy as np
import polars as pl
import pysam
import pytest

from carbon_vep import columns
from carbon_vep.scan.outputs import BaseWriter, merge_group, snv_rows


def _bases(chrom: str, first: int, last: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = last - first + 1
    logs = np.log(rng.dirichlet(np.ones(4), n)).astype(np.float16)
    return pl.DataFrame(
        {
            "chrom": [chrom] * n,
            "pos": np.arange(first, last + 1),
            "ref": list(rng.choice(list("ACGT"), n)),
            "context_bp": np.arange(n),
            "phase": np.arange(n) % 6,
            **{f"log_fns_{b}": logs[:, i] for i, b in enumerate("ACGT")},
            **{f"log_cond_{b}": logs[:, i] for i, b in enumerate("ACGT")},
        },
        schema=columns.schema(columns.SCAN_BASE),
    )


def _chunk(path, *frames: pl.DataFrame):
    writer = BaseWriter(path)
    for frame in frames:
        writer.write(frame)
    writer.close()
    return path


@pytest.fixture
def chunks(tmp_path):
    """Chunk 0: A, then B's first bases; chunk 1: the rest of B (B and C in one row group)."""
    first = _chunk(tmp_path / "c0.parquet", _bases("A", 1, 5, 1), _bases("B", 1, 4, 2))
    rest = pl.concat([_bases("B", 5, 8, 3), _bases("HLA-C*01:02", 1, 3, 4)])
    return [first, _chunk(tmp_path / "c1.parquet", rest)]


def test_a_file_of_several_contigs_holds_each_in_order(chunks, tmp_path):
    parquet, tsv = tmp_path / "out/positions/B+1.parquet", tmp_path / "out/snvs/B+1.tsv.gz"
    provenance = {"model": "/models/modèle", "build": "test"}  # not ASCII: escaped in the header
    stats = merge_group(chunks, ["B", "HLA-C*01:02"], parquet, tsv, provenance, decimals=4)
    assert stats["bases"] == 11 and stats["bases_per_contig"] == {"B": 8, "HLA-C*01:02": 3}
    rows = pl.read_parquet(parquet)
    assert list(zip(rows["chrom"], rows["pos"], strict=True)) == [
        *(("B", p) for p in range(1, 9)), *(("HLA-C*01:02", p) for p in range(1, 4))
    ]  # fmt: skip
    source = pl.concat([pl.read_parquet(c) for c in chunks]).filter(pl.col("chrom") != "A")
    assert rows.equals(source)  # every value as the chunks hold it
    with pysam.TabixFile(str(tsv)) as tabix:
        assert list(tabix.contigs) == ["B", "HLA-C*01:02"]
        header = list(tabix.header)  # pysam reads header lines as ASCII
        assert "##model=/models/mod\\xe8le" in header
        assert header[-3:] == ["##contig=B", "##contig=HLA-C*01:02", "#chrom\tpos\tref\talt\tscore"]
        b = [line.split("\t") for line in tabix.fetch("B")]
        c = [line.split("\t") for line in tabix.fetch("HLA-C*01:02", 1, 3)]  # bases 2-3
    assert [int(r[1]) for r in b] == [p for p in range(1, 9) for _ in range(3)]
    assert {r[0] for r in b} == {"B"} and [int(r[1]) for r in c] == [2, 2, 2, 3, 3, 3]
    expected = snv_rows(source)  # the TSV's rows: the same SNVs, in the file's order
    text = pysam.BGZFile(str(tsv)).read().decode().splitlines()
    data = [line.split("\t") for line in text if not line.startswith("#")]
    assert [(r[0], int(r[1]), r[2], r[3]) for r in data] == list(
        expected.select("chrom", "pos", "ref", "alt").iter_rows()
    )
    assert np.allclose([float(r[4]) for r in data], expected["score"], atol=0.5e-4 + 1e-6)


def test_chunks_out_of_order_stop_the_merge_and_leave_nothing(chunks, tmp_path):
    parquet, tsv = tmp_path / "bad.parquet", tmp_path / "bad.tsv.gz"
    with pytest.raises(ValueError, match="out of order"):
        merge_group(chunks[::-1], ["B"], parquet, tsv, {}, decimals=2)
    with pytest.raises(ValueError, match="out of order"):  # contigs in another order
        merge_group(chunks, ["HLA-C*01:02", "B"], parquet, tsv, {}, decimals=2)
    assert not list(tmp_path.glob("bad*"))
