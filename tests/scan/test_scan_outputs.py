"""The merge of a scan's chunks into one output file of several contigs, without a model: rows
of each contig in order and nowhere else, the chunks read once, the calibration's counts from
the merged file, the TSV written from the Parquet file with every ranked SNV's PHRED (none for a
base with less than the scan's min_context), ASCII headers, and a merge that refuses chunks out
of order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pysam
import pytest
from support.files import random_dna, write_fasta

from carbon_vep import columns
from carbon_vep.atomic import index_of, write_json
from carbon_vep.genome.reference import Reference, open_reference
from carbon_vep.scan.calibrate import Calibration
from carbon_vep.scan.counts import count_positions, counts_meta, read_counts
from carbon_vep.scan.positions import BaseWriter, merge_group
from carbon_vep.scan.record import RECORD_LAYOUT, SCAN_RECORD
from carbon_vep.scan.snvs import snv_rows, with_cells
from carbon_vep.scan.tsv import concat_tsv, write_tsv

# the genome the rows are on (a scan's `ref` is the genome's base, which the contexts read)
GENOME = {
    c: random_dna(n, i) for i, (c, n) in enumerate({"A": 5, "B": 8, "HLA-C*01:02": 3}.items())
}


def _bases(chrom: str, first: int, last: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = last - first + 1
    logs = np.log(rng.dirichlet(np.ones(4), n)).astype(np.float16)
    return pl.DataFrame(
        {
            "chrom": [chrom] * n,
            "pos": np.arange(first, last + 1),
            "ref": list(GENOME[chrom][first - 1 : last]),
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
def reference(tmp_path):
    fasta = write_fasta(tmp_path / "genome.fa", GENOME)
    with open_reference(fasta) as genome:
        yield genome


@pytest.fixture
def chunks(tmp_path):
    """Chunk 0: A, then B's first bases; chunk 1: the rest of B (B and C in one row group)."""
    first = _chunk(tmp_path / "c0.parquet", _bases("A", 1, 5, 1), _bases("B", 1, 4, 2))
    rest = pl.concat([_bases("B", 5, 8, 3), _bases("HLA-C*01:02", 1, 3, 4)])
    return [first, _chunk(tmp_path / "c1.parquet", rest)]


def test_a_file_of_several_contigs_holds_each_in_order(chunks, reference, tmp_path):
    parquet, counts = tmp_path / "out/positions/B+1.parquet", tmp_path / "out/counts/B+1.parquet"
    provenance = {"model": "/models/modèle", "build": "test"}  # not ASCII: escaped in the header
    meta = counts_meta(provenance, 4, None)
    stats = merge_group(chunks, ["B", "HLA-C*01:02"], parquet)
    assert stats["bases"] == 11 and stats["bases_per_contig"] == {"B": 8, "HLA-C*01:02": 3}
    counted = count_positions(parquet, counts, meta, reference, None)
    assert counted["snvs"] == stats["snvs"] and counted["neutral_snvs"] == 3 * 11
    rows = pl.read_parquet(parquet)
    assert list(zip(rows["chrom"], rows["pos"], strict=True)) == [
        *(("B", p) for p in range(1, 9)),
        *(("HLA-C*01:02", p) for p in range(1, 4)),
    ]
    source = pl.concat([pl.read_parquet(c) for c in chunks]).filter(pl.col("chrom") != "A")
    assert rows.equals(source)  # every value as the chunks hold it
    summed, neutral, got_meta = read_counts([counts])
    assert got_meta == {**meta, "unranked_snvs": 0}  # the provenance sets no min_context
    assert summed["n"].sum() == 3 * 11 == stats["snvs"]
    calibration = Calibration.build(summed, neutral, got_meta, min_count=1)
    tsv = tmp_path / "out/snvs/B+1.tsv.gz"
    write_tsv(parquet, ["B", "HLA-C*01:02"], tsv, provenance, calibration, reference)
    with pysam.TabixFile(str(tsv)) as tabix:
        assert list(tabix.contigs) == ["B", "HLA-C*01:02"]
        header = list(tabix.header)  # pysam reads header lines as ASCII
        assert "##model=/models/mod\\xe8le" in header
        assert header[-3:] == [
            "##contig=B",
            "##contig=HLA-C*01:02",
            "#chrom\tpos\tref\talt\tscore\tphred",
        ]
        assert any(h.startswith("##phred=-10 log10(rank / total)") for h in header)
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
    phred = calibration.annotate(with_cells(expected, reference, 4, None))["phred"]
    assert np.allclose([float(r[5]) for r in data], phred, atol=1e-5)  # annotate's, one decimal
    top = max(range(len(data)), key=lambda i: float(data[i][4]))
    assert float(data[top][5]) == pytest.approx(10 * np.log10(33), abs=0.05)  # a unique maximum


