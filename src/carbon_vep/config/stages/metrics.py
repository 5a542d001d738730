"""What compute_metrics reports for a dataset (`MetricSettings`) and the intervals of every
metric (`EvaluationSettings`, the suite's too)."""

from __future__ import annotations

from dataclasses import dataclass

from carbon_vep.columns import RESERVED as PIPELINE_COLUMNS
from carbon_vep.config.fields import ConfigError, describe, field_named, group, setting


@dataclass(frozen=True)
class EvaluationSettings:
    """Intervals of every metric (metrics, suite tasks)."""

    bootstrap: int = setting(
        1000,
        scope="run",
        minimum=0,
        help="resamples for the 95% percentile bootstrap intervals of every metric (0 = none); "
        "the jobs that compute metrics read it (compute_metrics, the suite's merges), no model "
        "job: changing it reruns no scoring",
    )
    seed: int = setting(0, scope="cli", help="random seed of the bootstrap")


@dataclass(frozen=True)
class MetricSettings:
    """What compute_metrics reports for a dataset."""

    headline_metrics: tuple[str, ...] = setting(
        ("auroc",),
        flag="headline",
        help="metrics of this dataset in the results table, e.g. auroc, auprc_trapezoid, "
        "average_precision, average_precision_by_chrom_weighted_drop_single_class (TraitGym)",
    )
    breakdown_columns: tuple[str, ...] = setting(
        ("region", "variant_type", "consequence"),
        flag="breakdown",
        help="columns whose groups get their own metrics (when present)",
    )
    spearman_column: str | None = setting(
        None,
        help="continuous functional score column for Spearman against delta (BRCA2 DMS); a "
        "panel column named as one the pipeline writes (`score`) is `panel_<name>` here",
    )
    evaluation: EvaluationSettings = group(EvaluationSettings)

    def check(self) -> None:
        """A Spearman column the pipeline writes itself (`score`, `delta`, ...) is the score
        or a part of it, never the panel's: a panel column of that name is carried as
        `panel_<name>`, and ρ against delta would be the score against itself (−1 for `score`).
        Refused by compute_metrics and when a config is read."""
        column = self.spearman_column
        if column in PIPELINE_COLUMNS:
            spearman = field_named(self, "spearman_column")
            raise ConfigError(
                f"{describe(spearman)} = {column!r} names a column the pipeline writes itself, "
                f"not the panel's: a panel column {column!r} is carried as 'panel_{column}' "
                f"(set {describe(spearman, f'panel_{column}')})"
            )
