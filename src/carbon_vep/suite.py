"""The zero-shot suite: task tables in, one results table out (zero-shot-suite.md §7).

Every task writes a metrics JSON with `kind`, `task`, `model_key`, `metrics`, `definitions` and
`headline_metrics`; `results_table` turns any set of them into one table whose rows are
(task, headline metric) and whose columns are models, like the published comparison table.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import polars as pl

from . import atomic
from .errors import InputError
from .metrics import bootstrap_intervals

TABLE_SUFFIXES = {".parquet": "parquet", ".tsv": "\t", ".txt": "\t", ".csv": ","}


def read_task_table(path: str | Path, required: Sequence[str]) -> pl.DataFrame:
    """A task file (Parquet / TSV / CSV) with `required` columns, plus `row_id` and `source`.

    Columns are read as given (text tables as strings); other columns are carried.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "task file not found")
    suffix = next((s for s in TABLE_SUFFIXES if path.name.lower().endswith(s)), None)
    if suffix is None:
        raise InputError(path, f"unknown task file type; use one of {sorted(TABLE_SUFFIXES)}")
    try:
        if suffix == ".parquet":
            frame = pl.read_parquet(path)
        else:
            frame = pl.read_csv(path, separator=TABLE_SUFFIXES[suffix], infer_schema_length=0)
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot read task file: {err}") from err
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(path, f"missing column(s) {missing}; found {frame.columns}")
    if frame.height == 0:
        raise InputError(path, "the task file holds no rows")
    first = 1 if suffix == ".parquet" else 2  # a text table's header is line 1
    unit = "row" if suffix == ".parquet" else "line"
    return frame.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.format(
            "{}:{} {}", pl.lit(str(path)), pl.lit(unit), pl.int_range(pl.len()) + first
        ).alias("source"),
    )


def bootstrap_mean_interval(values: np.ndarray, n_resamples: int, seed: int) -> dict | None:
    """Percentile 95% interval of a row mean (accuracy) over row resamples."""
    if n_resamples <= 0 or len(values) == 0:
        return None
    intervals = bootstrap_intervals(
        len(values), lambda i: {"mean": float(values[i].mean())}, n_resamples, seed
    )
    return intervals.get("mean")


# ---- results table ---------------------------------------------------------------------
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
    lines = [
        "| task | metric (×100) | " + " | ".join(models) + " |",
        "|---|---|" + "---|" * len(models),
    ]
    for (task, metric), part in long.group_by(["task", "metric"], maintain_order=True):
        by_model = {r["model"]: r for r in part.to_dicts()}
        cells = [
            _cell(r["value"], r["ci_low"], r["ci_high"]) if (r := by_model.get(m)) else "—"
            for m in models
        ]
        lines.append(f"| {task} | {metric} | " + " | ".join(cells) + " |")
    definitions = long.unique(["metric", "definition"], maintain_order=True)
    lines += ["", "Definitions:", ""]
    lines += [f"- `{r['metric']}` ({r['kind']}): {r['definition']}" for r in definitions.to_dicts()]
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


# ---- public datasets -------------------------------------------------------------------
def fetch_hub_file(
    repo_id: str,
    filename: str,
    out: str | Path,
    revision: str | None = None,
    repo_type: str = "dataset",
) -> Path:
    """Download one file of a Hub repository to `out` (atomically), or, when `filename` is a
    glob, every matching Parquet concatenated in name order. Needs internet (a head node)."""
    from huggingface_hub import hf_hub_download, snapshot_download

    if not any(c in filename for c in "*?["):
        path = hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision)
        with atomic.atomic_path(out) as tmp:
            shutil.copyfile(path, tmp)
        return Path(out)
    root = snapshot_download(
        repo_id, repo_type=repo_type, revision=revision, allow_patterns=[filename]
    )
    root = Path(root)  # allow_patterns match like fnmatch: `*` also spans folders
    files = sorted(
        f
        for f in root.rglob("*")
        if f.is_file() and fnmatch(f.relative_to(root).as_posix(), filename)
    )
    if not files:
        raise InputError(f"hf://{repo_type}s/{repo_id}", f"no file matches {filename!r}")
    frame = pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed")
    atomic.write_parquet(frame, out)
    return Path(out)
