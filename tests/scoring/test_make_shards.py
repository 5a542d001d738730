"""`carbon-vep make-shards` in bounded memory (`scoring.make_shards.write_shards`): with tiny
batches, buckets and bins, every shard file must be byte for byte the one the in-memory version
wrote (every key at once: unique, sorted, windows, `assign_shards`, a file a shard), a site's
alleles in one shard wherever the batches and buckets are cut; an empty panel gives one empty
shard; a failure leaves no folder, or the earlier one as it was."""

from __future__ import annotations

import io
import random
from pathlib import Path

import polars as pl
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.cli import main
from carbon_vep.columns import VARIANT_KEY
from carbon_vep.config.recipes import RECIPES
from carbon_vep.errors import InputError
from carbon_vep.genome.windows import assign_shards
from carbon_vep.scoring import make_shards
from carbon_vep.scoring.make_shards import bucket_bins, write_shards

LENGTHS = {"chr1": 120, "chr10": 120, "chr2": 120, "chr7": 2400}
WINDOW_BP = 20


def _add_windows(variants: pl.DataFrame) -> pl.DataFrame:
    return RECIPES["centered"].add_windows(variants, LENGTHS, WINDOW_BP)


def _panel_rows() -> list[tuple[str, str, int, str, str]]:
    """(status, ref_chrom, pos, ref, alt): three contigs (sorted chr1 < chr10 < chr2, not as
    listed), sites of one to four alleles across bins, keys given twice, rows not `ok` (one
    with a key no `ok` row has), in a shuffled order."""
    rows = []
    for chrom in ("chr2", "chr10", "chr1"):
        for pos in (3, 9, 10, 11, 19, 20, 21, 40, 41, 77, 100, 101):
            alleles = "CGTA"[: 1 + (pos + len(chrom)) % 4]
            rows += [("ok", chrom, pos, "N", alt) for alt in alleles]
    rows += [("ok", "chr10", 20, "N", "C"), ("ok", "chr1", 77, "N", "C")]  # duplicated keys
    rows += [("ref_mismatch", "chr2", 50, "N", "G"), ("skipped", "chr1", 3, "N", "C")]
    rows += [("skipped", "chr1", 3, "NA", "N")]  # a non-`ok` row of an `ok` row's site
    random.Random(5).shuffle(rows)
    return rows


def _checked(rows) -> pl.DataFrame:
    """A checked table's layout: row_id, the panel's columns, status and reason."""
    frame = pl.DataFrame(
        [(i, *row) for i, row in enumerate(rows)],
        schema={"row_id": pl.Int64, "status": pl.String, **dict.fromkeys(VARIANT_KEY)},
        orient="row",
    )
    return frame.with_columns(
        pl.col("pos").cast(pl.Int64),
        pl.format("panel.vcf:line {}", pl.col("row_id")).alias("source"),
        pl.lit("").alias("reason"),
    )


def _write(tmp_path: Path, checked: pl.DataFrame) -> Path:
    path = tmp_path / "checked.parquet"
    checked.write_parquet(path, row_group_size=4)
    return path


def _in_memory_files(checked: pl.DataFrame, shard_size: int) -> list[bytes]:
    """The shard files as the in-memory version wrote them: every distinct `ok` key at once
    (`unique` then `sort`), windows, `assign_shards`, a file a shard (one empty if none)."""
    ok = checked.filter(pl.col("status") == "ok").select(VARIANT_KEY)
    sharded = assign_shards(_add_windows(ok.unique().sort(VARIANT_KEY)), shard_size)
    parts = sharded.partition_by("shard", maintain_order=True, include_key=False)
    files = []
    for part in parts or [sharded.drop("shard")]:
        buffer = io.BytesIO()
        part.write_parquet(buffer)
        files.append(buffer.getvalue())
    return files


def _shard_files(outdir: Path) -> list[bytes]:
    names = sorted(p.name for p in outdir.iterdir())
    assert names == [f"shard_{i:05d}.parquet" for i in range(len(names))]  # nothing else
    return [(outdir / name).read_bytes() for name in names]


