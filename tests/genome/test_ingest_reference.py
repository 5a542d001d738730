"""References: FASTA (plain, bgzip, indexed or not, broken) and GENERator-style Parquet."""

from __future__ import annotations

import gzip
import os
import time

import polars as pl
import pysam
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.errors import InputError
from carbon_vep.genome import fai_check, reference
from carbon_vep.genome.contigs import canonical_contig, resolve_contigs
from carbon_vep.genome.reference import FastaReference, ParquetReference, open_reference
from carbon_vep.variants.check import check_panel

CONTIGS = {"chr1": random_dna(700, 11)[:300] + random_dna(400, 12).lower(), "chrM": "GATC" * 40}


def _leftovers(directory) -> list[str]:
    return [p.name for p in directory.iterdir() if ".tmp-" in p.name]


def test_plain_fasta_index_is_built_and_sequence_upper_cased(tmp_path):
    path = write_fasta(tmp_path / "g.fa", CONTIGS)
    with open_reference(path) as ref:
        assert isinstance(ref, FastaReference)
        assert ref.lengths == {"chr1": 700, "chrM": 160}
        assert ref.fetch("chr1", 295, 305) == CONTIGS["chr1"][295:305].upper()
        assert ref.fetch("chr1", 690, 800) == CONTIGS["chr1"][690:].upper()  # clipped
        assert ref.fetch("chr1", -10, 2) == CONTIGS["chr1"][:2]
    assert (tmp_path / "g.fa.fai").exists() and not _leftovers(tmp_path)


def test_bgzipped_fasta_builds_fai_and_gzi(tmp_path):
    plain = write_fasta(tmp_path / "g.fa", CONTIGS)
    pysam.tabix_compress(str(plain), str(tmp_path / "g.fa.gz"))
    with open_reference(tmp_path / "g.fa.gz") as ref:
        assert ref.fetch("chr1", 250, 450) == CONTIGS["chr1"][250:450].upper()
    assert (tmp_path / "g.fa.gz.fai").exists() and (tmp_path / "g.fa.gz.gzi").exists()


def test_outdated_index_is_rebuilt(tmp_path):
    path = write_fasta(tmp_path / "g.fa", {"chr1": "A" * 100})
    with open_reference(path) as ref:
        assert ref.lengths == {"chr1": 100}
    write_fasta(path, {"chr1": "C" * 50, "chr2": "G" * 70})  # the FASTA replaced after indexing
    future = time.time() + 5
    os.utime(path, (future, future))
    with open_reference(path) as ref:
        assert ref.lengths == {"chr1": 50, "chr2": 70}
        assert ref.fetch("chr2", 0, 3) == "GGG"


def _rewrapped_under_a_newer_index(tmp_path):
    """A FASTA indexed at 60 bases a line, then rewritten at 80 and made older than its .fai
    (as `cp -p`, `rsync -a` or tar can leave it): modification times say the index is fine."""
    path = write_fasta(tmp_path / "g.fa", CONTIGS)  # 60 bases a line
    with open_reference(path):
        pass
    text = "".join(
        f">{name}\n" + "".join(seq[i : i + 80] + "\n" for i in range(0, len(seq), 80))
        for name, seq in CONTIGS.items()
    )
    path.write_text(text)
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    return path


def test_stale_index_newer_than_the_fasta_is_rebuilt(tmp_path, caplog):
    path = _rewrapped_under_a_newer_index(tmp_path)
    with caplog.at_level("WARNING", logger="carbon_vep"), open_reference(path) as ref:
        assert ref.fetch("chr1", 0, 700) == CONTIGS["chr1"].upper()
        assert ref.fetch("chrM", 100, 160) == CONTIGS["chrM"][100:]
    assert "g.fa.fai: stale, it does not match" in caplog.text
    assert "rebuilding it" in caplog.text and not _leftovers(tmp_path)


def test_stale_index_that_cannot_be_rebuilt_is_named(tmp_path, monkeypatch):
    path = _rewrapped_under_a_newer_index(tmp_path)
    monkeypatch.setattr(reference.os, "access", lambda *_: False)  # a read-only directory
    with pytest.raises(
        InputError, match=r"g\.fa\.fai: stale, it does not match .*g\.fa \(record .*samtools faidx"
    ):
        open_reference(path)


@pytest.mark.parametrize(
    "change",
    [
        lambda text: text.replace(">chrM", ">chrMT"),  # a record renamed
        lambda text: text + "ACGT\n",  # bases added at the end
        lambda text: text.replace("\n", "\r\n"),  # line ends converted
    ],
    ids=["renamed", "longer", "crlf"],
)
def test_index_problem_finds_a_changed_fasta(tmp_path, change):
    path = write_fasta(tmp_path / "g.fa", CONTIGS)
    with open_reference(path):
        pass
    assert fai_check.index_problem(path, tmp_path / "g.fa.fai") is None
    path.write_bytes(change(path.read_text()).encode())
    assert fai_check.index_problem(path, tmp_path / "g.fa.fai") is not None


