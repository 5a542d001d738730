"""A score track's view range comes from the scan's own scores, not a constant: the demo
model's scores span about ±0.025 and a fixed -2..6 view drew nothing (issue 40)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from carbon_vep.report.track_hub import around_zero, data_views, outward, summary_range
from carbon_vep.report.track_list import track_set
from carbon_vep.scan.calibrate import RankScale


def test_a_quantile_of_the_rank_scale_is_numpys_inverted_cdf_of_the_scores():
    rng = np.random.default_rng(0)
    keys = rng.integers(-500, 900, 5_000)  # scores at 3 decimals, as keys
    scale = RankScale.from_counts(pl.DataFrame({"key": keys, "n": np.ones_like(keys)}))
    for fraction in (0.0, 0.001, 0.25, 0.5, 0.999, 1.0):
        expected = np.quantile(keys, fraction, method="inverted_cdf") / 1000
        assert scale.quantile(fraction, 3) == pytest.approx(expected, abs=1e-12), fraction


def test_limits_are_rounded_outward_and_always_include_zero():
    assert outward(0.0224609375) == 0.023 and outward(-0.0224609375) == -0.023
    assert outward(5.0) == 5.0 and outward(123.4) == 130.0 and outward(0.0) == 0.0
    assert around_zero(-0.0224, 0.0187) == (-0.023, 0.019)
    assert around_zero(1.2, 3.4) == (0.0, 3.4)  # every score damaging: the view starts at 0
    assert around_zero(0.0, 0.0) == (-1.0, 1.0)  # nothing to scale by: still a valid range


def _bigwig(path: Path, values: np.ndarray) -> Path:
    import pybigtools

    writer = pybigtools.open(str(path), "w")
    entries = [("chr1", i, i + 1, float(v)) for i, v in enumerate(values)]
    writer.write({"chr1": len(values)}, entries)
    return path


def test_without_a_calibration_the_views_come_from_the_bigwigs_summaries(tmp_path):
    rng = np.random.default_rng(1)
    tracks = track_set(calibrated=False)
    spread = {"score_A": 0.01, "score_C": 0.02, "score_G": 0.01, "score_T": 0.01}
    for track in tracks:
        scale = spread.get(track.name, 0.01)
        values = rng.normal(1.4 if track.name == "surprise" else 0.0, scale, 400)
        _bigwig(tmp_path / f"{track.name}.bw", values)
    views = {t.name: t.view for t in data_views(tracks, None, tmp_path)}
    low, high = summary_range(tmp_path / "score_C.bw")  # the widest of the score tracks
    assert views["score_A"] == views["max_score"] == around_zero(low, high)
    assert -0.1 < views["score_A"][0] < -0.03 and 0.03 < views["score_A"][1] < 0.1
    assert views["surprise"][0] == 0.0 and 1.4 < views["surprise"][1] < 1.6
    assert all(view != (-2.0, 6.0) for view in views.values())
