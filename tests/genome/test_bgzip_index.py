"""A bgzipped FASTA's .fai and .gzi are checked against the file, as a plain FASTA's .fai is.

A genome replaced under an index left newer than it (`cp -p`, `rsync -a`, tar) made htslib
read another layout's offsets: header bytes inside the sequence, wrong REF bases, exit 0.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path

import pysam
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.errors import InputError
from carbon_vep.genome import fai_check, reference
from carbon_vep.genome.reference import open_reference

# Random bases bgzip to ~4 blocks a contig: a change early in the file moves every later block.
OLD = {"a": random_dna(200_000, 21), "b": random_dna(150_000, 22), "c": "ACGT" * 50}
NEW = {"a": "ACGTACG" + OLD["a"], "b": OLD["b"], "c": OLD["c"]}  # 7 bases more in front


def _bgzip_indexed(folder: Path, contigs: dict[str, str]) -> Path:
    """`folder/g.fa.gz` with its .fai and .gzi as samtools faidx writes them."""
    folder.mkdir()
    plain = write_fasta(folder / "g.fa", contigs)
    pysam.tabix_compress(str(plain), str(folder / "g.fa.gz"))
    pysam.faidx(str(folder / "g.fa.gz"))
    return folder / "g.fa.gz"


@pytest.fixture
def versions(tmp_path: Path) -> tuple[Path, Path]:
    """The old genome and the new one, each bgzipped and indexed in its own folder."""
    return _bgzip_indexed(tmp_path / "old", OLD), _bgzip_indexed(tmp_path / "new", NEW)


def _install(old: Path, new: Path, target: Path, fai: Path, gzi: Path) -> Path:
    """The new genome at `target` with the given .fai and .gzi next to it, newer than it."""
    target.mkdir()
    genome = target / "g.fa.gz"
    shutil.copy(new, genome)
    shutil.copy(fai, f"{genome}.fai")
    shutil.copy(gzi, f"{genome}.gzi")
    past = time.time() - 3600
    os.utime(genome, (past, past))
    return genome


def _assert_reads_the_new_genome(genome: Path) -> None:
    with open_reference(genome) as ref:
        assert ref.lengths == {name: len(seq) for name, seq in NEW.items()}
        for name, seq in NEW.items():
            assert ref.fetch(name, 0, 70) == seq[:70]
            assert ref.fetch(name, len(seq) - 70, len(seq)) == seq[-70:]
        assert ref.fetch("a", 130_000, 131_000) == NEW["a"][130_000:131_000]  # a later block


@pytest.mark.parametrize("stale", ["fai", "gzi", "both"])
def test_stale_bgzip_index_newer_than_the_fasta_is_rebuilt(versions, tmp_path, caplog, stale):
    old, new = versions
    fai = Path(f"{old if stale in ('fai', 'both') else new}.fai")
    gzi = Path(f"{old if stale in ('gzi', 'both') else new}.gzi")
    assert fai.read_bytes() != Path(f"{new}.fai").read_bytes() or stale == "gzi"
    assert gzi.read_bytes() != Path(f"{new}.gzi").read_bytes() or stale == "fai"
    genome = _install(old, new, tmp_path / "run", fai, gzi)
    with caplog.at_level("WARNING", logger="carbon_vep"):
        _assert_reads_the_new_genome(genome)
    named = "g.fa.gz.fai" if stale == "fai" else "g.fa.gz.gzi"  # the .gzi is checked first
    assert f"{named}: stale, it does not match" in caplog.text and "rebuilding it" in caplog.text
    for suffix in ("fai", "gzi"):  # both rebuilt, as samtools faidx writes them
        assert Path(f"{genome}.{suffix}").read_bytes() == Path(f"{new}.{suffix}").read_bytes()
    assert not [p.name for p in genome.parent.iterdir() if ".tmp-" in p.name]


def test_the_reported_stale_fai_no_longer_reads_header_bytes(tmp_path, caplog):
    """The report's case: one bgzip block, the .fai of a genome 7 bases shorter."""
    seq = random_dna(3000, 5)
    old = _bgzip_indexed(tmp_path / "old", {"a": seq, "b": seq[::-1]})
    new = _bgzip_indexed(tmp_path / "new", {"a": "ACGTACG" + seq, "b": seq[::-1]})
    genome = _install(old, new, tmp_path / "run", Path(f"{old}.fai"), Path(f"{old}.gzi"))
    with caplog.at_level("WARNING", logger="carbon_vep"), open_reference(genome) as ref:
        assert ref.fetch("b", 0, 3000) == seq[::-1]
        assert ref.fetch("a", 0, 10) == "ACGTACG" + seq[:3]
    assert "g.fa.gz.fai: stale, it does not match" in caplog.text


