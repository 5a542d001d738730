"""Zero-shot VEP metrics, each named and defined (docs/suite-conventions.md#metric-conventions).

Every number written by `vep_metrics` has a name in `metrics` and a sentence in `definitions`;
the two published AUPRCs (trapezoid and step-wise average precision) never share a name, and
the by-chromosome averages say which convention they follow and what they dropped.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache

import numpy as np
import polars as pl
from sklearn.metrics import auc, average_precision_score, precision_recall_curve, roc_auc_score

from carbon_vep.columns import Status
from carbon_vep.config.stages import EvaluationSettings, LabelSettings, MetricSettings
from carbon_vep.errors import InputError
from carbon_vep.evaluate.bootstrap import (
    ResampledRows,
    bootstrap_intervals,
    bootstrap_mean_interval,
)
from carbon_vep.evaluate.label_counts import binary_labels, count_label_conflicts, count_labels

SIGN_FLIP_AUROC = 0.35
CONVENTIONS = ("drop_single_class", "keep_all")
BY_CHROM_METRICS = ("auroc", "average_precision")
CHROM_COLUMN = "chrom"  # the name by-chromosome groups go by in the rows the report reads
# They group on the reference's contig: a panel spelling one chromosome `17` and `chr17` has
# one group (the panel's spelling only where a row has no reference contig)
CHROM_KEY = ("ref_chrom", "chrom")
CALIBRATED_SCORE = "calibrated"  # a scan's context-calibrated score (columns.CALIBRATED)

DEFINITIONS = {
    "auroc": "sklearn roc_auc_score(label, score) over labelled scored rows; "
    "score oriented so larger = more damaging",
    "auprc_trapezoid": "sklearn auc(recall, precision) over precision_recall_curve(label, score) "
    "(trapezoid rule; the BRCA2 / ClinVar headline 'AUPRC')",
    "average_precision": "sklearn average_precision_score(label, score) (step-wise AUPRC; "
    "TraitGym's per-chromosome 'AUPRC')",
}
CONVENTION_TEXT = {
    "drop_single_class": "chromosomes with one class only are dropped and the weights n_c / Σn "
    "renormalised over the rest (the Carbon evaluation script)",
    "keep_all": "every chromosome is kept with weight n_c / Σn (the TraitGym rule); a "
    "one-class chromosome contributes sklearn's value (average precision 0 without positives, "
    "1 with only positives); AUROC is undefined there, so the AUROC average is null",
}


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    return float(roc_auc_score(labels, scores))


def auprc_trapezoid(labels: np.ndarray, scores: np.ndarray) -> float:
    precision, recall, _ = precision_recall_curve(labels, scores)
    return float(auc(recall, precision))


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    return float(average_precision_score(labels, scores))


GLOBAL_METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "auroc": auroc,
    "auprc_trapezoid": auprc_trapezoid,
    "average_precision": average_precision,
}


def by_chrom_name(metric: str, convention: str) -> str:
    return f"{metric}_by_chrom_weighted_{convention}"


def spearman_name(column: str) -> str:
    return f"spearman_delta_vs_{column}"


def _chromosome(merged: pl.DataFrame) -> list[pl.Expr]:
    """The contig a row's by-chromosome group is named by (CHROM_KEY's first non-null value);
    none without those columns."""
    present = [pl.col(c).cast(pl.Utf8) for c in CHROM_KEY if c in merged.columns]
    return [pl.coalesce(present).alias(CHROM_COLUMN)] if present else []


def labelled_rows(
    merged: pl.DataFrame, label_column: str, positive: Sequence[str], negative: Sequence[str]
) -> pl.DataFrame:
    """Scored rows with a 0/1 `label01`, label conflicts excluded (the rows metrics use)."""
    frame = merged.with_columns(
        binary_labels(merged[label_column], positive, negative), *_chromosome(merged)
    )
    keep = (pl.col("status") == Status.SCORED) & pl.col("label01").is_not_null()
    if "label_conflict" in frame.columns:
        keep = keep & ~pl.col("label_conflict").fill_null(False)
    return frame.filter(keep)


def evaluated_rows(merged: pl.DataFrame, labels: LabelSettings) -> pl.DataFrame:
    """The rows the label metrics use, as the report plots them: row_id, chrom, label01, score
    (empty when the dataset has no label column)."""
    columns = ["row_id", CHROM_COLUMN, "label01", "score"]
    column = labels.column
    if not column or column not in merged.columns:
        return pl.DataFrame(
            schema={
                "row_id": pl.Int64,
                CHROM_COLUMN: pl.Utf8,
                "label01": pl.Int32,
                "score": pl.Float64,
            }
        )
    rows = labelled_rows(merged, column, labels.positive_labels, labels.negative_labels)
    return rows.select(columns)


# ---- by chromosome -----------------------------------------------------------------------
def _quiet(metric: Callable, labels: np.ndarray, scores: np.ndarray) -> float | None:
    """The metric as sklearn gives it, None where sklearn calls it undefined (NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = metric(labels, scores)
    return None if np.isnan(value) else float(value)


def _two_class(metric: Callable, labels: np.ndarray, scores: np.ndarray) -> float | None:
    """The metric where both classes are present, else None (never AP = 0 by default)."""
    if len(labels) == 0 or labels.min() == labels.max():
        return None
    return _quiet(metric, labels, scores)


def chromosome_values(
    labels: np.ndarray, scores: np.ndarray, chroms: np.ndarray, metric: str
) -> list[dict]:
    """Per chromosome: n, positives, share of all rows, one-class flag, and the metric as
    sklearn gives it (None where undefined: AUROC on one class)."""
    entries = []
    for chrom in sorted(set(chroms.tolist())):
        mask = chroms == chrom
        y = labels[mask]
        entries.append(
            {
                "chrom": chrom,
                "n": int(mask.sum()),
                "n_positive": int(y.sum()),
                "weight_of_all": float(mask.sum() / len(labels)),
                "one_class": bool(y.min() == y.max()),
                "value": _quiet(GLOBAL_METRICS[metric], y, scores[mask]),
            }
        )
    return entries


def weighted_average(entries: list[dict], convention: str) -> dict:
    """Σ_c w_c · value_c under a convention; `dropped` lists the chromosomes left out (with the
    weight they would have had), `chromosomes` the ones averaged, weights renormalised."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown by-chromosome convention {convention!r}")
    drop = convention == "drop_single_class"
    kept = [
        {k: v for k, v in e.items() if k != "one_class"}
        for e in entries
        if not (drop and e["one_class"])
    ]
    dropped = [
        {
            **{k: e[k] for k in ("chrom", "n", "n_positive", "weight_of_all")},
            "reason": "one class only",
        }
        for e in entries
        if drop and e["one_class"]
    ]
    kept_n = sum(e["n"] for e in kept)
    for entry in kept:
        entry["weight"] = entry["n"] / kept_n
    defined = kept and all(e["value"] is not None for e in kept)
    return {
        "value": float(sum(e["weight"] * e["value"] for e in kept)) if defined else None,
        "convention": convention,
        "chromosomes": kept,
        "dropped": dropped,
        "dropped_weight": float(sum(e["weight_of_all"] for e in dropped)),
    }


def by_chromosome(
    labels: np.ndarray, scores: np.ndarray, chroms: np.ndarray, metric: str, convention: str
) -> dict:
    """Weighted average of a metric over chromosomes (weights n_c / Σn), with its details."""
    return weighted_average(chromosome_values(labels, scores, chroms, metric), convention)


# ---- intervals, correlation, breakdowns ----------------------------------------------------
def status_counts(rows: pl.DataFrame) -> dict[str, int]:
    """Rows of each status, statuses in sorted order."""
    return dict(sorted(Counter(rows["status"].to_list()).items()))


def task_metrics(kind: str, rows: pl.DataFrame, scored: pl.DataFrame, **fields) -> dict:
    """The metrics JSON of a suite task before its intervals and warnings: its kind, the rows,
    those scored and each status's count, then the task's own `fields`."""
    counts = {
        "n_rows": rows.height,
        "n_scored": scored.height,
        "status_counts": status_counts(rows),
    }
    head = {"kind": kind, **counts}
    return head | fields | {"confidence_intervals": {}, "warnings": []}


def add_mean_interval(
    result: dict, name: str, values: np.ndarray, evaluation: EvaluationSettings
) -> None:
    """The bootstrap interval of the mean of `values` as `name`'s interval in `result` (none
    when the evaluation asks for no resamples or there are no values)."""
    interval = bootstrap_mean_interval(values, evaluation.bootstrap, evaluation.seed)
    if interval:
        result["confidence_intervals"][name] = interval


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman ρ (average ranks for ties); None for fewer than 3 pairs or a constant input."""
    if len(x) < 3:
        return None
    value = pl.DataFrame({"x": x, "y": y}).select(pl.corr("x", "y", method="spearman")).item()
    return None if value is None or np.isnan(value) else float(value)


