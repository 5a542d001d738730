"""Figures for the HTML report, as base64 PNG data URIs (matplotlib, no display needed).

Figures are built with `matplotlib.figure.Figure` on an Agg canvas (no pyplot, no display),
so they are safe in any process. One colour per model, the same in every figure.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence

import matplotlib.patches
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from sklearn.metrics import (
    average_precision_score,
    precision_recall_curve,
    roc_auc_score,
    roc_curve,
)

DPI = 110
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
CLASS_COLOURS = {"positive": "#d62728", "negative": "#1f77b4"}


def model_colours(models: Sequence[str]) -> dict[str, str]:
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(models)}


def to_data_uri(fig: Figure) -> str:
    buffer = io.BytesIO()
    FigureCanvasAgg(fig)  # headless Agg canvas: no display, no pyplot state
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def style_axes(ax, integer_y: bool = False) -> None:
    if integer_y:  # counts
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(alpha=0.25, linewidth=0.6)
    ax.tick_params(labelsize=8)


def roc_pr_figure(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]], colours: Mapping[str, str]
) -> Figure:
    """ROC and precision-recall curves, one line per model; curves maps model -> (y, score).

    Legends carry each model's AUROC and step-wise average precision (the area the PR step
    curve encloses)."""
    fig = Figure(figsize=(8.6, 3.6))
    roc_ax, pr_ax = fig.subplots(1, 2)
    prevalence = None
    for model, (labels, scores) in curves.items():
        fpr, tpr, _ = roc_curve(labels, scores)
        auroc = roc_auc_score(labels, scores)
        roc_ax.plot(fpr, tpr, color=colours[model], linewidth=1.6, label=f"{model} ({auroc:.3f})")
        precision, recall, _ = precision_recall_curve(labels, scores)
        ap = average_precision_score(labels, scores)
        # recall ascending; each step (R_{n-1}, R_n] at precision P_n, as average precision sums
        pr_ax.step(
            recall[::-1],
            precision[::-1],
            where="pre",
            color=colours[model],
            linewidth=1.4,
            label=f"{model} (AP {ap:.3f})",
        )
        prevalence = float(np.mean(labels))
    roc_ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1, label="chance")
    roc_ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC (AUROC)")
    if prevalence is not None:
        pr_ax.axhline(prevalence, color="grey", linestyle=":", linewidth=1, label="prevalence")
    pr_ax.set(xlabel="recall", ylabel="precision", title="Precision-recall", ylim=(0, 1.02))
    for ax, where in ((roc_ax, "lower right"), (pr_ax, "lower left")):
        style_axes(ax)
        ax.legend(fontsize=8, frameon=False, loc=where)
    fig.tight_layout()
    return fig


def chromosome_bars(
    per_model: Mapping[str, dict], metric: str, colours: Mapping[str, str]
) -> Figure:
    """Per-chromosome metric, grouped by model, n above each bar; a chromosome with one class
    (dropped from the average) is an empty hatched stub.

    per_model maps model -> the `drop_single_class` entry of `by_chromosome[metric]`.
    """
    chroms = list(
        dict.fromkeys(
            e["chrom"] for d in per_model.values() for e in [*d["chromosomes"], *d["dropped"]]
        )
    )
    n_models = max(1, len(per_model))
    fig = Figure(figsize=(min(12.0, 1.4 + 0.42 * len(chroms) * n_models + 0.3 * n_models), 3.1))
    ax = fig.subplots()
    width = 0.8 / n_models
    x = np.arange(len(chroms))
    for i, (model, detail) in enumerate(per_model.items()):
        entries = {e["chrom"]: e for e in [*detail["chromosomes"], *detail["dropped"]]}
        dropped = {e["chrom"] for e in detail["dropped"]}
        offsets = x + (i - (n_models - 1) / 2) * width
        for offset, chrom in zip(offsets, chroms, strict=True):
            entry = entries.get(chrom)
            if entry is None:
                continue
            if chrom in dropped:
                ax.bar(
                    offset, 0.03, width, facecolor="white", edgecolor=colours[model], hatch="///"
                )
            else:
                ax.bar(offset, entry["value"] or 0.0, width, color=colours[model])
            ax.text(
                offset,
                (entry.get("value") or 0.03) + 0.02,
                str(entry["n"]),
                ha="center",
                fontsize=6,
                color="#444",
            )
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(x, chroms, rotation=45 if len(chroms) > 8 else 0)
    ax.set(ylabel=metric, ylim=(0, 1.1), xlabel="chromosome (n above bars; hatched: one class)")
    handles = [matplotlib.patches.Patch(color=colours[m], label=m) for m in per_model]
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    style_axes(ax)
    fig.tight_layout()
    return fig


def score_distributions(
    per_model: Mapping[str, tuple[np.ndarray, np.ndarray]], class_names: tuple[str, str]
) -> Figure:
    """Histogram of scores by class, one panel per model; per_model maps model -> (y, score)."""
    n = max(1, len(per_model))
    fig = Figure(figsize=(min(4.0 * n, 12.0), 3.1))
    axes = np.atleast_1d(fig.subplots(1, n))
    for ax, (model, (labels, scores)) in zip(axes, per_model.items(), strict=False):
        bins = np.histogram_bin_edges(scores, bins=min(30, max(5, len(scores) // 3)))
        for value, name, colour in (
            (0, class_names[0], CLASS_COLOURS["negative"]),
            (1, class_names[1], CLASS_COLOURS["positive"]),
        ):
            ax.hist(
                scores[labels == value],
                bins=bins,
                alpha=0.55,
                color=colour,
                label=f"{name} (n={int((labels == value).sum())})",
            )
        ax.set(xlabel="score (larger = more damaging)", ylabel="variants", title=model)
        style_axes(ax, integer_y=True)
        ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def grouped_bars(
    groups: Sequence[str],
    per_model: Mapping[str, Mapping[str, float]],
    colours: Mapping[str, str],
    ylabel: str,
    title: str,
    reference: tuple[float, str] | None = None,
) -> Figure:
    """Bars per group (e.g. sequence type), one colour per model, an optional reference line."""
    fig = Figure(figsize=(min(12.0, 1.6 + 0.5 * len(groups) * max(1, len(per_model))), 3.1))
    ax = fig.subplots()
    width = 0.8 / max(1, len(per_model))
    x = np.arange(len(groups))
    for i, (model, values) in enumerate(per_model.items()):
        ax.bar(
            x + (i - (len(per_model) - 1) / 2) * width,
            [values.get(g, 0.0) for g in groups],
            width,
            color=colours[model],
            label=model,
        )
    if reference is not None:
        ax.axhline(reference[0], color="grey", linestyle=":", linewidth=1, label=reference[1])
    ax.set_xticks(x, groups, rotation=30 if len(groups) > 5 else 0)
    ax.set(ylabel=ylabel, title=title, ylim=(0, 1.05))
    style_axes(ax)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    return fig


def margin_histograms(per_model: Mapping[str, np.ndarray], colours: Mapping[str, str]) -> Figure:
    """S(original) − S(perturbed) per pair, one panel per model; right of 0 = correct."""
    n = max(1, len(per_model))
    fig = Figure(figsize=(min(4.0 * n, 12.0), 3.1))
    axes = np.atleast_1d(fig.subplots(1, n))
    for ax, (model, margins) in zip(axes, per_model.items(), strict=False):
        ax.hist(margins, bins=min(30, max(5, len(margins) // 2)), color=colours[model], alpha=0.8)
        ax.axvline(0, color="black", linewidth=1)
        correct = float(np.mean(margins > 0)) if len(margins) else float("nan")
        ax.set(
            xlabel="S(original) − S(perturbed)",
            ylabel="pairs",
            title=f"{model}: {correct:.0%} right of 0",
        )
        style_axes(ax, integer_y=True)
    fig.tight_layout()
    return fig


def score_histogram(
    scores: np.ndarray, counts: np.ndarray, thresholds: Mapping[str, float | None]
) -> Figure:
    """The scan's SNVs by score (each distinct score with its count), log-scale counts, and a
    line at the lowest score of each PHRED threshold (`thresholds`: label -> score)."""
    fig = Figure(figsize=(8.6, 3.0))
    ax = fig.subplots()
    if len(scores):
        bins = np.histogram_bin_edges(scores, bins=min(80, max(10, len(scores))))
        ax.hist(scores, bins=bins, weights=counts, color="#7f7f7f", log=True)
    for (label, value), colour in zip(
        thresholds.items(), ("#ff7f0e", "#d62728", "#9467bd"), strict=False
    ):
        if value is not None:
            ax.axvline(value, color=colour, linewidth=1.2, label=f"{label}: score ≥ {value:.2f}")
    ax.set(xlabel="score (larger = more damaging)", ylabel="SNVs (log scale)")
    style_axes(ax)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def context_strip(changes: Sequence[str], means: np.ndarray, cpg: np.ndarray) -> Figure:
    """Mean score of each pentanucleotide cell, one column per base change (A>C ... T>G),
    cells at CpG sites in red: the mutational-context bias calibration removes."""
    order = sorted(set(changes))
    x = np.array([order.index(c) for c in changes], dtype=float)
    jitter = (np.random.default_rng(0).random(len(x)) - 0.5) * 0.5
    fig = Figure(figsize=(8.6, 3.0))
    ax = fig.subplots()
    for flag, colour, label in ((False, "#7f7f7f", "other contexts"), (True, "#d62728", "CpG")):
        keep = cpg == flag
        ax.scatter(x[keep] + jitter[keep], means[keep], s=5, color=colour, alpha=0.6, label=label)
    ax.set_xticks(range(len(order)), order)
    ax.set(xlabel="base change", ylabel="mean score of the cell")
    style_axes(ax)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def sweep_lines(
    series: Mapping[str, Sequence[tuple[float, float]]],
    colours: Mapping[str, str],
    xlabel: str,
    title: str,
    chance: float | None = None,
    bold: str = "overall",
) -> Figure:
    """Accuracy against a swept setting, one line per group in the order given; `bold` in black
    and thicker (the published sweep figure: 2.75 against 1.8), y 0..1, x on a log2 scale with a
    tick at each value, a dashed chance line."""
    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.subplots()
    for group, points in series.items():
        x, y = zip(*points, strict=True)
        heavy = group == bold
        ax.plot(
            x,
            y,
            marker="o",
            markersize=3.5,
            linewidth=2.75 if heavy else 1.8,
            color="black" if heavy else colours[group],
            label=group,
            zorder=3 if heavy else 2,
        )
    if chance is not None:
        ax.axhline(chance, color="#666666", linestyle="--", linewidth=1.2, label="chance")
    values = sorted({x for points in series.values() for x, _ in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(values, [str(v) for v in values], rotation=45 if len(values) > 5 else 0)
    ax.minorticks_off()
    ax.set(xlabel=xlabel, ylabel="accuracy", title=title, ylim=(0, 1))
    style_axes(ax)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    return fig
