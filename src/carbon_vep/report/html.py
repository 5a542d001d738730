"""The run's report: one self-contained HTML page.

It holds the comparison table, ROC and PR curves, per-chromosome bars, score distributions by
class, the recovery and perturbation figures, the status counts of every input and the run's
provenance; figures are embedded as base64 PNG and the stylesheet (assets/report.css) inline,
so the file stands alone. It reads what the earlier stages wrote and the rule passes: each
result's metrics JSON with its row file (the rows a VEP dataset's metrics used, or a task's
predictions), and the results table; it recomputes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep import atomic
from carbon_vep.columns import Status
from carbon_vep.config.tasks import PERTURBATION, SEQUENCE_RECOVERY, TASK_KINDS
from carbon_vep.evaluate.metrics import CALIBRATED_SCORE
from carbon_vep.provenance import package_versions
from carbon_vep.report import plots
from carbon_vep.report.markdown import _fmt, _with_interval, ordered_metrics, render_summary
from carbon_vep.report.niah import load_published, niah_section
from carbon_vep.report.page import (
    CSS,
    SORT_SCRIPT,
    Hint,
    TaskResult,
    block,
    by_task,
    definitions,
    esc,
    figure_img,
    heading,
    html_table,
    load_run,
    model_warnings,
    row_of,
    status_table,
    warnings_box,
)
from carbon_vep.report.results_table import load_results
from carbon_vep.report.sweeps import grouped, recovery_sweep_section
from carbon_vep.scan.calibrate import NO_OWN_MEANS, Calibration, cpg_site, extreme_contexts


def _metric_table(results: Sequence[TaskResult], names: Sequence[str]) -> str:
    """Metrics by model; a scan's panel also on the context-calibrated score, side by side."""
    columns = []
    for r in results:
        columns.append((r.model, r.metrics))
        if r.metrics.get(CALIBRATED_SCORE):
            columns.append((f"{r.model}, calibrated", r.metrics[CALIBRATED_SCORE]))
    defined = {k: v for r in results for k, v in r.metrics.get("definitions", {}).items()}
    rows = [
        [Hint(n, defined.get(n, "")), *(_with_interval(m, n, 3) for _, m in columns)] for n in names
    ]
    return html_table(["metric (95% bootstrap interval)", *(name for name, _ in columns)], rows)


# ---- HTML sections -------------------------------------------------------------------------
def _comparison_section(run: Sequence[TaskResult], table: pl.DataFrame | None) -> str:
    """The results table as make_results_table wrote it, with each value's interval."""
    if table is None or table.height == 0:
        return (
            "<h2 id='results'>Results</h2><p class='empty'>No results table: the config lists no "
            "dataset, task or Genomic-NIAH entry (a scan alone has its section below).</p>"
        )
    models = [c for c in table.columns if c not in ("task", "metric")]
    lookup = {(r.task, r.model): r.metrics for r in run}
    rows = []
    for record in table.to_dicts():
        cells = []
        for model in models:
            m = lookup.get((record["task"], model))
            value = record[model]
            if m is None or value is None:
                cells.append("—")
                continue
            ci = m.get("confidence_intervals", {}).get(record["metric"])
            text = f"{100 * value:.2f}"
            cells.append(text + (f" [{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]" if ci else ""))
        defined = next(
            (
                lookup[(record["task"], m)].get("definitions", {})
                for m in models
                if (record["task"], m) in lookup
            ),
            {},
        )
        rows.append(
            [record["task"], Hint(record["metric"], defined.get(record["metric"], "")), *cells]
        )
    warnings = [f"{r.task} / {r.model}: {w}" for r in run for w in r.metrics.get("warnings", [])]
    return (
        "<h2 id='results'>Results</h2>"
        "<p class='sub'>Headline metrics ×100; brackets: 95% percentile bootstrap interval over "
        "rows. Rows: tasks and their headline metrics; columns: models.</p>"
        + html_table(["task", "metric", *models], rows, numeric_from=2)
        + warnings_box(warnings)
        + definitions(run)
    )


def _labelled_curves(results: Sequence[TaskResult]) -> dict[str, tuple]:
    """(labels, scores) of the rows each model's metrics used, as compute_metrics wrote them."""
    return {
        r.model: (r.rows["label01"].to_numpy(), r.rows["score"].to_numpy())
        for r in results
        if r.metrics.get("metrics", {}).get("auroc") is not None
    }