def _sizes(monkeypatch, batch: int, bucket: int, bin_bp: int) -> None:
    monkeypatch.setattr(make_shards, "BATCH_ROWS", batch)
    monkeypatch.setattr(make_shards, "BUCKET_ROWS", bucket)
    monkeypatch.setattr(make_shards, "BIN_BP", bin_bp)


@pytest.mark.parametrize(
    ("batch", "bucket", "bin_bp"),
    [(1, 1, 1), (2, 5, 10), (3, 4, 7), (5, 1, 10), (7, 30, 25), (1000, 1000, 10**6)],
)
def test_the_shard_files_are_the_in_memory_versions(tmp_path, monkeypatch, batch, bucket, bin_bp):
    """Several contigs, duplicated keys, rows not `ok`: the same files byte for byte with
    batches, buckets and bins that cut the sorted keys anywhere (a site's alleles across a
    batch boundary, a shard across batches and buckets), and with none."""
    _sizes(monkeypatch, batch, bucket, bin_bp)
    checked = _checked(_panel_rows())
    path = _write(tmp_path, checked)
    for shard_size in (1, 3, 1000):
        outdir = tmp_path / f"shards_{shard_size}"
        expected = _in_memory_files(checked, shard_size)
        n_variants = checked.filter(pl.col("status") == "ok").select(VARIANT_KEY).n_unique()
        assert write_shards(path, outdir, _add_windows, shard_size) == (n_variants, len(expected))
        assert _shard_files(outdir) == expected, (shard_size, batch, bucket, bin_bp)


def test_a_site_whose_alleles_straddle_batches_stays_in_one_shard(tmp_path, monkeypatch):
    """Batches of 2 rows: chr1:2's three alleles are rows 2-4, cut after row 2; chr1:1 filled
    the first shard (shard_size 1), so chr1:2 starts the second and keeps all three."""
    _sizes(monkeypatch, batch=2, bucket=1000, bin_bp=1000)
    rows = [("ok", "chr1", 1, "N", "A")] + [("ok", "chr1", 2, "N", alt) for alt in "ACG"]
    rows += [("ok", "chr1", 3, "N", "A")]
    outdir = tmp_path / "shards"
    write_shards(_write(tmp_path, _checked(rows)), outdir, _add_windows, shard_size=1)
    shards = [pl.read_parquet(outdir / f"shard_{i:05d}.parquet") for i in range(3)]
    assert [s.select("pos", "alt").rows() for s in shards] == [
        [(1, "A")],
        [(2, "A"), (2, "C"), (2, "G")],
        [(3, "A")],
    ]
    assert not (outdir / "shard_00003.parquet").exists()


def test_a_shard_from_two_buckets_is_one_row_group(tmp_path, monkeypatch):
    """A shard of 7 rows of one bucket and 993 of the next: written from one chunk, as the
    in-memory version did (polars writes a frame of those two chunks as two row groups)."""
    _sizes(monkeypatch, batch=100_000, bucket=7, bin_bp=1000)
    rows = [("ok", "chr7", pos, "N", "A") for pos in [*range(1, 8), *range(1000, 1995)]]
    checked = _checked(rows)
    outdir = tmp_path / "shards"
    assert write_shards(_write(tmp_path, checked), outdir, _add_windows, 1000) == (1002, 2)
    assert _shard_files(outdir) == _in_memory_files(checked, 1000)


@pytest.mark.parametrize("rows", [[], [("skipped", "chr1", 5, "N", "A")]], ids=["no", "none ok"])
def test_an_empty_panel_gives_one_empty_shard(tmp_path, rows):
    checked = _checked(rows)
    outdir = tmp_path / "shards"
    assert write_shards(_write(tmp_path, checked), outdir, _add_windows, 3) == (0, 1)
    assert _shard_files(outdir) == _in_memory_files(checked, 3)
    empty = pl.read_parquet(outdir / "shard_00000.parquet")
    assert empty.height == 0 and empty.columns[-3:] == [
        "window_start",
        "window_end",
        "variant_index",
    ]