def breakdowns(labelled: pl.DataFrame, columns: Sequence[str]) -> dict[str, list[dict]]:
    """Per-group n, positives and the three global metrics for each breakdown column present."""
    out: dict[str, list[dict]] = {}
    for column in columns:
        if column not in labelled.columns:
            continue
        groups = []
        for (group,), part in labelled.group_by(column, maintain_order=True):
            y, s = part["label01"].to_numpy(), part["score"].to_numpy()
            row = {"group": group, "n": part.height, "n_positive": int(y.sum())}
            for name, metric in GLOBAL_METRICS.items():
                row[name] = _two_class(metric, y, s)
            groups.append(row)
        out[column] = sorted(groups, key=lambda g: str(g["group"]))
    return out


# ---- the whole dataset ---------------------------------------------------------------------
SCORING_PARAMETERS = ("recipe", "normalization")  # recorded per row; one value a scored table


def metric_columns(
    available: Sequence[str], labels: LabelSettings, options: MetricSettings
) -> list[str]:
    """The columns of a merged table that `vep_metrics` and `evaluated_rows` read (of those
    it has): a ClinVar table's INFO fields are never loaded for its metrics. Every column
    when the label column is missing, so the error lists what the table has."""
    if labels.column and labels.column not in available:
        return list(available)
    wanted = {
        "row_id",
        "status",
        "score",
        "label_conflict",
        CALIBRATED_SCORE,
        *CHROM_KEY,
        *SCORING_PARAMETERS,
        *options.breakdown_columns,
        labels.column,
        options.spearman_column,
    }
    return [column for column in available if column in wanted]