def _vep_section(task: str, results: list[TaskResult], colours: dict[str, str]) -> str:
    """A variant panel: what was scored, status counts and metrics, the curves and figures,
    breakdowns and warnings."""
    names = ordered_metrics(list(dict.fromkeys(n for r in results for n in r.metrics["metrics"])))
    curves = _labelled_curves(results)
    by_chrom = {
        r.model: r.metrics["by_chromosome"]["auroc"]["drop_single_class"]
        for r in results
        if r.metrics.get("by_chromosome", {}).get("auroc")
    }
    parts = [
        heading(task, "variant effect"),
        _vep_summary_table(results),
        row_of(
            block("Input status counts", status_table(results)),
            block("Metrics", _metric_table(results, names)) if names else "",
        ),
    ]
    if curves:
        parts.append(figure_img(plots.roc_pr_figure(curves, colours), f"ROC and PR, {task}"))
    parts.append(_vep_figures(task, curves, by_chrom, colours))
    if by_chrom:
        parts.append(
            "<details><summary>By-chromosome averages under both conventions</summary>"
            + _chromosome_table(results)
            + "</details>"
        )
    parts += [
        _breakdown_tables(results),
        model_warnings(results),
    ]
    return "".join(parts)


def _vep_summary_table(results: Sequence[TaskResult]) -> str:
    """Per model: recipe, normalisation and the rows the metrics used."""
    header = [
        "model",
        "recipe",
        "normalisation",
        "labelled scored rows",
        "positives",
        "excluded: label conflict",
    ]
    rows = [
        [
            r.model,
            r.metrics["parameters"].get("recipe") or "n/a",
            r.metrics["parameters"].get("normalization") or "n/a",
            r.metrics.get("n_labelled", 0),
            r.metrics.get("n_positive", 0),
            r.metrics.get("n_excluded_label_conflict", 0),
        ]
        for r in results
    ]
    return html_table(header, rows, numeric_from=3)


def _vep_figures(task: str, curves: dict, by_chrom: dict, colours: dict[str, str]) -> str:
    """Score distributions by class, and AUROC by chromosome, side by side (where they exist)."""
    distributions = plots.score_distributions(curves, ("negative", "positive")) if curves else None
    chromosomes = plots.chromosome_bars(by_chrom, "auroc", colours) if by_chrom else None
    return row_of(
        block("Score distributions by class", figure_img(distributions, f"scores, {task}"))
        if curves
        else "",
        block("AUROC by chromosome", figure_img(chromosomes, f"AUROC by chromosome, {task}"))
        if by_chrom
        else "",
    )


def _chromosome_table(results: Sequence[TaskResult]) -> str:
    rows = []
    for r in results:
        for metric, conventions in r.metrics.get("by_chromosome", {}).items():
            for convention, detail in conventions.items():
                dropped = ", ".join(
                    f"{d['chrom']} ({d['weight_of_all']:.1%})" for d in detail["dropped"]
                )
                rows.append(
                    [
                        r.model,
                        metric,
                        convention,
                        _fmt(detail["value"], 3),
                        len(detail["chromosomes"]),
                        dropped or "none",
                    ]
                )
    return html_table(
        [
            "model",
            "metric",
            "convention",
            "weighted value",
            "chromosomes averaged",
            "dropped (weight of all rows)",
        ],
        rows,
        numeric_from=3,
    )


def _breakdown_tables(results: Sequence[TaskResult]) -> str:
    parts = []
    columns = list(dict.fromkeys(c for r in results for c in r.metrics.get("breakdowns", {})))
    for column in columns:
        groups = {g["group"] for r in results for g in r.metrics["breakdowns"].get(column, [])}
        if len(groups) < 2:
            continue  # one group: the same numbers as the whole dataset
        rows = []
        for r in results:
            for g in r.metrics.get("breakdowns", {}).get(column, []):
                rows.append(
                    [
                        r.model,
                        g["group"],
                        g["n"],
                        g["n_positive"],
                        _fmt(g["auroc"], 3),
                        _fmt(g["auprc_trapezoid"], 3),
                        _fmt(g["average_precision"], 3),
                    ]
                )
        parts += [
            f"<h3>By {esc(column)}</h3>",
            html_table(
                [
                    "model",
                    column,
                    "n",
                    "positives",
                    "auroc",
                    "auprc_trapezoid",
                    "average_precision",
                ],
                rows,
                numeric_from=2,
            ),
        ]
    return "".join(parts)


def _recovery_section(task: str, results: list[TaskResult], colours: dict[str, str]) -> str:
    by_type, accuracy = SEQUENCE_RECOVERY.key("by_type"), SEQUENCE_RECOVERY.key("accuracy")
    types = sorted({t for r in results for t in r.metrics.get(by_type, {})})
    per_model = {
        r.model: {t: v[accuracy] for t, v in r.metrics.get(by_type, {}).items()} for r in results
    }
    rows = [["all rows", *(_with_interval(r.metrics, accuracy, 3) for r in results)]]
    rows += [[t, *(_fmt(per_model[r.model].get(t), 3) for r in results)] for t in types]
    decoders = ", ".join(f"{r.model}: {r.metrics['parameters']['decoder']}" for r in results)
    figure = ""
    if types:
        fig = plots.grouped_bars(
            types, per_model, colours, "accuracy", "accuracy by type", reference=(0.25, "chance")
        )
        figure = block("Accuracy by type", figure_img(fig, f"recovery accuracy by type, {task}"))
    return "".join(
        [
            heading(task, "sequence recovery"),
            f"<p class='sub'>Greedy decoder — {esc(decoders)}; accuracy over the first "
            f"{results[0].metrics['parameters']['score_bp']} bp; chance = 0.25 per base.</p>",
            row_of(
                block("Input status counts", status_table(results)),
                block("Accuracy", html_table(["type", *(r.model for r in results)], rows)),
                figure,
            ),
            model_warnings(results),
        ]
    )


