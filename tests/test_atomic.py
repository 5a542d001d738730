"""Every output is written under a temporary name and renamed when complete (carbon_vep.atomic):
a failed or killed write leaves nothing at the output's name, a finished one replaces it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pysam
import pytest

from carbon_vep import atomic


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "a.json"
    out.write_text("old")
    with pytest.raises(RuntimeError), atomic.atomic_path(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert out.read_text() == "old" and sorted(tmp_path.iterdir()) == [out]


def test_a_killed_writers_temporary_is_removed_and_a_suffix_kept(tmp_path):
    out = tmp_path / "score_A.bw"
    stale = tmp_path / ".score_A.bw.tmp-99999.bw"  # a killed job's file (another pid)
    stale.write_text("half")
    with atomic.atomic_path(out, suffix=".bw") as tmp:
        assert tmp.name.endswith(".bw") and not stale.exists()
        tmp.write_text("whole")
    assert out.read_text() == "whole" and sorted(tmp_path.iterdir()) == [out]


def test_a_directory_is_replaced_whole_or_not_at_all(tmp_path):
    out = tmp_path / "shards"
    out.mkdir()
    (out / "shard_00009.parquet").write_text("from an earlier run")
    with pytest.raises(RuntimeError), atomic.atomic_dir(out) as tmp:
        (tmp / "shard_00000.parquet").write_text("new")
        raise RuntimeError("killed")
    assert [p.name for p in out.iterdir()] == ["shard_00009.parquet"]
    with atomic.atomic_dir(out) as tmp:
        (tmp / "shard_00000.parquet").write_text("new")
    assert [p.name for p in out.iterdir()] == ["shard_00000.parquet"]  # no stale shard kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]


def _rows(handle) -> None:
    handle.write(b"#chrom\tpos\tscore\nchr1\t5\t0.5\nchr1\t9\t1.5\n")


def test_an_indexed_table_arrives_with_its_index(tmp_path):
    out = tmp_path / "snvs.tsv.gz"
    with atomic.indexed_bgzf(out) as handle:
        _rows(handle)
    with pysam.TabixFile(str(out)) as tabix:
        assert [line.split("\t")[1] for line in tabix.fetch("chr1", 6, 10)] == ["9"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snvs.tsv.gz", "snvs.tsv.gz.tbi"]


def test_a_failed_indexed_write_leaves_neither_file(tmp_path):
    out = tmp_path / "snvs.tsv.gz"
    with pytest.raises(RuntimeError), atomic.indexed_bgzf(out) as handle:
        _rows(handle)
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with atomic.indexed_file(tmp_path / "plain.vcf", tabix=None) as work:
        Path(work).write_text("##fileformat=VCFv4.2\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.vcf"]  # no index asked


def test_a_running_writers_temporary_is_left_alone(tmp_path):
    """Two jobs writing one file at once (two jobs indexing one FASTA): the second must not
    delete the first one's half-written file while its writer still runs."""
    writer = subprocess.Popen(["sleep", "60"])
    try:
        out = tmp_path / "genome.fa.fai"
        running = tmp_path / f".genome.fa.fai.tmp-{writer.pid}"
        running.write_text("half")
        with atomic.atomic_path(out) as tmp:
            assert running.exists() and tmp != running
            tmp.write_text("whole")
        assert out.read_text() == "whole" and running.read_text() == "half"
    finally:
        writer.kill()
        writer.wait()
    with atomic.atomic_path(out) as tmp:  # its writer gone, the file is stale: removed
        tmp.write_text("again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["genome.fa.fai"]


def test_another_machines_temporary_is_left_alone_until_it_is_stale(tmp_path):
    """On a shared filesystem a temporary file may be another node's: its pid says nothing
    here, so it is kept while its writer may still be writing (touched within a day), and
    removed once it has not been touched for longer (a node's killed job)."""
    out = tmp_path / "genome.fa.fai"
    recent = tmp_path / f".genome.fa.fai.tmp-{os.getpid()}@othernode"  # our pid, not our host
    old = tmp_path / ".genome.fa.fai.tmp-1@othernode2"
    for path in (recent, old):
        path.write_text("half")
    day_ago = time.time() - atomic.FOREIGN_STALE_S - 60
    os.utime(old, (day_ago, day_ago))
    with atomic.atomic_path(out) as tmp:
        assert tmp.name.endswith(f"@{atomic._HOST}") and tmp.name != recent.name
        tmp.write_text("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == [recent.name, "genome.fa.fai"]


def test_a_file_held_open_is_published_whole_or_not_at_all(tmp_path):
    """A writer fed across calls (a scan chunk's Parquet writer): nothing at the name until it
    is published; a discarded one leaves nothing, and a killed writer's file is removed."""
    out = tmp_path / "chunk_0.parquet"
    stale = tmp_path / ".chunk_0.parquet.tmp-99999"  # a killed job's file (another pid)
    stale.write_text("half")
    pending = atomic.PendingFile(out)
    assert not stale.exists()
    with pending.tmp.open("w") as handle:
        handle.write("row group 1\n")
        assert not out.exists()
        handle.write("row group 2\n")
    pending.publish()
    pending.discard()  # after publishing: nothing to remove
    assert out.read_text() == "row group 1\nrow group 2\n"
    failed = atomic.PendingFile(out)
    failed.tmp.write_text("half")
    failed.discard()
    assert out.read_text() == "row group 1\nrow group 2\n"
    assert sorted(tmp_path.iterdir()) == [out]


def _done(directory: Path) -> bool:
    return (directory / "done").is_file()


def _build(staging: Path, who: str) -> None:
    (staging / "weights").write_text(who)
    (staging / "done").write_text("")


def test_a_shared_directory_replaces_an_incomplete_one(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "weights").write_text("a killed build's")  # no `done`: incomplete
    with atomic.shared_dir(out, _done) as staging:
        assert staging.parent == tmp_path and staging != out
        _build(staging, "ours")
    assert (out / "weights").read_text() == "ours" and _done(out)
    assert out.stat().st_mode & 0o777 == 0o755
    assert sorted(tmp_path.iterdir()) == [out]  # no staging left


def test_a_failed_shared_build_leaves_no_directory(tmp_path):
    out = tmp_path / "model"
    with pytest.raises(RuntimeError), atomic.shared_dir(out, _done) as staging:
        (staging / "weights").write_text("half")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_two_builds_at_once_keep_the_first_complete_one(tmp_path):
    """Two builds of one directory in one process (or two workers): each has its own staging,
    the first to finish is published, and the second leaves it intact."""
    out = tmp_path / "model"
    with atomic.shared_dir(out, _done) as slow:
        with atomic.shared_dir(out, _done) as fast:
            assert fast != slow
            _build(fast, "first")
        assert (out / "weights").read_text() == "first" and slow.is_dir()
        _build(slow, "second")
    assert (out / "weights").read_text() == "first"
    assert sorted(tmp_path.iterdir()) == [out]


def test_losing_the_rename_race_keeps_the_winners_directory(tmp_path, monkeypatch):
    """Another build publishes between this one's removal of an incomplete directory and its
    rename: the rename fails, the winner's directory stays. A directory there that is not
    complete is an error, not a win."""
    out = tmp_path / "model"
    rename = os.replace

    def winner_first(source, target):
        Path(target).mkdir()
        _build(Path(target), "winner")
        rename(source, target)

    monkeypatch.setattr(os, "replace", winner_first)
    with atomic.shared_dir(out, _done) as staging:
        _build(staging, "loser")
    assert (out / "weights").read_text() == "winner"
    assert sorted(tmp_path.iterdir()) == [out]

    def half_written_first(source, target):
        Path(target).mkdir(exist_ok=True)
        (Path(target) / "weights").write_text("half")
        rename(source, target)

    shutil.rmtree(out)
    monkeypatch.setattr(os, "replace", half_written_first)
    with pytest.raises(OSError), atomic.shared_dir(out, _done) as staging:
        _build(staging, "ours")
    assert sorted(tmp_path.iterdir()) == [out]  # the staging is removed all the same


def test_the_index_kind_follows_what_a_tbi_can_hold():
    assert atomic.index_suffix(0) == atomic.index_suffix(atomic.TBI_MAX_POSITION) == ".tbi"
    assert atomic.index_suffix(atomic.TBI_MAX_POSITION + 1) == ".csi"  # 536,870,913 bp


def _far_rows(handle, pos: int = 600_000_000) -> None:
    handle.write(f"#chrom\tpos\tscore\nchr1\t5\t0.5\nchr1\t{pos}\t1.5\n".encode())


def test_a_table_past_2_to_the_29_gets_a_csi_that_readers_find(tmp_path):
    out = tmp_path / "snvs.tsv.gz"
    with pytest.raises(OSError), atomic.indexed_bgzf(out) as handle:  # what crashed the scans
        _far_rows(handle)
    assert list(tmp_path.iterdir()) == []
    with atomic.indexed_bgzf(out, longest=600_000_000) as handle:
        _far_rows(handle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snvs.tsv.gz", "snvs.tsv.gz.csi"]
    assert atomic.index_of(out) == tmp_path / "snvs.tsv.gz.csi"
    with pysam.TabixFile(str(out), index=str(atomic.index_of(out))) as tabix:
        rows = [line.split("\t")[1] for line in tabix.fetch("chr1", 599_999_990, 600_000_010)]
    assert rows == ["600000000"]
    assert (
        atomic.indexed_bytes(out)
        == out.stat().st_size + (tmp_path / "snvs.tsv.gz.csi").stat().st_size
    )


def test_an_index_of_the_other_kind_is_not_left_behind(tmp_path):
    """htslib reads a .csi before a .tbi: a stale one of the other kind would answer."""
    out = tmp_path / "snvs.tsv.gz"
    with atomic.indexed_bgzf(out, longest=600_000_000) as handle:
        _far_rows(handle)
    with atomic.indexed_bgzf(out) as handle:  # rewritten for a genome a .tbi holds
        _rows(handle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snvs.tsv.gz", "snvs.tsv.gz.tbi"]
    assert atomic.index_of(out) == tmp_path / "snvs.tsv.gz.tbi"
    with atomic.indexed_bgzf(out, longest=600_000_000) as handle:
        _far_rows(handle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snvs.tsv.gz", "snvs.tsv.gz.csi"]


# ---- the workflow's own index job: index_tabix (carbon-vep index-tabix) --------------------
def test_a_file_written_without_its_index_drops_the_old_files_index(tmp_path):
    """--no-index (the workflow indexes in a job of its own): an index left beside the file it
    replaces would index the old rows, so it goes before the new file arrives."""
    out = tmp_path / "snvs.tsv.gz"
    with atomic.indexed_bgzf(out) as handle:
        _rows(handle)
    with atomic.indexed_bgzf(out, index=False) as handle:
        _rows(handle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snvs.tsv.gz"]
    assert atomic.index_tabix(out, f"{out}.tbi") == tmp_path / "snvs.tsv.gz.tbi"
    with pysam.TabixFile(str(out)) as tabix:
        assert [line.split("\t")[1] for line in tabix.fetch("chr1", 6, 10)] == ["9"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snvs.tsv.gz", "snvs.tsv.gz.tbi"]


def test_index_tabix_writes_the_kind_asked_for_and_drops_the_other(tmp_path):
    out = tmp_path / "snvs.tsv.gz"
    with atomic.indexed_bgzf(out) as handle:  # with its .tbi
        _rows(handle)
    atomic.index_tabix(out, f"{out}.csi")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snvs.tsv.gz", "snvs.tsv.gz.csi"]
    with pysam.TabixFile(str(out), index=str(atomic.index_of(out))) as tabix:
        assert [line.split("\t")[1] for line in tabix.fetch("chr1", 0, 10)] == ["5", "9"]
    for wrong in (f"{out}.idx", tmp_path / "elsewhere" / "snvs.tsv.gz.tbi", f"{out}tbi"):
        with pytest.raises(ValueError, match="is snvs.tsv.gz.tbi or snvs.tsv.gz.csi beside it"):
            atomic.index_tabix(out, wrong)


def _vcf_past_tbi(path: Path) -> None:
    """A VCF whose second record ends past 2^29 (its POS 2 bp before, a 3-bp REF): the header
    declares the contig's length, as the reference's would."""
    header = pysam.VariantHeader()
    header.contigs.add("1H", length=700_000_000)
    with pysam.VariantFile(str(path), "wz", header=header) as vcf:
        for pos, ref in ((5, "A"), (atomic.TBI_MAX_POSITION - 1, "ACG")):
            vcf.write(vcf.new_record(contig="1H", start=pos - 1, alleles=(ref, "T")))


@pytest.mark.parametrize("kind", ["tsv", "vcf"])
def test_a_tbi_is_refused_for_data_past_2_to_the_29_naming_contig_and_limit(tmp_path, kind):
    """Synthetic files a few bytes long (not a 700 Mbp genome): the refusal names the contig,
    the position, the limit and the fix, and leaves no index and no temporary file; the
    .csi it names is then written and read."""
    from carbon_vep.cli import main

    if kind == "tsv":
        out = tmp_path / "snvs.tsv.gz"
        with atomic.indexed_bgzf(out, index=False) as handle:
            _far_rows(handle)
        contig, end = "chr1", 600_000_000
    else:
        out = tmp_path / "results.vcf.gz"
        _vcf_past_tbi(out)
        contig, end = "1H", atomic.TBI_MAX_POSITION + 1  # POS 2^29 - 1 + len(REF) - 1
    with pytest.raises(atomic.TbiRangeError) as refused:
        atomic.index_tabix(out, f"{out}.tbi")
    assert str(refused.value) == (
        f"{contig}:{end:,} is past 536,870,912 bp (2^29), the last position a .tbi can hold: "
        f"index it as {out.name}.csi"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    assert main(["index-tabix", "--file", str(out), "--out", f"{out}.tbi"]) == 2  # a user error
    assert main(["index-tabix", "--file", str(out), "--out", f"{out}.csi"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name, f"{out.name}.csi"]
    with pysam.TabixFile(str(out), index=str(atomic.index_of(out))) as tabix:
        assert len(list(tabix.fetch(contig, end - 1, end))) == 1


def test_the_cli_names_the_file_a_tbi_cannot_hold(tmp_path, caplog):
    from carbon_vep.cli import main

    out = tmp_path / "snvs.tsv.gz"
    with atomic.indexed_bgzf(out, index=False) as handle:
        _far_rows(handle)
    assert main(["index-tabix", "--file", str(out), "--out", f"{out}.tbi"]) == 2
    assert f"{out}: chr1:600,000,000 is past 536,870,912 bp (2^29)" in caplog.text
    assert main(["index-tabix", "--file", str(out), "--out", f"{out}.gzi"]) == 2
    assert f"{out}.gzi: the index of {out} is snvs.tsv.gz.tbi or" in caplog.text
