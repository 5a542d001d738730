"""Bootstrap intervals: percentile intervals of a statistic over row resamples, and the label
metrics of a resample without a sort per resample.

A resample drawn with replacement is the same rows, each counted as often as it was drawn.
The rows are sorted by descending score once and numbered by their run of tied scores (one
threshold of scikit-learn's curves each); a resample's positives and negatives in every run are
one `bincount` of its draw, and its true- and false-positive counts at each threshold their
cumulative sums. Those are integers, exactly what scikit-learn counts on the drawn rows written
out, and the curves and areas below are scikit-learn 1.9's own formulas on them
(`sklearn.metrics._ranking`: `roc_curve` with its collinear points dropped,
`precision_recall_curve`, `average_precision_score`): each value is the one
`metrics.GLOBAL_METRICS` gives on the drawn rows, to the last bit (tests check it on tied
scores, one class, and chromosomes a draw leaves out).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from sklearn.metrics import auc

CI_LEVEL = 0.95


def bootstrap_intervals(
    n_rows: int,
    evaluate: Callable[[np.ndarray], dict[str, float | None]],
    n_resamples: int,
    seed: int,
) -> dict[str, dict]:
    """Percentile 95% intervals of each named statistic over row resamples (with replacement).

    `evaluate(index)` returns every statistic on the rows `index`. A resample where a
    statistic is undefined (e.g. one class drawn) is left out for that statistic, and the
    number of resamples used is reported.
    """
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(n_resamples):
        for name, value in evaluate(rng.integers(0, n_rows, n_rows)).items():
            if value is not None and not np.isnan(value):
                draws.setdefault(name, []).append(value)
    alpha = (1 - CI_LEVEL) / 2
    out = {}
    for name, values in draws.items():
        low, high = np.quantile(values, [alpha, 1 - alpha])
        out[name] = {
            "low": float(low),
            "high": float(high),
            "level": CI_LEVEL,
            "n_resamples": len(values),
            "method": f"percentile bootstrap over rows, seed {seed}",
        }
    return out


def bootstrap_mean_interval(values: np.ndarray, n_resamples: int, seed: int) -> dict | None:
    """Percentile 95% interval of a row mean (accuracy) over row resamples."""
    if n_resamples <= 0 or len(values) == 0:
        return None
    intervals = bootstrap_intervals(
        len(values), lambda i: {"mean": float(values[i].mean())}, n_resamples, seed
    )
    return intervals.get("mean")


class Curve:
    """True and false positives at each threshold of a set of rows (highest score first), and
    the metrics scikit-learn computes from them."""

    def __init__(self, tps: np.ndarray, fps: np.ndarray):
        self.tps, self.fps = tps.astype(np.float64), fps.astype(np.float64)

    @property
    def both_classes(self) -> bool:
        return len(self.tps) > 0 and self.tps[-1] > 0 and self.fps[-1] > 0

    def auroc(self) -> float:
        """`roc_auc_score`: NaN with one class; else the trapezoid under the ROC curve with
        collinear points dropped, starting at (0, 0)."""
        tps, fps = self.tps, self.fps
        if not self.both_classes:
            return float("nan")
        if len(fps) > 2:
            bends = np.logical_or(np.diff(fps, 2), np.diff(tps, 2))
            keep = np.flatnonzero(np.concatenate(([True], bends, [True])))
            fps, tps = fps[keep], tps[keep]
        tps, fps = np.concatenate(([0.0], tps)), np.concatenate(([0.0], fps))
        return auc(fps / fps[-1], tps / tps[-1])

    @cached_property
    def precision_recall(self) -> tuple[np.ndarray, np.ndarray]:
        """`precision_recall_curve`'s precision and recall (recall decreasing, ending at
        (0, 1); recall 1 everywhere when there is no positive)."""
        tps, predicted = self.tps, self.tps + self.fps
        precision = np.where(predicted != 0, tps / np.where(predicted != 0, predicted, 1.0), 0.0)
        recall = np.ones_like(tps) if tps[-1] == 0 else tps / tps[-1]
        return np.concatenate((precision[::-1], [1.0])), np.concatenate((recall[::-1], [0.0]))

    def auprc_trapezoid(self) -> float:
        """`auc(recall, precision)` over the precision-recall curve."""
        if len(self.tps) == 0:
            return float("nan")
        precision, recall = self.precision_recall
        return auc(recall, precision)

    def average_precision(self) -> float:
        """`average_precision_score`: the step-wise integral, −0.0 clipped to 0."""
        if len(self.tps) == 0:
            return float("nan")
        precision, recall = self.precision_recall
        return float(max(0.0, -np.sum(np.diff(recall) * precision[:-1])))


METRICS_FROM_CURVE: dict[str, Callable[[Curve], float]] = {
    "auroc": Curve.auroc,
    "auprc_trapezoid": Curve.auprc_trapezoid,
    "average_precision": Curve.average_precision,
}


@dataclass(frozen=True)
class TiedRuns:
    """Rows numbered by their run of tied scores, highest score first, within groups of rows
    (chromosomes) or one group: row i's code is 2·run + label, runs of group g are
    `bounds[g]:bounds[g + 1]`."""

    codes: np.ndarray
    bounds: np.ndarray

    @classmethod
    def of(cls, labels: np.ndarray, scores: np.ndarray, groups: np.ndarray | None = None):
        """`groups`: each row's group number, 0 .. G−1, every group with a row (one group
        when None)."""
        groups = np.zeros(len(labels), np.int64) if groups is None else groups
        order = np.lexsort((-np.asarray(scores, np.float64), groups))  # stable, as sklearn
        ranked_scores, ranked_groups = np.asarray(scores)[order], groups[order]
        starts = np.ones(len(order), bool)
        starts[1:] = (np.diff(ranked_scores) != 0) | (np.diff(ranked_groups) != 0)
        runs = np.empty(len(order), np.int64)
        runs[order] = np.cumsum(starts) - 1
        bounds = np.searchsorted(ranked_groups[starts], np.arange(groups.max(initial=0) + 2))
        codes = 2 * runs + np.asarray(labels, np.int64)
        # int32 where it fits: the draw's gather reads half the memory
        return cls(codes.astype(np.int32) if len(codes) < 2**30 else codes, bounds)

    def curves(self, index: np.ndarray) -> list[Curve]:
        """Each group's curve on the rows `index` (drawn with replacement): runs with no row
        drawn are no threshold of it; a group with none drawn has an empty curve."""
        tally = np.bincount(self.codes[index], minlength=2 * self.bounds[-1])
        negatives, positives = tally[0::2], tally[1::2]
        drawn = (negatives | positives) > 0
        curves = []
        for start, stop in zip(self.bounds[:-1], self.bounds[1:], strict=True):
            keep = np.flatnonzero(drawn[start:stop])
            tps = np.cumsum(positives[start:stop])[keep]
            curves.append(Curve(tps, np.cumsum(negatives[start:stop])[keep]))
        return curves


def _defined(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


class ResampledRows:
    """The label metrics of bootstrap draws of one set of rows, over all rows and by
    chromosome, the rows sorted once."""

    def __init__(self, labels: np.ndarray, scores: np.ndarray, chroms: np.ndarray | None):
        self.n_rows = len(labels)
        self.runs = TiedRuns.of(labels, scores)
        self.chroms: list[str] = []
        self.chrom_runs = None
        if chroms is not None:
            self.chroms, numbers = np.unique(chroms.astype(str), return_inverse=True)
            self.chrom_runs = TiedRuns.of(labels, scores, numbers.astype(np.int64))

    def metrics(self, index: np.ndarray) -> dict[str, float | None]:
        """Each of METRICS_FROM_CURVE on the rows `index` (a draw with replacement); None
        unless both classes were drawn (as `metrics._two_class`)."""
        [curve] = self.runs.curves(index)
        return {
            name: metric(curve) if curve.both_classes else None
            for name, metric in METRICS_FROM_CURVE.items()
        }

    def chromosome_entries(self, index: np.ndarray, metrics: Sequence[str]) -> dict[str, list]:
        """Per metric, `metrics.chromosome_values`' entries for the rows `index`: each drawn
        chromosome's n, positives, share of the draw, one-class flag and value (None where
        undefined)."""
        entries: dict[str, list] = {metric: [] for metric in metrics}
        if self.chrom_runs is None:
            return entries
        for chrom, curve in zip(self.chroms, self.chrom_runs.curves(index), strict=True):
            if len(curve.tps) == 0:
                continue
            n = int(curve.tps[-1] + curve.fps[-1])
            head = {
                "chrom": str(chrom),
                "n": n,
                "n_positive": int(curve.tps[-1]),
                "weight_of_all": float(n / len(index)),
                "one_class": not curve.both_classes,
            }
            for metric in metrics:
                entries[metric].append(
                    head | {"value": _defined(METRICS_FROM_CURVE[metric](curve))}
                )
        return entries