def test_plain_gzip_fasta_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "hg38.fa.gz"
    path.write_bytes(gzip.compress(b">chr1\nACGT\n"))
    with pytest.raises(InputError, match=r"hg38\.fa\.gz: .*plain gzip.*bgzip -c"):
        open_reference(path)
    assert not _leftovers(tmp_path)


def test_truncated_bgzip_fasta_names_the_file(tmp_path):
    plain = write_fasta(tmp_path / "g.fa", CONTIGS)
    pysam.tabix_compress(str(plain), str(tmp_path / "g.fa.gz"))
    data = (tmp_path / "g.fa.gz").read_bytes()
    (tmp_path / "cut.fa.gz").write_bytes(data[: len(data) - 40])
    with pytest.raises(InputError, match=r"cut\.fa\.gz: .*(truncated|corrupt)"):
        open_reference(tmp_path / "cut.fa.gz")
    assert not _leftovers(tmp_path) and not (tmp_path / "cut.fa.gz.fai").exists()


def test_ragged_fasta_names_the_line(tmp_path):
    path = tmp_path / "bad.fa"
    path.write_text(">chr1\nACGTACGT\nACG\nACGTACGT\n")
    with pytest.raises(InputError, match=r"bad\.fa: not a well-formed FASTA .*line 4"):
        open_reference(path)


@pytest.mark.parametrize("text", ["", "ACGTACGT\n"], ids=["empty", "no-header"])
def test_empty_or_headerless_fasta(tmp_path, text):
    path = tmp_path / "x.fa"
    path.write_text(text)
    with pytest.raises(InputError, match=r"x\.fa: "):
        open_reference(path)


def test_missing_reference(tmp_path):
    with pytest.raises(InputError, match=r"nope\.fa: reference genome not found"):
        open_reference(tmp_path / "nope.fa")


def _parquet_genome(path, contigs, binary=False):
    values = [s.encode() for s in contigs.values()] if binary else list(contigs.values())
    pl.DataFrame(
        {"ID": list(contigs), "Sequence": values},
        schema={"ID": pl.Utf8, "Sequence": pl.Binary if binary else pl.Utf8},
    ).write_parquet(path, row_group_size=1)
    return path


@pytest.mark.parametrize("binary", [False, True], ids=["string", "binary"])
def test_parquet_reference_matches_fasta(tmp_path, binary):
    fasta = open_reference(write_fasta(tmp_path / "g.fa", CONTIGS))
    with open_reference(_parquet_genome(tmp_path / "hg.parquet", CONTIGS, binary)) as parquet:
        assert isinstance(parquet, ParquetReference)
        assert parquet.lengths == fasta.lengths and parquet.contigs == ["chr1", "chrM"]
        for contig, start, end in [("chr1", 0, 700), ("chr1", 290, 310), ("chrM", 150, 999)]:
            assert parquet.fetch(contig, start, end) == fasta.fetch(contig, start, end)
        assert parquet.fetch("chr1", 100, 90) == ""


@pytest.mark.parametrize("row_group_size", [1, 3, 50], ids=["a row a group", "3 a group", "one"])
def test_parquet_reference_reads_forward_and_starts_over_for_an_earlier_contig(
    tmp_path, row_group_size, monkeypatch
):
    """Contigs asked for in the file's order are each decoded once, by one reader (it used to
    start from the first row at every contig: quadratic in the rows); one further back starts
    a new reader at its row group; every fetch is the contig's own sequence."""
    contigs = {f"c{i}": random_dna(50 + i, i) for i in range(20)}
    path = tmp_path / "g.parquet"
    pl.DataFrame({"ID": list(contigs), "Sequence": list(contigs.values())}).write_parquet(
        path, row_group_size=row_group_size
    )
    with open_reference(path) as reference:
        started: list[object] = []
        iter_batches = reference._file.iter_batches

        def counted(*args, **kwargs):
            started.append(kwargs.get("row_groups"))
            return iter_batches(*args, **kwargs)

        monkeypatch.setattr(reference._file, "iter_batches", counted)
        for name in ["c0", "c1", "c4", "c4", "c5", "c19"]:
            assert reference.fetch(name, 0, 1000) == contigs[name]
        assert len(started) == 1  # in order: one reader
        for name in ["c7", "c2", "c3", "c2", "c0"]:  # back, forward, back, back
            assert reference.fetch(name, 5, 40) == contigs[name][5:40]
        assert len(started) == 5  # c7, c2, c2 again and c0 start over; c3 reads on
        assert list(started[1])[0] == 7 // row_group_size  # c7's row group, not the first


