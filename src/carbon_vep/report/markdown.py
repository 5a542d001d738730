"""Markdown reports: one page per (dataset, model), and the run's summary next to its HTML page.

The helpers that format a metric with its interval and order the metrics are shared with the
HTML page (`report.html`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from carbon_vep import atomic, markdown
from carbon_vep.columns import Status
from carbon_vep.evaluate.metrics import CALIBRATED_SCORE
from carbon_vep.provenance import package_versions


def _fmt(value: object, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _with_interval(metrics: dict, name: str, digits: int = 4) -> str:
    value = metrics.get("metrics", {}).get(name)
    ci = metrics.get("confidence_intervals", {}).get(name)
    text = _fmt(value, digits)
    if ci and value is not None:
        text += f" [{ci['low']:.{digits - 1}f}, {ci['high']:.{digits - 1}f}]"
    return text


def ordered_metrics(names: Sequence[str]) -> list[str]:
    """Global metrics first (AUROC, both AUPRCs), then by-chromosome ones, then the rest."""
    first = {"auroc": 0, "auprc_trapezoid": 1, "average_precision": 2}
    return sorted(names, key=lambda n: (first.get(n, 3 if "_by_chrom_" in n else 4), n))


# ---- Markdown, one dataset x model ---------------------------------------------------------
def _metrics_table(metrics: dict) -> str:
    """Each metric with its interval and definition; beside it, for a scan's panel, the same
    metric on the context-calibrated score."""
    definitions = metrics.get("definitions", {})
    calibrated = metrics.get(CALIBRATED_SCORE)
    header = ["metric", "score", *(["calibrated"] if calibrated else []), "definition"]
    rows = [
        [
            name,
            _with_interval(metrics, name),
            *([_with_interval(calibrated, name)] if calibrated else []),
            definitions.get(name, ""),
        ]
        for name in ordered_metrics(list(metrics["metrics"]))
    ]
    return markdown.table(header, rows)


def render_report(merged: pl.DataFrame, metrics: dict, title: str) -> str:
    """Markdown: provenance, status counts, metrics with definitions, top-scoring variants."""
    provenance = metrics.get("provenance", {})
    scored = merged.filter(pl.col("status") == Status.SCORED)
    recipe = scored["recipe"][0] if scored.height else "n/a"
    normalization = scored["normalization"][0] if scored.height else "n/a"
    parts = [
        f"# {title}",
        f"Recipe **{recipe}**, normalisation **{normalization}**; "
        f"{merged.height} input rows, {scored.height} scored. "
        "Score orientation: larger = more damaging.",
        "## Input status counts",
        markdown.table(["status", "rows"], [[k, v] for k, v in metrics["status_counts"].items()]),
    ]
    if metrics.get("metrics"):
        excluded = metrics.get("n_excluded_label_conflict", 0)
        parts += [
            "## Metrics",
            f"{metrics.get('n_labelled', 0)} labelled scored rows, "
            f"{metrics.get('n_positive', 0)} positive"
            + (f"; {excluded} rows with conflicting labels excluded" if excluded else "")
            + (
                ". Brackets: 95% bootstrap interval."
                if metrics.get("confidence_intervals")
                else "."
            ),
            _metrics_table(metrics),
        ]
    for metric, conventions in metrics.get("by_chromosome", {}).items():
        detail = conventions.get("drop_single_class", {})
        if detail.get("dropped"):
            dropped = ", ".join(
                f"{d['chrom']} (n={d['n']}, weight {d['weight_of_all']:.3f})"
                for d in detail["dropped"]
            )
            parts.append(f"By-chromosome {metric}: dropped one-class chromosomes {dropped}.")
    if metrics.get("warnings"):
        parts += ["## Warnings", "\n".join(f"- {w}" for w in metrics["warnings"])]
    parts += _top_part(scored) + _unscored_part(merged.filter(pl.col("status") != Status.SCORED))
    prov_rows = [[k, v] for k, v in {**provenance, **package_versions()}.items()]
    parts += ["## Provenance", markdown.table(["item", "value"], prov_rows)]
    return "\n\n".join(parts) + "\n"


# the merged table's columns render_report reads: the others (a panel's INFO fields, the
# scores' detail) stay on disk, ~1.8 kB a row of a ClinVar-size panel
REPORT_COLUMNS = (
    "chrom",
    "pos",
    "ref",
    "alt",
    "status",
    "reason",
    "recipe",
    "normalization",
    "score",
)


def write_report(merged: str, metrics: str, title: str, out: str) -> None:
    """One dataset's Markdown report at `out`, from its merged rows (Parquet) and metrics JSON."""
    present = pl.read_parquet_schema(merged)
    frame = pl.read_parquet(merged, columns=[c for c in REPORT_COLUMNS if c in present])
    values = json.loads(Path(metrics).read_text())
    atomic.write_text(render_report(frame, values, title), out)


def _top_part(scored: pl.DataFrame) -> list[str]:
    if not scored.height:
        return []
    top = scored.sort("score", descending=True).head(10)
    rows = [[r["chrom"], r["pos"], r["ref"], r["alt"], f"{r['score']:.4g}"] for r in top.to_dicts()]
    return [
        "## Highest-scoring variants",
        markdown.table(["chrom", "pos", "ref", "alt", "score"], rows),
    ]


def _unscored_part(unscored: pl.DataFrame) -> list[str]:
    if not unscored.height:
        return []
    # ties in the order of the first row with the reason (group_by's order is arbitrary)
    reasons = (
        unscored.with_row_index("_first")
        .group_by("status", "reason")
        .agg(pl.len(), pl.col("_first").min())
        .sort(["len", "_first"], descending=[True, False])
        .drop("_first")
    )
    rows = [list(r) for r in reasons.head(20).iter_rows()]
    return ["## Rows not scored, by reason", markdown.table(["status", "reason", "rows"], rows)]


def render_summary(
    results: Sequence[dict], table_markdown: str, title: str = "carbon-vep run summary"
) -> str:
    """Markdown companion of the HTML page: the results table (as make_results_table wrote
    it), the status counts and the warnings of every result."""
    parts = [f"# {title}", "## Results", table_markdown]
    status_lines = [
        f"- {m['task']} / {m['model_key']}: "
        + ", ".join(f"{k}: {v}" for k, v in m.get("status_counts", {}).items())
        for m in results
    ]
    parts += ["## Input status counts", "\n".join(status_lines)]
    warnings = [
        f"- {m['task']} / {m['model_key']}: {w}" for m in results for w in m.get("warnings", [])
    ]
    if warnings:
        parts += ["## Warnings", "\n".join(warnings)]
    return "\n\n".join(parts) + "\n"
