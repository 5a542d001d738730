"""Genomic-NIAH in the run's report: exact match against context (one line per task, and per
YaRN setting where both ran; the published points of the same model beside them), a depth x
context heat map of exact match, and the cells' table. Tasks in order of difficulty."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl
import yaml
from matplotlib.figure import Figure

from carbon_vep.columns import Status
from carbon_vep.config.niah_grid import NIAH_TASKS
from carbon_vep.report import plots
from carbon_vep.report.page import TaskResult, block, figure_img, heading, html_table, row_of

KIND = "genomic_niah"
# model key -> setting (as _setting_label names it) -> [(context tokens, exact match)]
Published = Mapping[str, Mapping[str, list[tuple[int, float]]]]


def _setting_label(task: str, yarn: float) -> str:
    return f"{task} (YaRN x{yarn:g})" if yarn else str(task)


def _setting(result: TaskResult) -> str:
    """The line a cell's result belongs to: its task, with YaRN's factor when it was on."""
    parameters = result.metrics.get("parameters", {})
    task = parameters.get("task") or result.rows["task"].drop_nulls().head(1).to_list()[0]
    return _setting_label(task, parameters.get("yarn_factor") or 0)


def _difficulty(setting: str) -> tuple[int, str]:
    """Sort key of a setting: the tasks' difficulty (niah, then d4, d2, d1: the closer the
    distractor keys, the harder), then native before YaRN."""
    task = setting.split(" ")[0]
    return (NIAH_TASKS.index(task) if task in NIAH_TASKS else len(NIAH_TASKS), setting)


def load_published(path: str | Path) -> Published:
    """baselines/published_niah.yaml's points, by model key and setting."""
    spec = yaml.safe_load(Path(path).read_text())
    task = spec.get("task", "niah")
    return {
        model: {
            _setting_label(
                task, 0 if setting == "native" else float(setting.removeprefix("yarn"))
            ): sorted((int(ctx), float(value)) for ctx, value in points.items())
            for setting, points in settings.items()
        }
        for model, settings in spec["points"].items()
    }


def _context(result: TaskResult) -> int:
    parameters = result.metrics.get("parameters", {})
    if "context_tokens" in parameters:
        return int(parameters["context_tokens"])
    return int(result.rows["context_length_tokens"].max())


def exact_match_by_context(
    series: Mapping[str, Mapping[str, list[tuple[int, float]]]],
    colours: Mapping[str, str],
    published: Published | None = None,
) -> Figure:
    """One panel per model: exact match against context (tokens, log2 axis), a line per
    task / YaRN setting in order of difficulty, and the published points of a model of the
    same key (black crosses: native; open black squares: YaRN)."""
    n = max(1, len(series))
    fig = Figure(figsize=(min(5.0 * n, 12.0), 3.4))
    axes = np.atleast_1d(fig.subplots(1, n))
    styles = ["-", "--", ":", "-."]
    for ax, (model, lines) in zip(axes, series.items(), strict=False):
        ordered = sorted(lines.items(), key=lambda item: _difficulty(item[0]))
        for i, (label, points) in enumerate(ordered):
            x, y = zip(*sorted(points), strict=True)
            ax.plot(
                x,
                y,
                styles[i % len(styles)],
                marker="o",
                color=colours[model],
                alpha=0.5 + 0.5 * (1 - i / max(1, len(lines))),
                label=label,
            )
        shown = _published_points(ax, (published or {}).get(model, {}))
        ax.set_xscale("log", base=2)
        contexts = sorted({x for points in lines.values() for x, _ in points} | shown)
        ax.set_xticks(contexts, [f"{c // 1024}k" if c % 1024 == 0 else str(c) for c in contexts])
        ax.set(
            xlabel="context (tokens)",
            ylabel="exact match (fraction of rows)",
            title=model,
            ylim=(-0.02, 1.02),
        )
        plots.style_axes(ax)
        ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def _published_points(ax, settings: Mapping[str, list[tuple[int, float]]]) -> set[int]:
    """The published exact match of this model, as points; the contexts drawn."""
    for label, points in settings.items():
        x, y = zip(*points, strict=True)
        if "YaRN" in label:
            style = {"marker": "s", "facecolors": "none", "edgecolors": "black"}
        else:
            style = {"marker": "x", "color": "black"}
        ax.scatter(x, y, s=36, zorder=3, label=f"published: {label}", **style)
    return {x for points in settings.values() for x, _ in points}


