"""Join shard scores back onto every checked panel row, by key, with the counts verified."""

from __future__ import annotations

import polars as pl

from carbon_vep import columns
from carbon_vep.columns import VARIANT_KEY, Status

_SCORE_SCHEMA = columns.schema(columns.SCORE_SHARD)


class MergeError(RuntimeError):
    pass


def merge_scores(checked: pl.DataFrame, shard_scores: list[pl.DataFrame]) -> pl.DataFrame:
    """One row per checked row (sorted by row_id) with status, reason and the score columns.

    Scores are joined on the variant key, never by row order; every scoreable key must have
    exactly one score and no score may be left over. The scoring status replaces `ok`.
    """
    key = list(VARIANT_KEY)
    scores = (
        pl.concat(shard_scores, how="vertical")
        if shard_scores
        else pl.DataFrame(schema=_SCORE_SCHEMA)
    )
    duplicated = scores.filter(pl.struct(key).is_duplicated())
    if duplicated.height:
        raise MergeError(f"{duplicated.height} score rows share a key across shards")
    is_ok = pl.col("status") == Status.OK
    wanted = checked.filter(is_ok).select(key).unique()
    missing = wanted.join(scores, on=key, how="anti")
    extra = scores.join(wanted, on=key, how="anti")
    if missing.height or extra.height:
        raise MergeError(
            f"{missing.height} scoreable variants have no score and {extra.height} scores match "
            f"no variant (e.g. missing {missing.head(3).to_dicts()})"
        )
    ok = checked.filter(is_ok).join(scores, on=key, how="left")
    ok = ok.with_columns(
        pl.col("score_status").alias("status"), pl.col("score_reason").alias("reason")
    )
    added = {name: dtype for name, dtype in scores.schema.items() if name not in key}
    rest = checked.filter(~is_ok).with_columns(
        [pl.lit(None, dtype=dtype).alias(name) for name, dtype in added.items()]
    )
    merged = pl.concat([ok, rest.select(ok.columns)], how="vertical").sort("row_id")
    merged = merged.drop("score_status", "score_reason")
    if merged.height != checked.height:
        raise MergeError(f"merge produced {merged.height} rows for {checked.height} panel rows")
    return merged
