"""Zero-shot VEP metrics with explicit names and definitions (zero-shot-suite.md §5)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import polars as pl
from sklearn.metrics import auc, average_precision_score, precision_recall_curve, roc_auc_score

DEFINITIONS = {
    "auroc": "sklearn roc_auc_score(label, score); score oriented so larger = more damaging",
    "auprc_trapezoid": "sklearn auc(recall, precision) over precision_recall_curve (trapezoid)",
    "average_precision": "sklearn average_precision_score(label, score) (step-wise AUPRC)",
}
SIGN_FLIP_AUROC = 0.35


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    return float(roc_auc_score(labels, scores))


def auprc_trapezoid(labels: np.ndarray, scores: np.ndarray) -> float:
    precision, recall, _ = precision_recall_curve(labels, scores)
    return float(auc(recall, precision))


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    return float(average_precision_score(labels, scores))


def binary_labels(values: pl.Series, positive: Sequence[str], negative: Sequence[str]) -> pl.Series:
    """1 / 0 / null from the raw label column, matching its string form against the lists."""
    frame = pl.DataFrame({"value": values.cast(pl.Utf8)})
    value = pl.col("value")
    return frame.select(
        pl.when(value.is_in(list(positive)))
        .then(1)
        .when(value.is_in(list(negative)))
        .then(0)
        .otherwise(None)
        .alias("label01")
    ).to_series()


def vep_metrics(
    merged: pl.DataFrame,
    label_column: str | None,
    positive: Sequence[str] = ("1", "1.0", "True", "true"),
    negative: Sequence[str] = ("0", "0.0", "False", "false"),
) -> dict:
    """Status counts plus AUROC / both AUPRCs on scored, labelled rows (with definitions)."""
    result: dict = {
        "n_rows": merged.height,
        "status_counts": dict(sorted(Counter(merged["status"].to_list()).items())),
        "metrics": {},
        "warnings": [],
        "definitions": DEFINITIONS,
    }
    if not label_column or label_column not in merged.columns:
        result["warnings"].append("no label column: metrics not computed")
        return result
    labelled = merged.with_columns(binary_labels(merged[label_column], positive, negative)).filter(
        (pl.col("status") == "scored") & pl.col("label01").is_not_null()
    )
    labels = labelled["label01"].to_numpy()
    scores = labelled["score"].to_numpy()
    result.update(n_labelled=int(len(labels)), n_positive=int(labels.sum()) if len(labels) else 0)
    if len(set(labels.tolist())) < 2:
        result["warnings"].append("labelled scored rows hold fewer than two classes")
        return result
    result["metrics"] = {
        "auroc": auroc(labels, scores),
        "auprc_trapezoid": auprc_trapezoid(labels, scores),
        "average_precision": average_precision(labels, scores),
    }
    if result["metrics"]["auroc"] < SIGN_FLIP_AUROC:
        result["warnings"].append(
            f"AUROC {result['metrics']['auroc']:.3f} is far below 0.5: sign flipped?"
        )
    return result