def test_fresh_bgzip_index_is_used_without_rebuilding(versions, monkeypatch, caplog):
    _, new = versions
    before = {p.name: p.stat().st_mtime_ns for p in new.parent.iterdir()}
    assert fai_check.index_problem(new, Path(f"{new}.fai"), Path(f"{new}.gzi")) is None

    def no_rebuild(*_):
        raise AssertionError("a fresh index was rebuilt")

    monkeypatch.setattr(reference, "_build_fasta_index", no_rebuild)
    with caplog.at_level("WARNING", logger="carbon_vep"):
        _assert_reads_the_new_genome(new)
    assert caplog.text == ""
    assert {p.name: p.stat().st_mtime_ns for p in new.parent.iterdir()} == before


def test_concatenated_bgzip_with_its_fresh_index_passes(tmp_path):
    """`cat a.fa.gz b.fa.gz`: an empty EOF block mid-file, which the .gzi does not list."""
    folder = tmp_path / "cat"
    folder.mkdir()
    halves = []
    for name in ("a", "b"):
        plain = write_fasta(tmp_path / f"{name}.fa", {name: OLD[name]})
        pysam.tabix_compress(str(plain), str(tmp_path / f"{name}.fa.gz"))
        halves.append((tmp_path / f"{name}.fa.gz").read_bytes())
    genome = folder / "g.fa.gz"
    genome.write_bytes(b"".join(halves))
    pysam.faidx(str(genome))
    assert fai_check.index_problem(genome, Path(f"{genome}.fai"), Path(f"{genome}.gzi")) is None
    with open_reference(genome) as ref:
        assert ref.fetch("b", 149_930, 150_000) == OLD["b"][-70:]


@pytest.mark.parametrize("stale", ["fai", "gzi"])
def test_stale_bgzip_index_that_cannot_be_rebuilt_is_named(versions, tmp_path, monkeypatch, stale):
    old, new = versions
    fai, gzi = Path(f"{new}.fai"), Path(f"{new}.gzi")
    fai, gzi = (Path(f"{old}.fai"), gzi) if stale == "fai" else (fai, Path(f"{old}.gzi"))
    genome = _install(old, new, tmp_path / "run", fai, gzi)
    monkeypatch.setattr(reference.os, "access", lambda *_: False)  # a read-only directory
    with pytest.raises(
        InputError,
        match=rf"g\.fa\.gz\.{stale}: stale, it does not match .*g\.fa\.gz \(.*samtools faidx",
    ):
        open_reference(genome)


def _gzi(pairs: list[tuple[int, int]]) -> bytes:
    return struct.pack("<Q", len(pairs)) + b"".join(struct.pack("<QQ", *p) for p in pairs)


@pytest.mark.parametrize(
    "change",
    [
        lambda data: data[:-16],  # a block fewer than it counts
        lambda data: data[:8] + data[24:40] + data[8:24] + data[40:],  # out of order
        lambda data: _gzi([]),  # made for a one-block file
        lambda data: data[:-3],  # not whole pairs
    ],
    ids=["short", "unordered", "one-block", "cut"],
)
def test_index_problem_names_a_broken_gzi(versions, change):
    _, new = versions
    gzi = Path(f"{new}.gzi")
    gzi.write_bytes(change(gzi.read_bytes()))
    found = fai_check.index_problem(new, Path(f"{new}.fai"), gzi)
    assert found is not None and found[0] == gzi


def test_a_gzi_missing_a_middle_block_is_found(versions):
    """htslib seeks through the listed blocks only: one left out shifts the reads after it. (A
    block is checked where it is read: here, where record a ends.)"""
    _, new = versions
    gzi = Path(f"{new}.gzi")
    data = gzi.read_bytes()
    (count,) = struct.unpack_from("<Q", data)
    pairs = list(struct.iter_unpack("<QQ", data[8:]))
    assert count == len(pairs) >= 4
    gzi.write_bytes(_gzi(pairs[:2] + pairs[3:]))
    found = fai_check.index_problem(new, Path(f"{new}.fai"), gzi)
    assert found is not None and found[0] == gzi and "does not list the block" in found[1]
