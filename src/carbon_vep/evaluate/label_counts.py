"""How the scored rows of a panel are labelled, as its metrics JSON counts them: the rows left
out for conflicting labels, the labelled and positive ones, those without a label, and the label
values that matched neither class (`UNMATCHED_LABELS`, with a warning naming them)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from carbon_vep.columns import Status
from carbon_vep.config.stages import (
    LabelSettings,
    commonest_label_values,
    label_classes,
    unmatched_label_counts,
)

UNMATCHED_LABELS = "unmatched_label_values"  # the metrics JSON's key
UNMATCHED_LISTED = 10  # the most common values listed by name; the rest only counted
UNMATCHED_IN_WARNING = 5  # of those, named in the warning line


def binary_labels(values: pl.Series, positive: Sequence[str], negative: Sequence[str]) -> pl.Series:
    """1 / 0 / null from the raw label column, matching its string form against the lists."""
    frame = pl.DataFrame({"value": values})
    return frame.select(label_classes(pl.col("value"), positive, negative).alias("label01"))[
        "label01"
    ]


def count_label_conflicts(merged: pl.DataFrame, result: dict) -> None:
    """Scored rows whose label sources disagree are left out of the metrics: count them."""
    if "label_conflict" not in merged.columns:
        return
    conflicted = merged.filter(
        (pl.col("status") == Status.SCORED) & pl.col("label_conflict").fill_null(False)
    )
    result["n_excluded_label_conflict"] = conflicted.height
    if conflicted.height:
        result["warnings"].append(
            f"{conflicted.height} scored rows with conflicting labels excluded from metrics"
        )


def count_labels(
    merged: pl.DataFrame, labelled: pl.DataFrame, labels: LabelSettings, result: dict
) -> None:
    """n_labelled, n_positive, n_scored_without_label, and the values of the scored rows
    without a label that are not null (`UNMATCHED_LABELS`): a spelling the lists miss drops
    those rows from every metric, so a warning names the values."""
    column = merged[labels.column]
    unlabelled = binary_labels(column, labels.positive_labels, labels.negative_labels).is_null()
    scored = merged["status"] == Status.SCORED
    unmatched = unmatched_label_counts(
        column.filter(scored), labels.positive_labels, labels.negative_labels
    )
    listed, others = unmatched.head(UNMATCHED_LISTED), unmatched.slice(UNMATCHED_LISTED)
    result.update(
        n_labelled=labelled.height,
        n_positive=int(labelled["label01"].sum()) if labelled.height else 0,
        n_scored_without_label=int((scored & unlabelled).sum()),
    )
    result[UNMATCHED_LABELS] = {
        "values": listed.to_dicts(),
        "n_other_values": others.height,
        "n_other_rows": int(others["n"].sum()),
    }
    if unmatched.height:
        result["warnings"].append(_unmatched_warning(unmatched))


def _unmatched_warning(unmatched: pl.DataFrame) -> str:
    """One line: how many scored rows hold a value of neither list, and the commonest ones."""
    from carbon_vep.config.run import setting_name

    values, rest = commonest_label_values(unmatched, UNMATCHED_IN_WARNING)
    more = f" and {rest} other value{'s' * (rest > 1)}" if rest else ""
    return (
        f"{int(unmatched['n'].sum())} scored rows left out of the metrics hold a label value of "
        f"neither {setting_name('positive_labels')} nor {setting_name('negative_labels')}: "
        f"{values}{more}"
    )
