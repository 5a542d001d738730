"""`merge_score_files` (`carbon-vep merge`): the checked table read a slice at a time, with a
tiny `BATCH_ROWS`, must give what `merge_scores` gives in memory, rows in order, and fail as it
does; a hash collision falls back to comparing the keys themselves."""

from __future__ import annotations

import re

import polars as pl
import pytest
from test_merge import _scores

from carbon_vep.errors import InputError
from carbon_vep.scoring import merge
from carbon_vep.scoring.merge import MergeError, merge_score_files, merge_scores

# (status, ref_chrom, pos, ref, alt): 11 rows, batches of 3 rows when BATCH_ROWS is 3
ROWS = [
    ("ok", "chr1", 10, "A", "C"),  # batch 0: shard a
    ("ok", "chr2", 50, "G", "T"),  # shard b
    ("ok", "chr1", 11, "A", "G"),  # shard a
    ("ref_mismatch", "chr1", 12, "T", "C"),  # batch 1: no `ok` row
    ("unknown_contig", None, 5, "A", "C"),
    ("skipped", "chr1", 10, "A", "C"),  # a scored key on a row not `ok`: no score
    ("ok", "chr1", 13, "AT", "A"),  # batch 2: shard a again
    ("ok", "chr2", 51, "C", "CAG"),  # shard b
    ("ok", "chr1", 10, "A", "C"),  # a duplicate row: scored once, kept twice
    ("ok", "chr2", 52, "T", "A"),  # batch 3, partial: shard b
    ("ok", "chr1", 14, "G", "A"),  # shard a
]
SHARD_A = [("chr1", 10, "A", "C"), ("chr1", 11, "A", "G"), ("chr1", 13, "AT", "A")]
SHARD_A += [("chr1", 14, "G", "A")]
SHARD_B = [("chr2", 50, "G", "T"), ("chr2", 51, "C", "CAG"), ("chr2", 52, "T", "A")]


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch):
    monkeypatch.setattr(merge, "BATCH_ROWS", 3)


def _checked(rows=ROWS) -> pl.DataFrame:
    frame = pl.DataFrame(
        [(i, *row) for i, row in enumerate(rows)],
        schema=["row_id", "status", "ref_chrom", "pos", "ref", "alt"],
        orient="row",
    )
    return frame.with_columns(
        pl.col("ref_chrom").alias("chrom"),
        pl.lit("").alias("reason"),
        pl.format("panel.vcf:line {}", pl.col("row_id")).alias("source"),
        pl.col("row_id").cast(pl.Int8).alias("label"),
    )


def _files(tmp_path, checked, shards):
    """The checked table and one score file a shard, as paths."""
    checked_path = tmp_path / "checked.parquet"
    checked.write_parquet(checked_path, row_group_size=2)
    paths = []
    for number, keys in enumerate(shards):
        paths.append(tmp_path / f"shard_{number}.parquet")
        _scores(keys, [float(k[1]) + 0.5 for k in keys]).write_parquet(paths[-1])
    return checked_path, paths


def _merged(tmp_path, checked, shards):
    checked_path, paths = _files(tmp_path, checked, shards)
    out = tmp_path / "scores.parquet"
    assert merge_score_files(checked_path, paths, out) == checked.height
    return pl.read_parquet(out)


def test_the_slices_give_the_merge_in_memory(tmp_path):
    """Rows of several slices take scores of one shard (a, b: every slice), a slice has no `ok`
    row, the last slice is partial, a row not `ok` keeps its status: the same table, schema and
    row order as `merge_scores`, each score on its variant's rows."""
    checked = _checked()
    shards = [SHARD_B[::-1], SHARD_A]  # a shard's rows in any order, shards in any order
    merged = _merged(tmp_path, checked, shards)
    expected = merge_scores(checked, [_scores(k, [float(x[1]) + 0.5 for x in k]) for k in shards])
    assert merged.equals(expected) and merged.schema == expected.schema
    assert merged["row_id"].to_list() == list(range(len(ROWS)))
    assert merged["score"].to_list() == [
        10.5, 50.5, 11.5, None, None, None, 13.5, 51.5, 10.5, 52.5, 14.5
    ]  # fmt: skip
    assert merged["status"].to_list()[3:6] == ["ref_mismatch", "unknown_contig", "skipped"]
    assert merged.columns[: checked.width] == checked.columns


def test_a_key_scored_in_two_shards_is_an_error(tmp_path):
    with pytest.raises(MergeError, match="2 score rows share a key across shards"):
        _merged(tmp_path, _checked(), [SHARD_A, SHARD_B, SHARD_B[2:]])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".scores")] == []
    assert not (tmp_path / "scores.parquet").exists()


