"""A sequence-recovery task's sweep points in the run's report (config.tasks: the kind's
`sweeps`): for each swept setting and model, accuracy against the setting's axis (rollout bp =
new_tokens x 6, prompt bp), one line per species group and overall, the headline included as a
point, and a table of the same numbers. As the published gen_len sweep draws it (huggingface/
carbon `evaluation/scripts/benchmark_sequence_recovery_gen_len.py`: its groups in its order,
overall black and bold, y 0..1; its cross-model plot adds the chance line at 0.25)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from carbon_vep.config.tasks import SEQUENCE_RECOVERY, SWEEP_KEY
from carbon_vep.report import plots
from carbon_vep.report.markdown import _fmt
from carbon_vep.report.page import TaskResult, block, esc, figure_img, html_table, row_of

# the published figure's groups (the sequence-recovery set's `type`s), in its order; another
# type follows them, then all rows together
GROUP_ORDER = (
    "fungi",
    "invertebrate",
    "plant",
    "protozoa",
    "vertebrate_mammalian",
    "vertebrate_other",
)
OVERALL = "overall"


@dataclass(frozen=True)
class SweepRow:
    """One group at one value of a swept setting."""

    value: int  # the setting's value
    axis: int  # what the figure draws it at: value x the sweep's scale
    group: str
    accuracy: float | None
    rows: int  # scored rows of the group
    mean_scored_bp: float | None


def group_rank(group: str) -> tuple[int, int | str]:
    """Sort key of a group: the published order, then other types by name, overall last."""
    if group == OVERALL:
        return (2, 0)
    if group in GROUP_ORDER:
        return (0, GROUP_ORDER.index(group))
    return (1, group)


def _groups(metrics: dict) -> dict[str, dict]:
    """Accuracy, rows and mean scored bp of each `type` (by_type) and of all scored rows."""
    accuracy = SEQUENCE_RECOVERY.key("accuracy")
    overall = {
        "accuracy": metrics["metrics"][accuracy],
        "n": metrics["n_scored"],
        "mean_scored_bp": metrics.get(SEQUENCE_RECOVERY.key("mean_scored_bp")),
    }
    return {**metrics.get(SEQUENCE_RECOVERY.key("by_type"), {}), OVERALL: overall}


def point_of(metrics: dict) -> dict:
    """A sweep point's setting and value, as its metrics record them."""
    return metrics["parameters"][SWEEP_KEY]


def sweep_rows(setting: str, headline: dict, points: Sequence[dict]) -> list[SweepRow]:
    """Every group at every value of `setting`: the headline's and its sweep points' (of one
    model), groups in group_rank order, values ascending within a group."""
    sweep = SEQUENCE_RECOVERY.sweeps[setting]
    at = {headline["parameters"][setting]: headline}
    at |= {point_of(p)["value"]: p for p in points if point_of(p)["setting"] == setting}
    rows = [
        SweepRow(
            value,
            sweep.axis_value(value),
            group,
            numbers["accuracy"],
            numbers["n"],
            numbers.get("mean_scored_bp"),
        )
        for value, metrics in at.items()
        for group, numbers in _groups(metrics).items()
    ]
    return sorted(rows, key=lambda r: (group_rank(r.group), r.value))


def sweep_series(rows: Sequence[SweepRow]) -> dict[str, list[tuple[int, float]]]:
    """(axis, accuracy) of each group with a value, in the rows' order."""
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.accuracy is not None:
            series.setdefault(r.group, []).append((r.axis, r.accuracy))
    return series


def _table(setting: str, axis: str, rows: Sequence[SweepRow]) -> str:
    header = ["group", setting, axis, "accuracy", "rows", "mean_scored_bp"]
    cells = [
        [r.group, r.value, r.axis, _fmt(r.accuracy, 3), r.rows, _fmt(r.mean_scored_bp, 1)]
        for r in rows
    ]
    return html_table(header, cells)


def _model_block(
    setting: str, result: TaskResult, points: Sequence[dict], colours: Mapping[str, str]
) -> str:
    sweep = SEQUENCE_RECOVERY.sweeps[setting]
    rows = sweep_rows(setting, result.metrics, points)
    xlabel = sweep.axis + (f" ({setting} x {sweep.scale})" if sweep.scale != 1 else "")
    chance = result.metrics.get(SEQUENCE_RECOVERY.key("chance_accuracy"))
    fig = plots.sweep_lines(sweep_series(rows), colours, xlabel, result.model, chance, OVERALL)
    return block(
        result.model,
        figure_img(fig, f"accuracy against {sweep.axis}, {result.model}"),
        "<details><summary>The numbers</summary>"
        + _table(setting, sweep.axis, rows)
        + "</details>",
    )


def _colours(points: Sequence[dict]) -> dict[str, str]:
    """One colour a group, the same in every model's figure."""
    groups = {g for p in points for g in p.get(SEQUENCE_RECOVERY.key("by_type"), {})}
    ordered = sorted(groups - {OVERALL}, key=group_rank)
    return {g: plots.PALETTE[i % len(plots.PALETTE)] for i, g in enumerate(ordered)}


def recovery_sweep_section(task: str, results: Sequence[TaskResult], points: Sequence[dict]) -> str:
    """The task's sweeps, one part a swept setting: a figure and a table a model (`results`:
    the headline of each model; `points`: the metrics of its sweep points)."""
    colours = _colours([r.metrics for r in results] + list(points))
    parts = []
    for setting, sweep in SEQUENCE_RECOVERY.sweeps.items():
        mine = grouped([p for p in points if point_of(p)["setting"] == setting], "model_key")
        models = [r for r in results if r.model in mine]
        blocks = [_model_block(setting, r, mine[r.model], colours) for r in models]
        if blocks:
            parts.append(_part_heading(task, setting, sweep.axis, results) + row_of(*blocks))
    return "".join(parts)


def grouped(points: Sequence[dict], key: str) -> dict[str, list[dict]]:
    """Sweep points' metrics by one of their keys (`task`, `model_key`), in their order."""
    out: dict[str, list[dict]] = {}
    for p in points:
        out.setdefault(p[key], []).append(p)
    return out


def _part_heading(task: str, setting: str, axis: str, results: Sequence[TaskResult]) -> str:
    headline = results[0].metrics["parameters"]
    return (
        f"<h3>{esc(task)}: {esc(setting)} swept (accuracy against {esc(axis)})</h3>"
        f"<p class='sub'>The headline ({esc(setting)} {esc(headline[setting])}) and each sweep "
        f"point, the other settings the headline's (accuracy_mode "
        f"{esc(headline['accuracy_mode'])}); a line per type, overall in black; dashed: "
        "chance.</p>"
    )
