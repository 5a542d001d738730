"""A bootstrap draw's label metrics from the rows sorted once (`evaluate.bootstrap`) against
scikit-learn on the drawn rows written out: ties, repeats, one class, chromosomes left out."""

import numpy as np
import pytest

from carbon_vep.evaluate.bootstrap import METRICS_FROM_CURVE, ResampledRows, TiedRuns
from carbon_vep.evaluate.metrics import (
    BY_CHROM_METRICS,
    GLOBAL_METRICS,
    _quiet,
    _two_class,
    chromosome_values,
)


def tied_rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels, scores rounded to a few values (long runs of ties across both classes), and
    chromosomes, one of them negatives only and one rare."""
    rng = np.random.default_rng(seed)
    chroms = rng.choice(["1", "2", "X", "MT"], n, p=[0.5, 0.3, 0.17, 0.03])
    labels = (rng.random(n) < 0.35).astype(np.int64)
    labels[chroms == "X"] = 0
    scores = np.round(rng.normal(size=n) + 0.7 * labels, 1)
    return labels, scores, chroms


def draws(n: int, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n, n) for _ in range(count)]


@pytest.mark.parametrize("n", [7, 60, 2_000])
def test_every_metric_of_a_draw_is_sklearns_on_the_drawn_rows(n):
    labels, scores, chroms = tied_rows(n, seed=n)
    resampled = ResampledRows(labels, scores, chroms)
    for index in draws(n, 40, seed=1):
        got = resampled.metrics(index)
        for name, metric in GLOBAL_METRICS.items():
            assert got[name] == _two_class(metric, labels[index], scores[index]), name


def test_the_chromosomes_of_a_draw_are_sklearns_including_one_class_and_absent_ones():
    labels, scores, chroms = tied_rows(60, seed=5)
    resampled = ResampledRows(labels, scores, chroms)
    absent = 0
    for index in draws(60, 60, seed=2):
        got = resampled.chromosome_entries(index, BY_CHROM_METRICS)
        for metric in BY_CHROM_METRICS:
            expected = chromosome_values(labels[index], scores[index], chroms[index], metric)
            assert got[metric] == expected, metric
        absent += "MT" not in set(chroms[index])
    assert absent, "no draw left a chromosome out: the case is not exercised"


def test_rows_drawn_zero_times_are_no_threshold():
    """A run of tied scores whose rows were all left out must not add a point: a
    precision of 0/0 at the top or a flat ROC segment would move the areas."""
    labels = np.array([1, 0, 1, 0, 1, 0])
    scores = np.array([9.0, 9.0, 5.0, 4.0, 3.0, 1.0])
    index = np.array([2, 2, 3, 4, 5, 5, 5])
    [curve] = TiedRuns.of(labels, scores).curves(index)
    assert curve.tps.tolist() == [2, 2, 3, 3] and curve.fps.tolist() == [0, 1, 1, 4]
    for name, metric in METRICS_FROM_CURVE.items():
        assert metric(curve) == GLOBAL_METRICS[name](labels[index], scores[index]), name


def test_groups_are_ranked_apart_and_a_group_not_drawn_is_empty():
    labels = np.array([1, 0, 0, 1, 1])
    scores = np.array([0.5, 0.9, 0.5, 0.2, 0.7])
    groups = np.array([1, 0, 1, 0, 1])
    runs = TiedRuns.of(labels, scores, groups)
    zero, one = runs.curves(np.arange(5))
    assert (zero.tps.tolist(), zero.fps.tolist()) == ([0, 1], [1, 1])  # 0.9(-) 0.2(+)
    assert (one.tps.tolist(), one.fps.tolist()) == ([1, 2], [0, 1])  # 0.7(+), 0.5 tied (+-)
    zero, one = runs.curves(np.array([0, 2, 4]))
    assert len(zero.tps) == 0 and one.tps.tolist() == [1, 2]


def test_one_class_gives_sklearns_values():
    """AUROC undefined (NaN); average precision 0 with negatives only, 1 with positives only."""
    scores = np.array([0.3, 0.1, 0.3, 0.9])
    for labels, average_precision in ((np.zeros(4, int), 0.0), (np.ones(4, int), 1.0)):
        [curve] = TiedRuns.of(labels, scores).curves(np.arange(4))
        assert np.isnan(curve.auroc())
        assert curve.average_precision() == average_precision
        assert average_precision == _quiet(GLOBAL_METRICS["average_precision"], labels, scores)
