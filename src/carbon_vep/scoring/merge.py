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
    # the scores lined up with the checked rows by one left join of the key columns alone, then
    # set beside the checked columns (kept on the `ok` rows only): no copy of the panel's other
    # columns, nor filtered copies, a concatenation and a sort of the whole table (at ClinVar's
    # size those held ~2 kB a row at once)
    lined_up = checked.select(*key, "status", "reason").join(
        scores, on=key, how="left", maintain_order="left"
    )
    if lined_up.height != checked.height:
        raise MergeError(f"merge produced {lined_up.height} rows for {checked.height} panel rows")
    taken = (*key, "score_status", "score_reason")  # the last two become status and reason
    added = [name for name in scores.columns if name not in taken]
    values = lined_up.select(
        pl.when(is_ok).then(pl.col("score_status")).otherwise(pl.col("status")).alias("status"),
        pl.when(is_ok).then(pl.col("score_reason")).otherwise(pl.col("reason")).alias("reason"),
        *(pl.when(is_ok).then(pl.col(name)).otherwise(None).alias(name) for name in added),
    )
    merged = checked.with_columns(values.get_columns())
    return merged if merged["row_id"].is_sorted() else merged.sort("row_id")