def _perturbation_section(task: str, results: list[TaskResult], colours: dict[str, str]) -> str:
    accuracy, ties = PERTURBATION.key("accuracy"), PERTURBATION.key("n_ties")
    margin = PERTURBATION.key("mean_margin")
    rows = [
        ["accuracy (ties wrong)", *(_with_interval(r.metrics, accuracy, 3) for r in results)],
        ["pairs scored", *(r.metrics["n_scored"] for r in results)],
        ["correct", *(r.metrics["n_correct"] for r in results)],
        ["ties", *(r.metrics[ties] for r in results)],
        ["mean margin", *(_fmt(r.metrics["metrics"][margin], 4) for r in results)],
    ]
    margins = {
        r.model: r.rows.filter(pl.col("status") == Status.SCORED)["margin"].to_numpy()
        for r in results
    }
    figure = ""
    if any(len(m) for m in margins.values()):
        fig = plots.margin_histograms(margins, colours)
        figure = block("S(original) − S(perturbed)", figure_img(fig, f"margins, {task}"))
    settings = [r.metrics["parameters"] for r in results]
    scoring = ", ".join(
        f"{r.model}: {s['scoring']} ({s['normalization']})"
        for r, s in zip(results, settings, strict=True)
    )
    return "".join(
        [
            heading(task, "perturbation pairs"),
            "<p class='sub'>Correct iff S(original) &gt; S(perturbed), ties wrong; scoring — "
            f"{esc(scoring)}.</p>",
            row_of(
                block("Input status counts", status_table(results)),
                block("Pair accuracy", html_table(["", *(r.model for r in results)], rows)),
                figure,
            ),
            model_warnings(results),
        ]
    )


# each task kind's section (config.tasks); the page follows the kinds' declared order
TASK_SECTIONS = {
    SEQUENCE_RECOVERY.name: _recovery_section,
    PERTURBATION.name: _perturbation_section,
}
# the part of a kind with `sweeps` drawing a task's sweep points, after the task's section
SWEEP_SECTIONS = {SEQUENCE_RECOVERY.name: recovery_sweep_section}


def _provenance_section(run: Sequence[TaskResult]) -> str:
    models: dict[str, dict] = {}
    for r in run:
        models.setdefault(r.model, r.metrics.get("provenance", {}))
    keys = ("model", "revision", "dtype", "upcast_output_layer")
    rows = [[m, *(p.get(k, "n/a") for k in keys)] for m, p in models.items()]
    versions = [[k, v] for k, v in package_versions().items()]
    return (
        "<footer><h2 id='provenance'>Provenance</h2>"
        "<p class='sub'>What made these numbers: each model as loaded (id or path, revision, "
        "dtype, output layer upcast) and the versions of the packages; each result's metrics "
        "JSON also records the hash of the settings it was made with (settings_sha256).</p>"
        + html_table(
            ["model key", "model id / path", "revision", "dtype", "upcast output layer"],
            rows,
            numeric_from=99,
            empty="No model results in this run: a scan's model is recorded in its scan.json.",
        )
        + html_table(["package", "version"], versions, numeric_from=99)
        + "</footer>"
    )


