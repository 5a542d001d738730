"""Genomic-NIAH in the run's report: exact match against context (one line per task, and per
YaRN setting where both ran), a depth x context heat map of exact match, and the cells' table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from carbon_vep.columns import Status
from carbon_vep.report import plots
from carbon_vep.report.page import TaskResult, block, figure_img, heading, html_table, row_of

KIND = "genomic_niah"


def _setting(result: TaskResult) -> str:
    """The line a cell's result belongs to: its task, with YaRN's factor when it was on."""
    parameters = result.metrics.get("parameters", {})
    yarn = parameters.get("yarn_factor") or 0
    task = parameters.get("task") or result.rows["task"].drop_nulls().head(1).to_list()[0]
    return f"{task} (YaRN x{yarn:g})" if yarn else str(task)


def _context(result: TaskResult) -> int:
    parameters = result.metrics.get("parameters", {})
    if "context_tokens" in parameters:
        return int(parameters["context_tokens"])
    return int(result.rows["context_length_tokens"].max())


def exact_match_by_context(
    series: Mapping[str, Mapping[str, list[tuple[int, float]]]], colours: Mapping[str, str]
) -> Figure:
    """One panel per model: exact match against context (tokens, log2 axis), a line per
    task / YaRN setting."""
    n = max(1, len(series))
    fig = Figure(figsize=(min(5.0 * n, 12.0), 3.4))
    axes = np.atleast_1d(fig.subplots(1, n))
    styles = ["-", "--", ":", "-."]
    for ax, (model, lines) in zip(axes, series.items(), strict=False):
        for i, (label, points) in enumerate(sorted(lines.items())):
            x, y = zip(*sorted(points), strict=True)
            ax.plot(x, y, styles[i % len(styles)], marker="o", color=colours[model], alpha=0.5 + 0.5
                    * (1 - i / max(1, len(lines))), label=label)  # fmt: skip
        ax.set_xscale("log", base=2)
        contexts = sorted({x for points in lines.values() for x, _ in points})
        ax.set_xticks(contexts, [f"{c // 1024}k" if c % 1024 == 0 else str(c) for c in contexts])
        ax.set(xlabel="context (tokens)", ylabel="exact match (fraction of rows)",
               title=model, ylim=(-0.02, 1.02))  # fmt: skip
        plots.style_axes(ax)
        ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


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


def niah_section(run: Sequence[TaskResult], colours: Mapping[str, str]) -> str:
    """The Genomic-NIAH section: every cell of the run, by model."""
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
        [entry, setting, f"{ctx:,}",
         *(_cell_text(by_model.get(m)) for m in models)]
        for (entry, setting, ctx), by_model in sorted(cells.items())
    ]  # fmt: skip
    parts = [
        heading("Genomic-NIAH", "long-context retrieval"),
        "<p class='sub'>Exact match: the greedy 6-mer prediction equals the planted value "
        "(published headline); LL: the value's likelihood beats the negative's.</p>",
        row_of(
            block("Cells", html_table(["entry", "task", "context", *models], rows, 3)),
            block(
                "Exact match against context",
                figure_img(exact_match_by_context(series, colours), "NIAH exact match"),
            ),
        ),  # fmt: skip
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
    return "n/a" if em is None else f"EM {em:.2f} · LL {ll:.2f} (n={result.metrics['n_scored']})"


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
