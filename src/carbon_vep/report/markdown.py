"""Markdown reports: one page per (dataset, model), and the run's summary next to its HTML page.

The helpers that format a metric with its interval and order the metrics are shared with the
HTML page (`report.html`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from carbon_vep import atomic, markdown
from carbon_vep.columns import Status
from carbon_vep.evaluate.metrics import CALIBRATED_SCORE
from carbon_vep.provenance import package_versions
from carbon_vep.report.table_slices import slices

_SCORED = pl.col("status") == Status.SCORED
TOP_ROWS = 10  # the highest-scoring variants listed
TOP_COLUMNS = ("chrom", "pos", "ref", "alt", "score")
REASON_ROWS = 20  # the reasons listed
# rows read at a time: a slice's columns, not the table's (a ClinVar-size one: ~4 M rows)
SLICE_ROWS = 100_000


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


def render_report(merged: pl.DataFrame | pl.LazyFrame, metrics: dict, title: str) -> str:
    """Markdown: provenance, status counts, metrics with definitions, top-scoring variants.

    `merged` is read a slice at a time (`_tally`): a scan of the merged Parquet is never held
    whole."""
    provenance = metrics.get("provenance", {})
    tally = _tally(merged.lazy())
    recipe, normalization = tally.recipe
    parts = [
        f"# {title}",
        f"Recipe **{recipe}**, normalisation **{normalization}**; "
        f"{tally.n_rows} input rows, {tally.n_scored} scored. "
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
    parts += _top_part(tally.top) + _unscored_part(tally.reasons)
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
    table = pl.scan_parquet(merged).select(c for c in REPORT_COLUMNS if c in present)
    values = json.loads(Path(metrics).read_text())
    atomic.write_text(render_report(table, values, title), out)


@dataclass
class _Tally:
    """What the page shows of the merged rows: their count, the scored rows' count, the first
    scored row's recipe and normalisation, the highest scores (`TOP_ROWS`, the score first,
    ties in the table's order) and the unscored rows' (status, reason) counts (most first,
    ties in the order of their first row; at most `REASON_ROWS`)."""

    n_rows: int
    n_scored: int
    recipe: tuple[object, object]
    top: pl.DataFrame
    reasons: pl.DataFrame | None  # None: no rows


def _tally(merged: pl.LazyFrame) -> _Tally:
    """One pass over `merged`, `SLICE_ROWS` at a time: a running top ten and reason counts
    (not a streaming query: its top-k breaks ties in no set order, and the row numbers a
    tie-break needs made its memory grow with the rows)."""
    n_rows = merged.select(pl.len()).collect().item()
    n_scored, recipe = 0, ("n/a", "n/a")
    top = pl.DataFrame(schema=merged.select(TOP_COLUMNS).collect_schema())
    reasons = None
    for offset, piece in slices(merged, 0, n_rows, SLICE_ROWS):
        rows = piece.collect()
        scored = rows.filter(_SCORED)
        if scored.height and not n_scored:
            recipe = (scored["recipe"][0], scored["normalization"][0])
        n_scored += scored.height
        # stable: the rows kept so far come first, so a tie keeps the table's order
        top = pl.concat([top, scored.select(TOP_COLUMNS)]).sort(
            "score", descending=True, nulls_last=True, maintain_order=True
        )
        top = top.head(TOP_ROWS)
        counted = (
            rows.with_row_index("_first", offset)
            .filter(pl.col("status") != Status.SCORED)
            .group_by("status", "reason")
            .agg(pl.len(), pl.col("_first").min())
        )
        reasons = counted if reasons is None else pl.concat([reasons, counted])
        reasons = reasons.group_by("status", "reason").agg(
            pl.col("len").sum(), pl.col("_first").min()
        )
    if reasons is not None:  # ties in the order of their first row (group_by's is arbitrary)
        reasons = reasons.sort(["len", "_first"], descending=[True, False]).drop("_first")
        reasons = reasons.head(REASON_ROWS)
    return _Tally(n_rows, n_scored, recipe, top, reasons)


def _top_part(top: pl.DataFrame) -> list[str]:
    if not top.height:
        return []
    rows = [
        [
            r["chrom"],
            r["pos"],
            r["ref"],
            r["alt"],
            "n/a" if r["score"] is None else f"{r['score']:.4g}",
        ]
        for r in top.to_dicts()
    ]
    return [
        "## Highest-scoring variants",
        markdown.table(["chrom", "pos", "ref", "alt", "score"], rows),
    ]


def _unscored_part(reasons: pl.DataFrame | None) -> list[str]:
    if reasons is None or not reasons.height:
        return []
    rows = [list(r) for r in reasons.iter_rows()]
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
