"""Join shard scores back onto every checked panel row, by key, with the counts verified."""

from __future__ import annotations

import polars as pl

from .recipes import SCORE_SCHEMA
from .windows import SCORE_KEY

_VALUE_COLUMNS = [c for c in SCORE_SCHEMA if c not in SCORE_KEY]


class MergeError(RuntimeError):
    pass


def merge_scores(checked: pl.DataFrame, shard_scores: list[pl.DataFrame]) -> pl.DataFrame:
    """One row per checked row (sorted by row_id) with status, reason and the score columns.

    Scores are joined on (ref_chrom, pos, ref, alt), never by row order; every scoreable key
    must have exactly one score and no score may be left over.
    """
    scores = (
        pl.concat(shard_scores, how="vertical")
        if shard_scores
        else pl.DataFrame(schema=SCORE_SCHEMA)
    )
    duplicated = scores.filter(pl.struct(SCORE_KEY).is_duplicated())
    if duplicated.height:
        raise MergeError(f"{duplicated.height} score rows share a key across shards")
    wanted = checked.filter(pl.col("status") == "ok").select(SCORE_KEY).unique()
    missing = wanted.join(scores, on=list(SCORE_KEY), how="anti")
    extra = scores.join(wanted, on=list(SCORE_KEY), how="anti")
    if missing.height or extra.height:
        raise MergeError(
            f"{missing.height} scoreable variants have no score and {extra.height} scores match "
            f"no variant (e.g. missing {missing.head(3).to_dicts()})"
        )
    ok = checked.filter(pl.col("status") == "ok").join(scores, on=list(SCORE_KEY), how="left")
    ok = ok.with_columns(
        pl.col("score_status").alias("status"), pl.col("score_reason").alias("reason")
    )
    rest = checked.filter(pl.col("status") != "ok").with_columns(
        [
            pl.lit(None, dtype=dtype).alias(c)
            for c, dtype in SCORE_SCHEMA.items()
            if c in _VALUE_COLUMNS
        ]
    )
    merged = pl.concat([ok, rest.select(ok.columns)], how="vertical").sort("row_id")
    merged = merged.drop("score_status", "score_reason").with_columns(
        pl.len().over(pl.struct("chrom", "pos", "ref", "alt")).alias("n_copies_in_panel")
    )
    if merged.height != checked.height:
        raise MergeError(f"merge produced {merged.height} rows for {checked.height} panel rows")
    return merged
