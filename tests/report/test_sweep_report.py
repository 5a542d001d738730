"""A recovery task's sweep in the run's report: per swept setting and model, accuracy against the
setting's axis (rollout bp = new_tokens x 6), a line per species group in the published order and
overall in black, the headline a point of it, and a table of the same numbers from the metrics
JSONs' by_type."""

from __future__ import annotations

import re

import polars as pl
import pytest

from carbon_vep.config.stages import EvaluationSettings, RecoverySettings
from carbon_vep.config.tasks import TASK_KINDS
from carbon_vep.report import plots
from carbon_vep.report.html import SWEEP_SECTIONS, render_html
from carbon_vep.report.page import TaskResult
from carbon_vep.report.results_table import results_table
from carbon_vep.report.sweeps import OVERALL, sweep_rows, sweep_series
from carbon_vep.suite.recovery import recovery_metrics

# published order: fungi before vertebrate_mammalian; a type it does not name after them
TYPES = ("vertebrate_mammalian", "zz_other", "fungi")


def _metrics(model: str, new_tokens: int, accuracies: dict[str, float], sweep=None) -> dict:
    """A recovery metrics JSON of two rows a type, at `new_tokens`, as the command writes it."""
    types = [t for t in TYPES for _ in range(2)]
    predictions = pl.DataFrame(
        {
            "status": ["scored"] * len(types),
            "accuracy": [accuracies[t] for t in types],
            "type": types,
            "label": ["A" * 30] * len(types),
            "prompt_non_acgt": [0] * len(types),
            "scored_bp": [6 * new_tokens] * len(types),
        }
    )
    settings = RecoverySettings(new_tokens=new_tokens, accuracy_mode="prediction_length")
    result = recovery_metrics(predictions, settings, EvaluationSettings(bootstrap=0))
    result.update(task="rec", model_key=model, headline_metrics=["accuracy"], provenance={})
    if sweep:
        result["parameters"]["sweep"] = {"setting": "new_tokens", "value": new_tokens}
    return result


def _accuracies(new_tokens: int) -> dict[str, float]:
    return {"vertebrate_mammalian": 0.9 / new_tokens, "zz_other": 0.5, "fungi": 0.2}


@pytest.fixture(scope="module")
def sweep():
    headline = _metrics("m1", 5, _accuracies(5))
    points = [_metrics("m1", n, _accuracies(n), sweep=True) for n in (20, 10)]
    return headline, points


def test_rows_are_groups_in_the_published_order_at_every_value(sweep):
    headline, points = sweep
    rows = sweep_rows("new_tokens", headline, points)
    assert [(r.group, r.value) for r in rows] == [
        (group, value)
        for group in ("fungi", "vertebrate_mammalian", "zz_other", OVERALL)
        for value in (5, 10, 20)
    ]
    assert [r.axis for r in rows[:3]] == [30, 60, 120]  # rollout bp = new_tokens x 6
    by = {(r.group, r.value): r for r in rows}
    assert by["vertebrate_mammalian", 10].accuracy == pytest.approx(0.09)  # from by_type
    assert by["vertebrate_mammalian", 5].accuracy == pytest.approx(0.18)  # the headline's
    overall = by[OVERALL, 20]
    assert overall.accuracy == pytest.approx(points[0]["metrics"]["accuracy"])
    assert (overall.rows, by["fungi", 20].rows) == (6, 2)
    assert overall.mean_scored_bp == by["fungi", 20].mean_scored_bp == 120


def test_the_figure_draws_a_line_a_group_overall_bold_and_chance(sweep):
    headline, points = sweep
    series = sweep_series(sweep_rows("new_tokens", headline, points))
    colours = {g: "#123456" for g in TYPES}
    fig = plots.sweep_lines(series, colours, "rollout bp", "m1", chance=0.25)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ["fungi", "vertebrate_mammalian", "zz_other", OVERALL, "chance"]
    assert list(lines[OVERALL].get_xdata()) == [30, 60, 120]
    assert lines[OVERALL].get_color() == "black" and lines[OVERALL].get_linewidth() == 2.75
    assert lines["fungi"].get_linewidth() == 1.8
    assert list(lines["vertebrate_mammalian"].get_ydata()) == pytest.approx([0.18, 0.09, 0.045])
    assert list(lines["chance"].get_ydata()) == [0.25, 0.25]
    assert lines["chance"].get_linestyle() == "--" and ax.get_ylim() == (0, 1)


def test_the_page_shows_the_sweep_beside_its_task_and_not_in_the_table(sweep):
    headline, points = sweep
    assert set(SWEEP_SECTIONS) == {k for k, kind in TASK_KINDS.items() if kind.sweeps}
    run = [TaskResult(headline, pl.DataFrame({"status": ["scored"]}))]
    table = results_table([r.metrics for r in run])
    page = render_html(run, table, sweeps=points)
    assert "new_tokens swept (accuracy against rollout bp)" in page
    assert 'alt="accuracy against rollout bp, m1"' in page
    part = page.split("new_tokens swept")[1].split("</table>")[0]  # m1's table
    rows = re.findall(r"<tr>(<td.*?)</tr>", part)
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in rows]
    assert [c[1:] for c in cells if c[0] == "fungi"] == [  # new_tokens, rollout bp, accuracy, ...
        [n, str(6 * int(n)), "0.200", "2", f"{6 * int(n)}.0"] for n in ("5", "10", "20")
    ]
    assert [c[0] for c in cells][-3:] == [OVERALL] * 3
    assert table.height == 1  # the headline's row only
    assert "swept" not in render_html(run, table)  # no points, no sweep part