def test_the_tsv_can_carry_the_calibrated_pair(chunks, reference, tmp_path):
    parquet, counts = tmp_path / "p.parquet", tmp_path / "c.parquet"
    meta = counts_meta({}, 2, None)
    merge_group(chunks, ["B"], parquet)
    count_positions(parquet, counts, meta, reference, None)
    calibration = Calibration.build(*read_counts([counts])[:2], meta, min_count=1)
    tsv = tmp_path / "t.tsv.gz"
    write_tsv(parquet, ["B"], tsv, {}, calibration, reference, with_calibrated=True)
    with pysam.TabixFile(str(tsv)) as tabix:
        assert tabix.header[len(tabix.header) - 1].split("\t")[4:] == [
            "score",
            "phred",
            "calibrated",
            "calibrated_phred",
        ]
        rows = [line.split("\t") for line in tabix.fetch("B")]
    assert len(rows) == 24 and all(len(r) == 8 for r in rows)


def test_chunks_out_of_order_stop_the_merge_and_leave_nothing(chunks, tmp_path):
    parquet = tmp_path / "bad.parquet"
    with pytest.raises(ValueError, match="out of order"):
        merge_group(chunks[::-1], ["B"], parquet)
    with pytest.raises(ValueError, match="out of order"):  # contigs in another order
        merge_group(chunks, ["HLA-C*01:02", "B"], parquet)
    assert not list(tmp_path.glob("bad*"))


class _FarContig(Reference):
    """One contig of 600,000,100 bp (wheat's chromosomes are longer) that no file holds: its
    bases a function of their position, read only where asked."""

    path = Path("far.fa")
    lengths = {"1H": 600_000_100}  # noqa: RUF012 (a test double's fixed lengths)

    def _fetch(self, contig: str, start: int, end: int) -> str:
        return "".join("ACGT"[(i * 7919 >> 3) % 4] for i in range(start, end))


def test_a_contig_past_2_to_the_29_gets_a_csi_that_concat_reads(tmp_path):
    """A .tbi cannot hold positions past 2^29: the TSV of such a contig crashed after the
    GPU work (`hts_idx_check_range`); it gets a .csi, which the reading side finds."""
    genome, first = _FarContig(), 599_999_998
    frame = _bases("A", 1, 5, 7).with_columns(  # bases 599,999,998-600,000,002
        pl.lit("1H").alias("chrom"),
        pl.Series("pos", range(first, first + 5)),
        pl.Series("ref", list(genome.fetch("1H", first - 1, first + 4))),
    )
    chunk = _chunk(tmp_path / "c0.parquet", frame)
    scan = tmp_path / "scan"
    parquet, counts = scan / "positions/1H.parquet", scan / "counts/1H.parquet"
    meta = counts_meta({}, 4, None)
    merge_group([chunk], ["1H"], parquet)
    count_positions(parquet, counts, meta, genome, None)
    calibration = Calibration.build(*read_counts([counts])[:2], meta, min_count=1)
    tsv = scan / "snvs/1H.tsv.gz"
    stats = write_tsv(parquet, ["1H"], tsv, {}, calibration, genome)
    assert sorted(p.name for p in tsv.parent.iterdir()) == ["1H.tsv.gz", "1H.tsv.gz.csi"]
    assert stats["tsv_bytes"] == tsv.stat().st_size + Path(f"{tsv}.csi").stat().st_size
    with pysam.TabixFile(str(tsv), index=str(index_of(tsv))) as tabix:
        rows = [line.split("\t") for line in tabix.fetch("1H", 600_000_000, 600_000_001)]
    assert [(r[1], r[2]) for r in rows] == [
        ("600000001", genome.fetch("1H", 600_000_000, 600_000_001))
    ] * 3
    write_json(
        {"layout": RECORD_LAYOUT, "files": [{"name": "1H", "contigs": ["1H"]}]}, scan / SCAN_RECORD
    )
    stats = concat_tsv(scan, tmp_path / "all.tsv.gz")
    assert (tmp_path / "all.tsv.gz.csi").is_file() and not (tmp_path / "all.tsv.gz.tbi").exists()
    assert stats["contigs"] == 1