def vep_metrics(
    merged: pl.DataFrame,
    labels: LabelSettings,
    options: MetricSettings | None = None,
    source: str = "the scored table",
) -> dict:
    """Status counts, global metrics, by-chromosome averages, Spearman, breakdowns and
    bootstrap intervals on the scored, labelled rows; every number named and defined.

    The label column is `labels.column`: the configured one, or the `label` column that
    ingest derives from ClinVar's CLNSIG (so a ClinVar dataset needs no second setting)."""
    options = options or MetricSettings()
    options.check()
    result = _vep_result(merged, labels, options.evaluation)
    if options.spearman_column:
        _add_spearman(merged, options, result)
    if not labels.column:
        result["warnings"].append("no label column configured: label metrics not computed")
        return result
    if labels.column not in merged.columns:
        from carbon_vep.config.run import setting_name

        raise InputError(
            source,
            f"label column {labels.column!r} ({setting_name('label_column')}) is not a column "
            f"of it; its columns are {merged.columns}",
        )
    count_label_conflicts(merged, result)
    labelled = labelled_rows(merged, labels.column, labels.positive_labels, labels.negative_labels)
    count_labels(merged, labelled, labels, result)
    if labelled["label01"].n_unique() < 2:
        result["warnings"].append("labelled scored rows hold fewer than two classes")
        return result
    _add_label_metrics(labelled, options, result)
    return result


def _calibrated_metrics(
    labelled: pl.DataFrame, labels01: np.ndarray, evaluation: EvaluationSettings
) -> dict:
    """The same metrics and intervals on the context-calibrated score of a scan (recipe
    from_scan), to read beside the raw score's: calibration removes the mutational-context
    bias a raw score carries (docs/calibration.md)."""
    scratch: dict = {"by_chromosome": {}, "definitions": {}, "warnings": []}
    scores = labelled[CALIBRATED_SCORE].to_numpy().astype(np.float64)
    values, evaluate = _label_statistics(labelled, labels01, scores, scratch)
    out: dict = {"metrics": values, "confidence_intervals": {}}
    if evaluation.bootstrap > 0:
        out["confidence_intervals"] = bootstrap_intervals(
            len(labels01), evaluate, evaluation.bootstrap, evaluation.seed
        )
    return out


def _vep_result(
    merged: pl.DataFrame, labels: LabelSettings, evaluation: EvaluationSettings
) -> dict:
    """A dataset's metrics JSON before any metric: status counts, definitions, parameters."""
    return {
        "kind": "vep",
        "n_rows": merged.height,
        "status_counts": status_counts(merged),
        "metrics": {},
        "confidence_intervals": {},
        "by_chromosome": {},
        "breakdowns": {},
        "warnings": [],
        "definitions": dict(DEFINITIONS),
        "parameters": {
            "label_column": labels.column,
            "positive_labels": list(labels.positive_labels),
            "negative_labels": list(labels.negative_labels),
            "bootstrap_resamples": evaluation.bootstrap,
            "seed": evaluation.seed,
            "chrom_column": " else ".join(CHROM_KEY),
            **_scoring_parameters(merged),
        },
    }