def test_a_panels_bases_are_read_in_the_references_order(tmp_path, monkeypatch):
    """reference_bases asks for a batch's contigs in the reference's order, whatever the rows'
    order, so a Parquet reference reads forward once (one reader) for a panel not sorted by
    contig."""
    from carbon_vep.variants.genome_match import reference_bases

    contigs = {f"c{i}": random_dna(100, i) for i in range(6)}
    path = tmp_path / "g.parquet"
    pl.DataFrame({"ID": list(contigs), "Sequence": list(contigs.values())}).write_parquet(path)
    rows = [("c5", 3), ("c0", 10), ("c3", 0), ("c0", 50), ("c1", 99), ("c5", 60)]
    with open_reference(path) as reference:
        started = []
        iter_batches = reference._file.iter_batches
        monkeypatch.setattr(
            reference._file,
            "iter_batches",
            lambda *a, **k: started.append(1) or iter_batches(*a, **k),
        )
        bases = reference_bases(
            reference,
            pl.Series([c for c, _ in rows]),
            pl.Series([p for _, p in rows]),
            pl.Series([p + 2 for _, p in rows]),
        )
    assert bases.to_list() == [contigs[c][p : p + 2] for c, p in rows]
    assert len(started) == 1


def test_check_panel_through_parquet_reference(tmp_path):
    path = _parquet_genome(tmp_path / "hg38.parquet", CONTIGS)
    seq = CONTIGS["chr1"].upper()
    panel = pl.DataFrame(
        {
            "chrom": ["1", "1", "MT"],
            "pos": [301, 302, 4],
            "ref": [seq[300], "A", "C"],
            "alt": ["A" if seq[300] != "A" else "C", "T", "G"],
        },
    ).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.lit("p.tsv:line 2").alias("source"),
    )
    with open_reference(path) as ref:
        checked = check_panel(panel, ref)
    expected_second = "ok" if seq[301] == "A" else "ref_mismatch"
    assert checked["status"].to_list() == ["ok", expected_second, "ok"]
    assert checked["ref_chrom"].to_list() == ["chr1", "chr1", "chrM"]


def test_parquet_reference_layout_errors(tmp_path):
    path = tmp_path / "bad.parquet"
    pl.DataFrame({"chrom": ["chr1"], "seq": ["ACGT"]}).write_parquet(path)
    with pytest.raises(InputError, match=r"bad\.parquet: .*columns \['ID', 'Sequence'\]"):
        open_reference(path)
    pl.DataFrame({"ID": ["chr1", "chr1"], "Sequence": ["AC", "GT"]}).write_parquet(path)
    with pytest.raises(InputError, match=r"row 2 has a second 'chr1'"):
        open_reference(path)


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("chr1", "1"),
        ("1", "1"),
        ("NC_000001.11", "1"),
        ("NC_000001.10", "1"),
        ("NC_000023.11", "X"),
        ("NC_000024.10", "Y"),
        ("chrX", "X"),
        ("NC_012920.1", "MT"),
        ("chrM", "MT"),
        ("MT", "MT"),
        ("M", "MT"),
        ("chr1_KI270706v1_random", "1_KI270706v1_random"),
        ("NC_000067.7", "NC_000067.7"),
        ("scaffold_12", "scaffold_12"),
    ],
)
def test_canonical_contig(name, canonical):
    assert canonical_contig(name) == canonical


def test_resolve_contigs_across_ucsc_ensembl_ncbi():
    ncbi = ["NC_000001.11", "NC_000023.11", "NC_012920.1"]
    assert resolve_contigs(["chr1", "X", "chrM"], ncbi) == {
        "chr1": "NC_000001.11",
        "X": "NC_000023.11",
        "chrM": "NC_012920.1",
    }
    assert resolve_contigs(["NC_000001.11", "MT"], ["1", "MT"]) == {"NC_000001.11": "1", "MT": "MT"}
    # two reference contigs spell the same chromosome: ambiguous, left unmapped
    assert resolve_contigs(["M"], ["chrM", "MT"]) == {}


def test_fasta_with_a_repeated_record_name_is_refused(tmp_path):
    path = tmp_path / "dup.fa"
    path.write_text(">chr1\nACGT\n>chr1\nGGGG\n")
    with pytest.raises(InputError, match=r"dup\.fa: two records share a name.*chr1"):
        open_reference(path)
    assert not (tmp_path / "dup.fa.fai").exists()


def test_fasta_header_text_crlf_and_an_empty_record(tmp_path):
    """As docs/inputs.md says: a name ends at the first space, CRLF reads as LF, and a record
    with no sequence is no contig (a region naming it is refused as not in the reference)."""
    from carbon_vep.scan.targets import resolve_targets

    body = "ACGTAC\nGTTT\n"
    path = tmp_path / "g.fa"
    text = f">chr1 assembled 2024\n{body}>chrE\n>chr2\tsecond\n{body}"
    path.write_bytes(text.replace("\n", "\r\n").encode())
    with open_reference(path) as ref:
        assert ref.lengths == {"chr1": 10, "chr2": 10}
        assert ref.fetch("chr1", 0, 10) == "ACGTACGTTT"  # no carriage return inside
        with pytest.raises(InputError, match=r"chrE.*not in the reference"):
            resolve_targets(["chrE"], ref.lengths)
