"""The parts every section of the run's HTML report is made of: the run's results with their
row files, escaping, tables, embedded figures, headings, warnings and status counts, and the
page's stylesheet (assets/report.css, inlined)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import polars as pl

from carbon_vep.report import plots
from carbon_vep.report.results_table import load_results

CSS = (resources.files("carbon_vep.report") / "assets" / "report.css").read_text()


# ---- the run: results and their row-level files ------------------------------------------
@dataclass(frozen=True)
class TaskResult:
    """One (task, model) result: its metrics JSON and the row file the rule passed with it:
    the labelled rows a VEP dataset's metrics used (`label01`, `score`), or a task's
    predictions."""

    metrics: dict
    rows: pl.DataFrame

    @property
    def task(self) -> str:
        return self.metrics["task"]

    @property
    def model(self) -> str:
        return self.metrics["model_key"]


def load_run(
    metrics_paths: Sequence[str | Path], rows_paths: Sequence[str | Path]
) -> list[TaskResult]:
    """Each metrics JSON with its row file, paired in the order given."""
    if len(metrics_paths) != len(rows_paths):
        raise ValueError(f"{len(metrics_paths)} metrics files but {len(rows_paths)} row files")
    results = load_results(metrics_paths)
    return [
        TaskResult(m, pl.read_parquet(rows)) for m, rows in zip(results, rows_paths, strict=True)
    ]


def by_task(run: Sequence[TaskResult], kind: str) -> dict[str, list[TaskResult]]:
    out: dict[str, list[TaskResult]] = {}
    for result in run:
        if result.metrics["kind"] == kind:
            out.setdefault(result.task, []).append(result)
    return out


def esc(value: object) -> str:
    return html.escape(str(value))


class Hint(NamedTuple):
    """A table cell with its definition one hover (or, on a touch screen, one tap) away."""

    text: str
    title: str


def _cell(value: object, numeric: bool) -> str:
    css = ' class="num"' if numeric else ""
    if isinstance(value, Hint) and value.title:
        return (
            f'<td{css}><abbr title="{esc(value.title)}" tabindex="0">{esc(value.text)}</abbr></td>'
        )
    return f"<td{css}>{esc(value.text if isinstance(value, Hint) else value)}</td>"


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    numeric_from: int = 1,
    empty: str = "No rows to show.",
):
    """A table whose columns sort when their header is clicked (SORT_SCRIPT); without rows, the
    line `empty` (why there are none) instead of a header over nothing."""
    if not rows:
        return f"<p class='empty'>{esc(empty)}</p>"
    head = "".join(f'<th tabindex="0" aria-sort="none">{esc(h)}</th>' for h in header)
    body = "".join(
        "<tr>" + "".join(_cell(c, i >= numeric_from) for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# sorts a table's rows by the clicked column (numbers by value, the rest as text), toggling
# between ascending and descending; inline, so the page stays one file with no network
SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  function sort() {
    var table = th.closest("table"), body = table.tBodies[0];
    var column = Array.prototype.indexOf.call(th.parentNode.children, th);
    var up = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th").forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", up ? "ascending" : "descending");
    function key(row) {
      var text = row.cells[column] ? row.cells[column].textContent.trim() : "";
      var number = parseFloat(text.replace(/,/g, ""));
      return isNaN(number) ? text.toLowerCase() : number;
    }
    Array.prototype.slice.call(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
    }).forEach(function (row) { body.appendChild(row); });
  }
  th.addEventListener("click", sort);
  th.addEventListener("keydown", function (e) { if (e.key === "Enter") { sort(); } });
});
"""


def figure_img(fig, alt: str) -> str:
    return f'<img alt="{esc(alt)}" src="{plots.to_data_uri(fig)}">'


def warnings_box(items: Sequence[str]) -> str:
    if not items:
        return ""
    return (
        '<div class="warn"><b>Warnings</b><ul>'
        + "".join(f"<li>{esc(w)}</li>" for w in items)
        + "</ul></div>"
    )


def heading(anchor: str, kind: str) -> str:
    """A section's title (its anchor in the contents) and what kind of section it is."""
    return f"<h2 id='{esc(anchor)}'>{esc(anchor)} <span class='sub'>({kind})</span></h2>"


def model_warnings(results: Sequence[TaskResult]) -> str:
    return warnings_box([f"{r.model}: {w}" for r in results for w in r.metrics.get("warnings", [])])


def definitions(results: Sequence[TaskResult]) -> str:
    definitions: dict[str, str] = {}
    for result in results:
        definitions.update(result.metrics.get("definitions", {}))
    items = "".join(f"<li><code>{esc(k)}</code>: {esc(v)}</li>" for k, v in definitions.items())
    return f"<details><summary>Definitions</summary><ul>{items}</ul></details>"


def status_table(results: Sequence[TaskResult]) -> str:
    statuses = sorted({s for r in results for s in r.metrics.get("status_counts", {})})
    rows = [[s, *(r.metrics["status_counts"].get(s, 0) for r in results)] for s in statuses]
    rows.append(["total rows", *(r.metrics.get("n_rows", 0) for r in results)])
    return html_table(["status", *(r.model for r in results)], rows)


def block(title: str, *content: str) -> str:
    return f"<div><h3>{esc(title)}</h3>{''.join(content)}</div>"


def row_of(*blocks: str) -> str:
    return f"<div class='row'>{''.join(b for b in blocks if b)}</div>"