def test_a_missing_score_is_an_error_naming_the_variant(tmp_path):
    with pytest.raises(MergeError, match="1 scoreable variants have no score and 0 scores") as err:
        _merged(tmp_path, _checked(), [SHARD_A, SHARD_B[:2]])
    assert "'ref_chrom': 'chr2', 'pos': 52" in str(err.value)  # the contig's name, not a number


def test_the_missing_variants_named_are_the_first_in_key_order(tmp_path):
    """Five keys without a score: the message names the first three by key, the same in every
    run (`unique` had left them in no set order)."""
    with pytest.raises(MergeError, match="5 scoreable variants have no score") as err:
        _merged(tmp_path, _checked(), [SHARD_B[:2]])
    named = [(k[0], k[1]) for k in SHARD_A[:3]]
    assert str(err.value).endswith(
        "(e.g. missing ["
        + ", ".join(
            f"{{'ref_chrom': '{c}', 'pos': {p}, 'ref': '{r}', 'alt': '{a}'}}"
            for (c, p), (_, _, r, a) in zip(named, SHARD_A[:3], strict=True)
        )
        + "])"
    )


def test_the_missing_variants_are_ordered_by_contig_name_not_by_its_number():
    """The contigs' numbers follow the order `unique` met them in (chr2 first here): the
    examples are still in the names' order."""
    keys = pl.DataFrame(
        {"ref_chrom": [0, 1, 1], "pos": [5, 9, 7], "ref": ["A"] * 3, "alt": ["C"] * 3},
        schema_overrides={"ref_chrom": pl.UInt32},
    )
    with pytest.raises(MergeError) as err:
        merge._check_keys(keys, keys.clear(), contig_names=["chr2", "chr1"])
    named = re.findall(r"'ref_chrom': '(chr\d)', 'pos': (\d+)", str(err.value))
    assert named == [("chr1", "7"), ("chr1", "9"), ("chr2", "5")]


def test_a_score_matching_no_row_is_an_error(tmp_path):
    with pytest.raises(MergeError, match="0 scoreable variants have no score and 1 scores match"):
        _merged(tmp_path, _checked(), [SHARD_A, [*SHARD_B, ("chr3", 1, "A", "C")]])


def test_keys_sharing_a_hash_are_compared_themselves(tmp_path, monkeypatch):
    """Every key hashed alike: the checks are redone on the keys, with the same table."""
    monkeypatch.setattr(merge, "_key_hash", lambda: pl.lit(7, dtype=pl.UInt64))
    merged = _merged(tmp_path, _checked(), [SHARD_A, SHARD_B])
    assert merged["score"].to_list()[:3] == [10.5, 50.5, 11.5]
    assert merged.filter(pl.col("status") == "scored")["score"].null_count() == 0


def test_a_score_of_another_key_with_the_same_hash_is_caught(tmp_path, monkeypatch):
    """A hash of the position alone: chr1:14 G>A's row would take chr1:14 G>T's score (one
    hash each side, counts equal); the keys compared as the scores are set beside the rows
    catch it, and the checks on the keys say what is wrong."""
    monkeypatch.setattr(merge, "_key_hash", lambda: pl.col("pos").cast(pl.UInt64))
    wrong = [*SHARD_A[:3], ("chr1", 14, "G", "T")]
    with pytest.raises(MergeError, match="1 scoreable variants have no score and 1 scores"):
        _merged(tmp_path, _checked(), [wrong, SHARD_B])
    assert not (tmp_path / "scores.parquet").exists()


def test_a_table_out_of_row_order_is_merged_in_order(tmp_path):
    checked = _checked()
    merged = _merged(tmp_path, checked.reverse(), [SHARD_A, SHARD_B])
    assert merged["row_id"].to_list() == list(range(len(ROWS)))
    assert merged.equals(_merged(tmp_path, checked, [SHARD_A, SHARD_B]))


def test_an_empty_checked_table_gives_an_empty_merge(tmp_path):
    checked = _checked().clear()
    merged = _merged(tmp_path, checked, [])
    assert merged.equals(merge_scores(checked, [])) and merged.height == 0


def test_an_unreadable_score_file_is_named(tmp_path):
    checked_path, paths = _files(tmp_path, _checked(), [SHARD_A, SHARD_B])
    paths[1].write_text("not parquet")
    with pytest.raises(InputError, match="shard_1.parquet: cannot read this Parquet file"):
        merge_score_files(checked_path, paths, tmp_path / "scores.parquet")
    assert list(tmp_path.glob("*scores.parquet*")) == []
