import polars as pl
import pytest

from carbon_vep.scoring.merge import MergeError, merge_scores
from carbon_vep.scoring.shard import SCORE_SCHEMA


def _checked():
    rows = [
        (0, "1", "chr1", 10, "A", "C", "ok"),
        (1, "1", "chr1", 10, "A", "G", "ok"),
        (2, "1", "chr1", 20, "T", "C", "ref_mismatch"),
        (3, "1", "chr1", 30, "G", "A", "ok"),
        (4, "1", "chr1", 30, "G", "A", "ok"),  # duplicate row: scored once, kept twice
        (5, "9", None, 5, "A", "C", "unknown_contig"),
    ]
    frame = pl.DataFrame(
        rows, schema=["row_id", "chrom", "ref_chrom", "pos", "ref", "alt", "status"], orient="row"
    )
    return frame.with_columns(pl.lit("").alias("reason"), pl.lit("x").alias("source"))


def _scores(keys, values):
    rows = []
    for (chrom, pos, ref, alt), score in zip(keys, values, strict=True):
        row = dict.fromkeys(SCORE_SCHEMA)
        row.update(
            ref_chrom=chrom,
            pos=pos,
            ref=ref,
            alt=alt,
            score=score,
            score_status="scored",
            score_reason="",
            recipe="centered",
        )
        rows.append(row)
    return pl.from_dicts(rows, schema=SCORE_SCHEMA)


KEYS = [("chr1", 10, "A", "C"), ("chr1", 10, "A", "G"), ("chr1", 30, "G", "A")]


def test_merge_joins_on_key_not_row_order():
    checked = _checked()
    a = merge_scores(checked, [_scores(KEYS[:1], [1.0]), _scores(KEYS[1:], [2.0, 3.0])])
    b = merge_scores(checked, [_scores(KEYS[::-1], [3.0, 2.0, 1.0])])
    assert a.equals(b)
    assert a["row_id"].to_list() == [0, 1, 2, 3, 4, 5]
    assert a["score"].to_list() == [1.0, 2.0, None, 3.0, 3.0, None]
    assert a["status"].to_list() == [
        "scored",
        "scored",
        "ref_mismatch",
        "scored",
        "scored",
        "unknown_contig",
    ]


def test_missing_score_is_an_error():
    with pytest.raises(MergeError, match="1 scoreable variants have no score"):
        merge_scores(_checked(), [_scores(KEYS[:2], [1.0, 2.0])])


def test_duplicate_score_across_shards_is_an_error():
    with pytest.raises(MergeError, match="share a key"):
        merge_scores(_checked(), [_scores(KEYS, [1.0, 2.0, 3.0]), _scores(KEYS[:1], [1.0])])


def test_the_rows_sharing_a_key_are_counted_each():
    """A key scored three times, another twice (apart, among keys scored once): 5 rows."""
    shards = [_scores(KEYS, [1.0, 2.0, 3.0]), _scores(KEYS[:1] * 2 + KEYS[2:], [1.0] * 3)]
    with pytest.raises(MergeError, match="^5 score rows share a key across shards"):
        merge_scores(_checked(), shards)


def test_stray_score_is_an_error():
    extra = [*KEYS, ("chr1", 99, "A", "C")]
    with pytest.raises(MergeError, match="1 scores match no variant"):
        merge_scores(_checked(), [_scores(extra, [1.0, 2.0, 3.0, 4.0])])


def test_a_row_not_ok_gets_no_score_even_where_its_key_was_scored():
    """The scores are joined onto every row by key and kept on the `ok` rows alone: a row of
    another status with a scored key (a duplicate the check set aside) keeps its own status
    and no score; rows come back in row_id order whatever order they came in."""
    checked = _checked().with_columns(
        pl.when(pl.col("row_id") == 4).then(pl.lit("skipped")).otherwise("status").alias("status")
    )
    merged = merge_scores(checked.reverse(), [_scores(KEYS, [1.0, 2.0, 3.0])])
    assert merged["row_id"].to_list() == [0, 1, 2, 3, 4, 5]
    assert merged["score"].to_list() == [1.0, 2.0, None, 3.0, None, None]
    assert merged["status"].to_list()[3:5] == ["scored", "skipped"]
    assert merged["recipe"].to_list()[3:5] == ["centered", None]
    assert merged.columns[: checked.width] == checked.columns  # the panel's columns first
