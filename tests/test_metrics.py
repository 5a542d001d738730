import numpy as np
import polars as pl
import pytest

from carbon_vep.metrics import auprc_trapezoid, auroc, average_precision, vep_metrics

LABELS = np.array([0, 0, 1, 1])
SCORES = np.array([0.1, 0.4, 0.35, 0.8])


def test_auroc_hand_computed():
    # positive-negative pairs ranked correctly: (0.35>0.1), (0.8>0.1), (0.8>0.4) = 3 of 4
    assert auroc(LABELS, SCORES) == pytest.approx(0.75)


def test_average_precision_hand_computed():
    # ranked: 0.8(+) 0.4(-) 0.35(+) 0.1(-): precision 1 at recall .5, 2/3 at recall 1
    assert average_precision(LABELS, SCORES) == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)


def test_auprc_trapezoid_hand_computed():
    # PR points (recall, precision): (0,1) (.5,1) (.5,.5) (1,2/3) (1,.5); trapezoid area
    expected = 0.5 * 1.0 + 0.5 * (0.5 + 2 / 3) / 2
    assert auprc_trapezoid(LABELS, SCORES) == pytest.approx(expected)
    assert auprc_trapezoid(LABELS, SCORES) != pytest.approx(average_precision(LABELS, SCORES))


def _merged(scores, labels, statuses=None):
    n = len(scores)
    return pl.DataFrame(
        {
            "status": statuses or ["scored"] * n,
            "score": scores,
            "LABEL": labels,
        }
    )


def test_vep_metrics_uses_only_scored_labelled_rows_and_counts_statuses():
    merged = _merged(
        [0.1, 0.4, 0.35, 0.8, 99.0, None],
        [0, 0, 1, 1, 0, 1],
        ["scored"] * 4 + ["scored", "ref_mismatch"],
    ).with_columns(pl.Series("LABEL", ["0", "0", "1", "1", None, "1"]))
    result = vep_metrics(merged, "LABEL")
    assert result["n_labelled"] == 4
    assert result["metrics"]["auroc"] == pytest.approx(0.75)
    assert result["status_counts"] == {"ref_mismatch": 1, "scored": 5}


def test_sign_flip_warning():
    result = vep_metrics(_merged(list(-SCORES * 10), list(LABELS) * 1), "LABEL")
    assert result["metrics"]["auroc"] == pytest.approx(0.25)
    assert any("sign flipped" in w for w in result["warnings"])