def test_a_panel_on_one_contig(tmp_path, monkeypatch):
    _sizes(monkeypatch, batch=3, bucket=4, bin_bp=10)
    rows = [row for row in _panel_rows() if row[1] == "chr10"]
    checked = _checked([(status, "chr7", *rest) for status, _, *rest in rows])
    outdir = tmp_path / "shards"
    write_shards(_write(tmp_path, checked), outdir, _add_windows, 4)
    assert _shard_files(outdir) == _in_memory_files(checked, 4)
    assert len(_shard_files(outdir)) > 2


def test_buckets_start_at_bins_and_run_in_key_order():
    """Rows before a bin: 0, 2, 4, 9, 10 with buckets of 3 rows: the bin starting at row 4
    ends the second bucket past its 3 rows; no bucket starts inside a bin."""
    counts = pl.DataFrame(
        {"ref_chrom": ["chr1", "chr1", "chr1", "chr2", "chr2"], "_bin": [0, 3, 4, 0, 9]}
    ).with_columns(len=pl.Series([2, 2, 5, 1, 1], dtype=pl.UInt32))
    buckets = bucket_bins(counts, bucket_rows=3)
    assert buckets["_bucket"].to_list() == [0, 0, 1, 3, 3]
    assert buckets.select("ref_chrom", "_bin").equals(counts.select("ref_chrom", "_bin"))


def test_a_failure_midway_leaves_no_folder_or_the_earlier_one(tmp_path, monkeypatch):
    _sizes(monkeypatch, batch=2, bucket=5, bin_bp=10)
    path = _write(tmp_path, _checked(_panel_rows()))
    outdir = tmp_path / "shards"
    calls = 0

    def failing(variants: pl.DataFrame) -> pl.DataFrame:
        nonlocal calls
        calls += 1
        if calls == 6:  # shards of the first batches are written by now
            raise RuntimeError("killed")
        return _add_windows(variants)

    with pytest.raises(RuntimeError, match="killed"):
        write_shards(path, outdir, failing, shard_size=1)
    assert list(tmp_path.iterdir()) == [path]  # no folder, no temporary one
    write_shards(path, outdir, _add_windows, shard_size=2)
    before = _shard_files(outdir)
    calls = 0
    with pytest.raises(RuntimeError, match="killed"):
        write_shards(path, outdir, failing, shard_size=1)
    assert _shard_files(outdir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checked.parquet", "shards"]


@pytest.mark.parametrize("problem", ["not parquet", "no alt column", "no status column"])
def test_an_unreadable_checked_panel_is_named(tmp_path, problem):
    path = tmp_path / "checked.parquet"
    if problem == "not parquet":
        path.write_text("chrom\tpos\n")
    else:
        _checked(_panel_rows()).drop(problem.split()[1]).write_parquet(path)
    outdir = tmp_path / "shards"
    with pytest.raises(InputError, match="cannot read this Parquet file") as err:
        write_shards(path, outdir, _add_windows, 2)
    assert str(path) in str(err.value)
    assert list(tmp_path.iterdir()) == [path]


def test_the_command_writes_the_in_memory_shards(tmp_path, caplog):
    """`carbon-vep make-shards` with a FASTA: the recipe's windows from its contig lengths."""
    reference = write_fasta(
        tmp_path / "genome.fa", {c: random_dna(n, 3) for c, n in LENGTHS.items()}
    )
    checked = _checked(_panel_rows())
    path = _write(tmp_path, checked)
    outdir = tmp_path / "shards"
    args = ["make-shards", "--checked", str(path), "--reference", str(reference)]
    args += ["--recipe", "centered", "--window-bp", str(WINDOW_BP), "--shard-size", "4"]
    assert main([*args, "--outdir", str(outdir)]) == 0
    assert _shard_files(outdir) == _in_memory_files(checked, 4)
    missing = tmp_path / "nope.parquet"
    args[2] = str(missing)
    assert main([*args, "--outdir", str(tmp_path / "other")]) == 2
    assert "nope.parquet: cannot read this Parquet file" in caplog.text
    assert not (tmp_path / "other").exists()
