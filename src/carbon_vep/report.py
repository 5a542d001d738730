"""A short human-readable Markdown report of one dataset scored by one model."""

from __future__ import annotations

import platform
from importlib import metadata

import polars as pl

_PACKAGES = ("carbon-vep", "torch", "transformers", "snakemake", "pysam", "polars")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _fmt(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def render_report(merged: pl.DataFrame, metrics: dict, title: str) -> str:
    """Markdown: provenance, status counts, metrics with definitions, top-scoring variants."""
    provenance = metrics.get("provenance", {})
    scored = merged.filter(pl.col("status") == "scored")
    recipe = scored["recipe"][0] if scored.height else "n/a"
    normalization = scored["normalization"][0] if scored.height else "n/a"
    parts = [
        f"# {title}",
        f"Recipe **{recipe}**, normalisation **{normalization}**; "
        f"{merged.height} input rows, {scored.height} scored. "
        "Score orientation: larger = more damaging.",
        "## Input status counts",
        _table(["status", "rows"], [[k, v] for k, v in metrics["status_counts"].items()]),
    ]
    if metrics.get("metrics"):
        definitions = metrics.get("definitions", {})
        rows = [[k, _fmt(v), definitions.get(k, "")] for k, v in metrics["metrics"].items()]
        parts += [
            "## Metrics",
            f"{metrics.get('n_labelled', 0)} labelled scored rows, "
            f"{metrics.get('n_positive', 0)} positive.",
            _table(["metric", "value", "definition"], rows),
        ]
    if metrics.get("warnings"):
        parts += ["## Warnings", "\n".join(f"- {w}" for w in metrics["warnings"])]
    if scored.height:
        top = scored.sort("score", descending=True).head(10)
        parts += [
            "## Highest-scoring variants",
            _table(
                ["chrom", "pos", "ref", "alt", "score"],
                [
                    [r["chrom"], r["pos"], r["ref"], r["alt"], _fmt(r["score"])]
                    for r in top.to_dicts()
                ],
            ),
        ]
    unscored = merged.filter(pl.col("status") != "scored")
    if unscored.height:
        reasons = unscored.group_by("status", "reason").len().sort("len", descending=True)
        parts += [
            "## Rows not scored, by reason",
            _table(["status", "reason", "rows"], [list(r) for r in reasons.head(20).iter_rows()]),
        ]
    prov_rows = [[k, v] for k, v in {**provenance, **package_versions()}.items()]
    parts += ["## Provenance", _table(["item", "value"], prov_rows)]
    return "\n\n".join(parts) + "\n"