def _add_label_metrics(labelled: pl.DataFrame, options: MetricSettings, result: dict) -> None:
    """AUROC, AUPRCs and by-chromosome averages, their bootstrap intervals, the breakdowns,
    and a warning when the AUROC says the sign is flipped."""
    labels01, scores = labelled["label01"].to_numpy(), labelled["score"].to_numpy()
    values, evaluate = _label_statistics(labelled, labels01, scores, result)
    result["metrics"].update(values)
    evaluation = options.evaluation
    if evaluation.bootstrap > 0:
        result["confidence_intervals"].update(
            bootstrap_intervals(len(labels01), evaluate, evaluation.bootstrap, evaluation.seed)
        )
    result["breakdowns"] = breakdowns(labelled, options.breakdown_columns)
    if CALIBRATED_SCORE in labelled.columns and labelled[CALIBRATED_SCORE].null_count() == 0:
        result[CALIBRATED_SCORE] = _calibrated_metrics(labelled, labels01, evaluation)
        result["definitions"][CALIBRATED_SCORE] = (
            "the same metrics on the scan's context-calibrated score: score minus the mean score "
            "of neutral SNVs of the same pentanucleotide context and alternate base"
        )
    value = result["metrics"]["auroc"]
    if value < SIGN_FLIP_AUROC:
        result["warnings"].append(
            f"AUROC {value:.3f} is far below 0.5: sign flipped? "
            "(scores must be oriented larger = more damaging)"
        )


def _scoring_parameters(merged: pl.DataFrame) -> dict[str, str | None]:
    """The recipe and normalisation the scored rows were scored with (recorded per row)."""
    scored = merged.filter(pl.col("status") == Status.SCORED)
    return {
        name: scored[name][0] if scored.height and name in scored.columns else None
        for name in SCORING_PARAMETERS
    }


def _label_statistics(
    labelled: pl.DataFrame,
    labels: np.ndarray,
    scores: np.ndarray,
    result: dict,
) -> tuple[dict[str, float | None], Callable[[np.ndarray], dict[str, float | None]]]:
    """Every label metric on all rows (scikit-learn's functions), and the same metrics as a
    function of a bootstrap draw's row index (`ranking.ResampledRows`: the rows sorted once,
    not per draw); records the by-chromosome details and their definitions in `result`."""
    values = {name: _two_class(metric, labels, scores) for name, metric in GLOBAL_METRICS.items()}
    chroms = None
    if CHROM_COLUMN in labelled.columns:
        chroms = labelled[CHROM_COLUMN].cast(pl.Utf8).fill_null("").to_numpy()
        for metric in BY_CHROM_METRICS:
            entries = chromosome_values(labels, scores, chroms, metric)
            result["by_chromosome"][metric] = {c: weighted_average(entries, c) for c in CONVENTIONS}
            for convention in CONVENTIONS:
                details = result["by_chromosome"][metric][convention]
                values[by_chrom_name(metric, convention)] = details["value"]
                result["definitions"][by_chrom_name(metric, convention)] = (
                    f"Σ_c w_c · {metric}_c over chromosomes c, w_c = n_c / Σn; "
                    + CONVENTION_TEXT[convention]
                )
        dropped = result["by_chromosome"]["auroc"]["drop_single_class"]["dropped"]
        if dropped:
            names = ", ".join(f"{d['chrom']} ({d['weight_of_all']:.1%})" for d in dropped)
            result["warnings"].append(f"one-class chromosomes (weight): {names}")

    @cache
    def resampled() -> ResampledRows:  # sorted at the first draw: never with `bootstrap: 0`
        return ResampledRows(labels, scores, chroms)

    def evaluate(index: np.ndarray) -> dict[str, float | None]:
        drawn = resampled().metrics(index)
        if chroms is not None:
            by_chrom = resampled().chromosome_entries(index, BY_CHROM_METRICS)
            for metric, entries in by_chrom.items():
                for convention in CONVENTIONS:
                    name = by_chrom_name(metric, convention)
                    drawn[name] = weighted_average(entries, convention)["value"]
        return drawn

    return values, evaluate


def _add_spearman(merged: pl.DataFrame, options: MetricSettings, result: dict) -> None:
    """Spearman ρ(column, delta) on every scored row with a value, labelled or not (as
    published), with its own bootstrap interval."""
    column = options.spearman_column
    if column not in merged.columns:
        result["warnings"].append(f"spearman column {column!r} not in the scores")
        return
    rows = merged.filter(pl.col("status") == Status.SCORED).select(
        pl.col(column).cast(pl.Float64, strict=False).alias("value"), "score"
    )
    rows = rows.filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
    values, delta = rows["value"].to_numpy(), -rows["score"].to_numpy()
    name = spearman_name(column)
    result["definitions"][name] = (
        f"Spearman ρ between {column!r} and delta = −score (LL(alt) − LL(ref) for the "
        f"likelihood recipes) over the {rows.height} scored rows with a value (the published "
        "convention: delta, not score)"
    )
    result["metrics"][name] = spearman(values, delta)
    evaluation = options.evaluation
    if evaluation.bootstrap > 0 and rows.height >= 3:
        result["confidence_intervals"].update(
            bootstrap_intervals(
                rows.height,
                lambda i: {name: spearman(values[i], delta[i])},
                evaluation.bootstrap,
                evaluation.seed,
            )
        )
