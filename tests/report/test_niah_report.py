"""The report's Genomic-NIAH section: tasks from easiest to hardest, exact match as the headline
(the likelihood test only as a labelled sanity check), the published points of a model of the
same key beside its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.report.niah import exact_match_by_context, load_published, niah_section
from carbon_vep.report.page import TaskResult

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "baselines/published_niah.yaml"


def _result(model: str, task: str, ctx: int, em: float, yarn: float = 0) -> TaskResult:
    metrics = {
        "kind": "genomic_niah",
        "task": f"genomic_niah.{task}_{ctx}",
        "model_key": model,
        "n_scored": 500,
        "metrics": {"gen_exact_match": em, "ll_correct": 0.99},
        "parameters": {"task": task, "context_tokens": ctx, "yarn_factor": yarn},
    }
    rows = pl.DataFrame({"task": [task], "context_length_tokens": [ctx], "status": ["scored"]})
    return TaskResult(metrics, rows)


def test_published_points_are_the_reports_table():
    published = load_published(PUBLISHED)
    assert published["carbon3b"]["niah"] == [(16384, 0.73), (32768, 0.55)]
    assert published["carbon3b"]["niah (YaRN x4)"][2] == (65536, 0.79)
    assert published["carbon8b"]["niah (YaRN x4)"][-1] == (131072, 0.65)
    assert published["evo2_7b"]["niah"][-1] == (131072, 0.53)


def test_tasks_run_from_easiest_to_hardest_and_ll_is_no_headline():
    run = [
        _result("carbon3b", task, 16384, em)
        for task, em in (
            ("neardup_d1", 0.1),
            ("niah", 0.7),
            ("neardup_d2", 0.3),
            ("neardup_d4", 0.6),
        )
    ]
    html = niah_section(run, {"carbon3b": "#1f77b4"}, load_published(PUBLISHED))
    positions = [
        html.index(f"<td>{task}</td>")
        for task in ("niah", "neardup_d4", "neardup_d2", "neardup_d1")
    ]
    assert positions == sorted(positions)
    assert "EM 0.70 (n=500) · LL check 0.99" in html
    assert "sanity check" in html and "inflated" in html


def test_the_figure_draws_published_points_beside_the_same_model_only():
    series = {
        "carbon3b": {"niah": [(16384, 0.7), (32768, 0.5)]},
        "demo": {"niah": [(16384, 0.1)]},
    }
    colours = {"carbon3b": "#1f77b4", "demo": "#ff7f0e"}
    fig = exact_match_by_context(series, colours, load_published(PUBLISHED))
    carbon, demo = fig.axes[:2]
    drawn = {tuple(map(tuple, np.asarray(c.get_offsets()).tolist())) for c in carbon.collections}
    assert ((16384.0, 0.73), (32768.0, 0.55)) in drawn
    assert ((16384.0, 0.91), (32768.0, 0.9), (65536.0, 0.79), (131072.0, 0.27)) in drawn
    assert not demo.collections
    labels = carbon.get_legend_handles_labels()[1]
    assert labels[0] == "niah" and "published: niah (YaRN x4)" in labels