def test_bases_with_less_than_min_context_keep_their_scores_and_get_no_phred(
    chunks, reference, tmp_path
):
    """A base the scan scored with less left context than its min_context (here the first two
    bases of each chunk's contigs: a contig start, or after a gap) is left off the scales: its
    SNVs are out of the rank scale and the context means, keep their score and calibrated
    score, and have no PHRED: `.` in the TSV, null where a panel looks them up, no value in the
    PHRED tracks. The other SNVs are ranked among themselves alone."""
    from carbon_vep.report.tracks import base_values
    from carbon_vep.scoring.annotate import calibrated_scores

    provenance, contigs = {"model": "m", "min_context": 2}, ["B", "HLA-C*01:02"]
    parquet, counts = tmp_path / "p.parquet", tmp_path / "c.parquet"
    meta = counts_meta(provenance, 4, None)
    merge_group(chunks, contigs, parquet)
    stats = count_positions(parquet, counts, meta, reference, None)
    bases = pl.read_parquet(parquet)
    short = (bases["context_bp"] < 2).to_numpy()  # B 1-2 and 5-6, HLA-C 1-2: 6 of 11 bases
    assert stats["unranked_snvs"] == 3 * short.sum() == 18
    summed, neutral, got_meta = read_counts([counts])
    calibration = Calibration.build(summed, neutral, got_meta, min_count=1)
    assert (calibration.raw.total, calibration.unranked, calibration.min_context) == (15, 18, 2)
    assert int(calibration.contexts["n_neutral"].sum()) == 15  # the means: ranked SNVs only
    tsv = tmp_path / "t.tsv.gz"
    write_tsv(parquet, contigs, tsv, provenance, calibration, reference, with_calibrated=True)
    with pysam.TabixFile(str(tsv)) as tabix:
        (phred_line,) = [h for h in tabix.header if h.startswith("##phred=")]
        rows = [line.split("\t") for contig in contigs for line in tabix.fetch(contig)]
    assert "the 18 with less (a contig start, after a gap) have . (no PHRED)" in phred_line
    off = np.repeat(short, 3)
    assert all(r[5] == r[7] == "." for r, o in zip(rows, off, strict=True) if o)
    assert all("." not in (r[5], r[7]) for r, o in zip(rows, off, strict=True) if not o)
    assert all("." not in (r[4], r[6]) for r in rows)  # every score and calibrated score kept
    keys = np.array([round(float(r[4]) * 10**4) for r, o in zip(rows, off, strict=True) if not o])
    direct = [10 * np.log10(15 / (keys >= k).sum()) for k in keys]  # ranked among themselves
    got = [float(r[5]) for r, o in zip(rows, off, strict=True) if not o]
    assert np.allclose(got, direct, atol=0.05 + 1e-6)
    tracks = base_values(bases, calibration)
    for track in ("phred_A", "phred_C", "phred_G", "phred_T", "max_phred"):
        assert np.isnan(tracks[track][short]).all(), track
    assert not np.isnan(tracks["max_phred"][~short]).any()
    assert not np.isnan(tracks["max_score"]).any() and not np.isnan(tracks["surprise"]).any()
    ranks_all = {k: v for k, v in got_meta.items() if k != "unranked_snvs"}  # an older one's
    before = Calibration.build(summed, neutral, ranks_all, min_count=1)
    assert not np.isnan(base_values(bases, before)["max_phred"]).any()  # every base its PHRED
    snvs = snv_rows(bases)  # a panel of every SNV, looked up as annotate does
    scores = snvs.select(
        pl.col("chrom").alias("ref_chrom"),
        "pos",
        "ref",
        "alt",
        pl.lit("scored").alias("score_status"),
        pl.col("score").cast(pl.Float64).alias("ref_ll"),
        pl.lit(0.0).alias("alt_ll"),
        pl.col("context_bp").cast(pl.Int64).alias("window_bp"),
    )
    looked_up = calibrated_scores(scores, calibration, reference)
    assert looked_up["phred"].is_null().to_list() == off.tolist()
    assert looked_up["calibrated_phred"].is_null().to_list() == off.tolist()
    assert looked_up["calibrated"].null_count() == 0
    printed = [float(r[5]) for r, o in zip(rows, off, strict=True) if not o]
    assert looked_up["phred"].drop_nulls().to_list() == pytest.approx(printed, abs=1e-5)


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 24])
def test_a_tsvs_data_lines_are_read_past_a_header_of_many_lines_at_any_block(tmp_path, block):
    """concat-scan copies each file's rows without its header (a `##contig` line a contig, so
    thousands for a draft assembly's shared files), read in blocks the header may cross."""
    from carbon_vep.scan.tsv import _data_bytes

    header = "".join(f"##contig=<ID=scaffold_{i}>\n" for i in range(300)) + "#chrom\tpos\n"
    data = "".join(f"scaffold_{i}\t{i + 1}\n" for i in range(300))
    path = tmp_path / "t.tsv.gz"
    with pysam.BGZFile(str(path), "wb") as out:
        out.write((header + data).encode())
    assert b"".join(_data_bytes(path, block)) == data.encode()


