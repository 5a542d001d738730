"""The zero-shot suite's results table: any set of metrics JSON files in, one table out
(rows: task and headline metric; columns: models), like the published comparison table.

Every task writes a metrics JSON with `kind`, `task`, `model_key`, `metrics`, `definitions` and
`headline_metrics`; `results_table` and `results_markdown` read nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep import atomic, markdown
from carbon_vep.errors import InputError


def _headline_rows(result: dict) -> list[dict]:
    interval = result.get("confidence_intervals", {})
    rows = []
    for metric in result.get("headline_metrics", []):
        ci = interval.get(metric) or {}
        rows.append(
            {
                "task": result["task"],
                "kind": result["kind"],
                "metric": metric,
                "definition": result.get("definitions", {}).get(metric, ""),
                "model": result["model_key"],
                "value": result.get("metrics", {}).get(metric),
                "ci_low": ci.get("low"),
                "ci_high": ci.get("high"),
                "n": result.get("n_labelled", result.get("n_scored")),
            }
        )
    return rows


def results_long(results: Sequence[dict]) -> pl.DataFrame:
    """One row per (task, headline metric, model), with its interval and definition."""
    schema = {
        "task": pl.Utf8,
        "kind": pl.Utf8,
        "metric": pl.Utf8,
        "definition": pl.Utf8,
        "model": pl.Utf8,
        "value": pl.Float64,
        "ci_low": pl.Float64,
        "ci_high": pl.Float64,
        "n": pl.Int64,
    }
    rows = [row for result in results for row in _headline_rows(result)]
    return pl.DataFrame(rows, schema=schema, orient="row")


def results_table(results: Sequence[dict]) -> pl.DataFrame:
    """Rows (task, metric) in the order the results come, one value column per model."""
    long = results_long(results)
    if long.height == 0:
        return pl.DataFrame(schema={"task": pl.Utf8, "metric": pl.Utf8})
    models = list(dict.fromkeys(long["model"].to_list()))
    wide = long.pivot(on="model", index=["task", "metric"], values="value", aggregate_function=None)
    return wide.select("task", "metric", *models)


def _cell(value: float | None, low: float | None, high: float | None) -> str:
    if value is None or np.isnan(value):
        return "n/a"
    text = f"{100 * value:.2f}"
    return text if low is None else f"{text} [{100 * low:.1f}, {100 * high:.1f}]"


def results_markdown(results: Sequence[dict]) -> str:
    """The results table in Markdown: values ×100 with 95% bootstrap intervals."""
    long = results_long(results)
    if long.height == 0:
        return "No results.\n"
    models = list(dict.fromkeys(long["model"].to_list()))
    rows = []
    for (task, metric), part in long.group_by(["task", "metric"], maintain_order=True):
        by_model = {r["model"]: r for r in part.to_dicts()}
        cells = [
            _cell(r["value"], r["ci_low"], r["ci_high"]) if (r := by_model.get(m)) else "—"
            for m in models
        ]
        rows.append([task, metric, *cells])
    lines = [markdown.table(["task", "metric (×100)", *models], rows)]
    definitions = long.unique(["metric", "definition"], maintain_order=True)
    lines += ["", "Definitions:", ""]
    lines += [f"- `{r['metric']}` ({r['kind']}): {r['definition']}" for r in definitions.to_dicts()]
    if long["ci_low"].is_not_null().any():  # none with `bootstrap: 0`
        lines.append("\nBrackets: 95% percentile bootstrap interval over rows.")
    return "\n".join(lines) + "\n"


def load_results(paths: Sequence[str | Path]) -> list[dict]:
    results = []
    for path in paths:
        result = json.loads(Path(path).read_text())
        missing = [k for k in ("kind", "task", "model_key") if k not in result]
        if missing:
            raise InputError(path, f"metrics JSON lacks {missing}: not written by this version?")
        results.append(result)
    return results


def refuse_duplicates(paths: Sequence[str | Path], results: Sequence[dict]) -> None:
    """One metrics JSON a (task, model) in a results table: a second one is refused naming the
    task, the model and both files (which of the two values to show cannot be guessed)."""
    seen: dict[tuple[str, str], str | Path] = {}
    for path, result in zip(paths, results, strict=True):
        key = (str(result["task"]), str(result["model_key"]))
        if key in seen:
            raise InputError(
                path,
                f"task {key[0]!r} of model {key[1]!r} is already in {seen[key]}: a results "
                "table takes one metrics JSON per task and model; pass one of the two",
            )
        seen[key] = path


def write_results_table(
    metrics: Sequence[str | Path], out_parquet: str, out_tsv: str, out_md: str
) -> None:
    """The results table of the metrics JSON files, as Parquet, TSV and Markdown."""
    results = load_results(metrics)
    refuse_duplicates(metrics, results)
    table = results_table(results)
    atomic.write_parquet(table, out_parquet)
    with atomic.atomic_path(out_tsv) as tmp:
        table.write_csv(tmp, separator="\t")
    atomic.write_text(results_markdown(results), out_md)