def _scan_section(scan_dir: str | Path) -> str:
    """A scan: its totals, the genome-wide score distribution with the PHRED 10 / 20 / 30
    thresholds, and the context cells (the mean score of each, CpG sites marked)."""
    folder = Path(scan_dir)
    summary = json.loads((folder / "summary.json").read_text())
    calibration = Calibration.read(folder / "calibration")
    name = f"scan {folder.parent.name} / {folder.name}"
    scale = calibration.raw.table(calibration.decimals)
    thresholds = summary["calibration"]["thresholds"]["score"]
    labelled = {f"PHRED {p}": thresholds[f"phred_{p}"] for p in (10, 20, 30)}
    histogram = plots.score_histogram(scale["score"].to_numpy(), scale["n"].to_numpy(), labelled)
    cells = calibration.contexts.filter(pl.col("level") == "pentanucleotide")
    cells = cells.filter(pl.col("n_neutral") > 0)
    changes = [f"{r}>{a}" for r, a in zip(cells["ref"], cells["alt"], strict=True)]
    means = cells["mean_key_neutral"].to_numpy() / 10**calibration.decimals
    cpg = np.array([cpg_site(c) for c in cells["context"]], dtype=bool)
    extreme = extreme_contexts(calibration)
    rows = [
        [
            r["context"],
            f"{r['ref']}>{r['alt']}",
            "yes" if r["cpg"] else "",
            r["n_neutral"],
            f"{r['mean']:.3f}",
        ]
        for r in extreme.iter_rows(named=True)
    ]
    counts = [
        ["SNVs ranked", f"{summary['calibration']['snvs']:,}"],
        [  # bases with less than min_context of left context: no PHRED
            "SNVs without a PHRED (less left context)",
            f"{summary['calibration'].get('unranked_snvs', 0):,}",
        ],
        ["neutral set", summary["calibration"]["neutral"]],
        *(
            [f"lowest score at PHRED {p}", "n/a" if v is None else f"{v:.3f}"]
            for p, v in zip((10, 20, 30), labelled.values(), strict=True)
        ),
    ]
    return "".join(
        [
            heading(name, "calibration"),
            html_table(["", "value"], counts),
            figure_img(histogram, f"score distribution, {name}"),
            row_of(
                block(
                    "Mean score of each context cell",
                    figure_img(plots.context_strip(changes, means, cpg), f"context means, {name}"),
                ),
                block(
                    "Cells with the highest and lowest mean",
                    html_table(
                        ["context", "change", "CpG", "neutral SNVs", "mean"],
                        rows,
                        numeric_from=3,
                        empty=NO_OWN_MEANS,
                    ),
                ),
            ),
        ]
    )


def render_html(
    run: Sequence[TaskResult],
    table: pl.DataFrame | None,
    title: str = "carbon-vep run report",
    scans: Sequence[str | Path] = (),
    published_niah: str | Path | None = None,
    sweeps: Sequence[dict] = (),
) -> str:
    """The whole run as one self-contained HTML page (`table`: the run's results table;
    `scans`: the output folders of its scans; `published_niah`: the published NIAH points,
    baselines/published_niah.yaml; `sweeps`: the metrics of the tasks' sweep points)."""
    colours = plots.model_colours(list(dict.fromkeys(r.model for r in run)))
    sections = {"vep": _vep_section} | {kind: TASK_SECTIONS[kind] for kind in TASK_KINDS}
    body, nav = [_comparison_section(run, table)], ["<a href='#results'>Results</a>"]
    points = grouped(sweeps, "task")
    for kind, section in sections.items():
        for task, results in by_task(run, kind).items():
            body.append(section(task, results, colours))
            if task in points:
                body.append(SWEEP_SECTIONS[kind](task, results, points[task]))
            nav.append(f"<a href='#{esc(task)}'>{esc(task)}</a>")
    published = load_published(published_niah) if published_niah else None
    if niah := niah_section(run, colours, published):
        body.append(niah)
        nav.append("<a href='#Genomic-NIAH'>Genomic-NIAH</a>")
    for scan_dir in scans:
        body.append(_scan_section(scan_dir))
        name = f"scan {Path(scan_dir).parent.name} / {Path(scan_dir).name}"
        nav.append(f"<a href='#{esc(name)}'>{esc(name)}</a>")
    body.append(_provenance_section(run))
    nav.append("<a href='#provenance'>Provenance</a>")
    models = ", ".join(colours)
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>"
        f"<p class='sub'>Models: {esc(models)}. Scores are oriented larger = more damaging. "
        "Click a column's header to sort a table; hover over (or tap) an underlined metric for "
        "its definition.</p>"
        f"<nav aria-label='contents'>{''.join(nav)}</nav>{''.join(body)}"
        f"<script>{SORT_SCRIPT}</script></body></html>\n"
    )


def write_html_report(
    metrics: Sequence[str | Path],
    rows: Sequence[str | Path],
    results_table: str | None,
    results_table_md: str | None,
    scans: Sequence[str | Path],
    published_niah: str | None,
    sweep_metrics: Sequence[str | Path],
    title: str,
    out_html: str,
    out_md: str,
) -> None:
    """The run's page (`render_html`) at `out_html` and its Markdown summary at `out_md`: each
    result's metrics JSON with its row file, in the same order; the results table (Parquet and
    Markdown); the scans' folders, the published NIAH points and the sweep points' metrics."""
    run = load_run(metrics, rows)
    table = pl.read_parquet(results_table) if results_table else None
    sweeps = load_results(sweep_metrics)
    html = render_html(run, table, title, scans, published_niah, sweeps)
    atomic.write_text(html, out_html)
    table_markdown = Path(results_table_md).read_text() if results_table_md else ""
    summary = render_summary([r.metrics for r in run], table_markdown, title)
    atomic.write_text(summary, out_md)