def test_a_merge_reads_only_the_row_groups_that_may_hold_its_contigs(tmp_path, monkeypatch):
    """read_chunk_rows: a row group of one other contig (its chrom statistics) is skipped
    unread, a row group of several is read and filtered; the rows are the contigs' own, in
    order."""
    import pyarrow.parquet as pq

    from carbon_vep.scan.positions import BASE_SCHEMA, read_chunk_rows

    def rows(chrom, n):
        values = {f"log_{kind}_{b}": np.full(n, -1.0) for kind in ("fns", "cond") for b in "ACGT"}
        frame = pl.DataFrame(
            {"pos": np.arange(1, n + 1), "ref": ["A"] * n, "context_bp": np.arange(n)} | values
        )
        frame = frame.with_columns(pl.lit(chrom).alias("chrom"), phase=pl.col("pos") % 6)
        return frame.select(list(BASE_SCHEMA)).cast(BASE_SCHEMA)

    path = tmp_path / "chunk.parquet"
    writer = BaseWriter(path)
    for frame in (
        rows("a", 3),
        rows("b", 4),
        pl.concat([rows("c", 2), rows("d", 5)]),
        rows("e", 1),
    ):
        writer.write(frame)  # a row group each
    writer.close()
    read = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_group",
        lambda self, i, *a, **k: read.append(i) or original(self, i, *a, **k),
    )
    parts = list(read_chunk_rows([path], ["b", "d"]))
    assert [p["chrom"].unique().to_list() for p in parts] == [["b"], ["d"]]
    assert [p.height for p in parts] == [4, 5]
    assert read == [1, 2]  # a's and e's groups unread; c+d's read and filtered


def test_a_chunks_small_batches_share_row_groups(tmp_path):
    """BaseWriter(min_rows): writes held until they reach min_rows, then one row group (a scan
    chunk's batches of a draft assembly's scaffolds: one row group each made merges pay per
    scaffold), the rest at close; the rows as written, in order. A write of min_rows or more
    (a batch of a chromosome's tiles) is written at once, with what was held before it."""
    import pyarrow.parquet as pq

    from carbon_vep.scan.positions import BASE_SCHEMA, BaseWriter

    def rows(chrom, n, first=1):
        values = {f"log_{kind}_{b}": np.full(n, -1.0) for kind in ("fns", "cond") for b in "ACGT"}
        frame = pl.DataFrame(
            {"pos": np.arange(first, first + n), "ref": ["A"] * n, "context_bp": np.arange(n)}
            | values
        )
        frame = frame.with_columns(pl.lit(chrom).alias("chrom"), phase=pl.col("pos") % 6)
        return frame.select(list(BASE_SCHEMA)).cast(BASE_SCHEMA)

    frames = [rows(f"s{i}", 30) for i in range(10)] + [rows("chr1", 250)]
    path = tmp_path / "chunk.parquet"
    writer = BaseWriter(path, min_rows=100)
    for frame in frames:
        writer.write(frame)
    writer.close()
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [120, 120, 310]
    assert pl.read_parquet(path).equals(pl.concat(frames))
    killed = BaseWriter(tmp_path / "killed.parquet", min_rows=100)
    killed.write(frames[0])
    killed.abort()
    assert not list(tmp_path.glob("killed*"))