def depth_context_heatmap(grids: Mapping[str, pl.DataFrame]) -> Figure:
    """One panel per (model, setting): mean exact match of the rows planted at each depth
    (rows) and context (columns)."""
    n = max(1, len(grids))
    fig = Figure(figsize=(min(4.2 * n, 12.6), 3.6))
    axes = np.atleast_1d(fig.subplots(1, n))
    image = None
    for ax, (title, grid) in zip(axes, grids.items(), strict=False):
        depths = sorted(grid["depth"].unique().to_list())
        contexts = sorted(grid["context_length_tokens"].unique().to_list())
        values = np.full((len(depths), len(contexts)), np.nan)
        for r in grid.iter_rows(named=True):
            values[depths.index(r["depth"]), contexts.index(r["context_length_tokens"])] = r["em"]
        image = ax.imshow(values, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        ax.set_xticks(range(len(contexts)), [f"{c // 1024}k" for c in contexts])
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
        ax.set(xlabel="context (tokens)", ylabel="depth of the planted pair", title=title)
    if image is not None:
        fig.colorbar(image, ax=list(axes), label="exact match")
    return fig


def niah_section(
    run: Sequence[TaskResult], colours: Mapping[str, str], published: Published | None = None
) -> str:
    """The Genomic-NIAH section: every cell of the run, by model, tasks in order of difficulty
    (`published`: load_published's points, drawn beside a model of the same key)."""
    results = [r for r in run if r.metrics.get("kind") == KIND]
    if not results:
        return ""
    models = list(dict.fromkeys(r.model for r in results))
    cells: dict[tuple[str, str, int], dict[str, TaskResult]] = {}
    series: dict[str, dict[str, list[tuple[int, float]]]] = {m: {} for m in models}
    for r in results:
        entry = r.task.split(".")[0]
        cells.setdefault((entry, _setting(r), _context(r)), {})[r.model] = r
        value = r.metrics["metrics"].get("gen_exact_match")
        if value is not None:
            series[r.model].setdefault(_setting(r), []).append((_context(r), value))
    rows = [
        [entry, setting, f"{ctx:,}", *(_cell_text(by_model.get(m)) for m in models)]
        for (entry, setting, ctx), by_model in sorted(
            cells.items(), key=lambda item: (item[0][0], _difficulty(item[0][1]), item[0][2])
        )
    ]
    parts = [
        heading("Genomic-NIAH", "long-context retrieval"),
        "<p class='sub'>Exact match (EM): the greedy 6-mer prediction equals the planted "
        "value, the published headline. Tasks from easiest to hardest: niah, then distractor "
        "keys 4, 2 and 1 bp from the query key (neardup_d4, d2, d1). LL check: the value's "
        "likelihood beats the negative's, a sanity check only (inflated: the negative differs "
        "at every base). Crosses and squares: published exact match of a model of the same "
        "key (the Carbon technical report).</p>",
        row_of(
            block("Cells", html_table(["entry", "task", "context", *models], rows, 3)),
            block(
                "Exact match against context",
                figure_img(exact_match_by_context(series, colours, published), "NIAH exact match"),
            ),
        ),
    ]
    grids = _depth_grids(results)
    if grids:
        heat = figure_img(depth_context_heatmap(grids), "NIAH depth x context")
        parts.append(block("Exact match by depth and context", heat))
    return "".join(parts)


def _cell_text(result: TaskResult | None) -> str:
    if result is None:
        return "—"
    metrics = result.metrics["metrics"]
    em, ll = metrics.get("gen_exact_match"), metrics.get("ll_correct")
    if em is None:
        return "n/a"
    check = f" · LL check {ll:.2f}" if ll is not None else ""
    return f"EM {em:.2f} (n={result.metrics['n_scored']}){check}"


def _depth_grids(results: Sequence[TaskResult]) -> dict[str, pl.DataFrame]:
    """Mean exact match per depth and context, for each model and YaRN setting (tasks pooled)."""
    frames: dict[str, list[pl.DataFrame]] = {}
    for r in results:
        if "depth" not in r.rows.columns:
            continue
        yarn = r.metrics.get("parameters", {}).get("yarn_factor") or 0
        title = f"{r.model}" + (f", YaRN x{yarn:g}" if yarn else "")
        scored = r.rows.filter(pl.col("status") == Status.SCORED)
        frames.setdefault(title, []).append(
            scored.select("depth", "context_length_tokens", "gen_exact_match")
        )
    return {
        title: pl.concat(parts)
        .group_by("depth", "context_length_tokens")
        .agg(pl.col("gen_exact_match").cast(pl.Float64).mean().alias("em"))
        for title, parts in frames.items()
    }
