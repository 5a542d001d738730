"""What a checked panel adds up to: counts of every status and variant type, the commonest
reasons, contig aliases, REF concordance; and the stop when no row can be scored
(`NothingScoreableError`, which carries the checked table). Works on a lazy frame, so that a
panel on disk is aggregated in bounded memory."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from carbon_vep.columns import Status
from carbon_vep.errors import PanelUnusableError

log = logging.getLogger("carbon_vep")

_REF_CHECKED = (Status.OK.value, Status.REF_MISMATCH.value)


class NothingScoreableError(PanelUnusableError):
    """No row of the panel can be scored. Carries the checked table (and, from
    `ingest_panel`, its summary) so that the caller can write them before stopping: each row's
    status and reason say why."""

    def __init__(self, source: str, problem: str, checked: pl.DataFrame | None) -> None:
        super().__init__(source, problem)
        self.checked = checked
        self.summary: dict | None = None


def _collect(query: pl.LazyFrame) -> pl.DataFrame:
    return query.collect(engine="streaming")  # a panel on disk is aggregated in bounded memory


def _counted(
    values: pl.DataFrame | pl.LazyFrame, by: Sequence[str], top: int | None = None
) -> list[tuple[tuple, int]]:
    """Distinct values of the columns `by` with their counts, most common first, ties in order
    of first appearance (as `Counter.most_common`)."""
    query = (
        values.lazy()
        .select(by)
        .with_row_index("_first")
        .group_by(by)
        .agg(pl.len().alias("_n"), pl.col("_first").min())
        .sort(["_n", "_first"], descending=[True, False])
    )
    if top is not None:
        query = query.head(top)
    return [(row[:-2], row[-2]) for row in _collect(query).select(*by, "_n", "_first").rows()]


def unscoreable_reason(checked: pl.DataFrame | pl.LazyFrame) -> str | None:
    """Why no row of a checked panel (its status and reason columns) can be scored; None when
    some row can."""
    found = _collect(
        checked.lazy().select(
            (pl.col("status") == Status.OK).any().alias("scoreable"), pl.len().alias("n_rows")
        )
    ).row(0, named=True)
    if found["scoreable"]:
        return None
    reasons = _counted(checked, ["status", "reason"], top=4)
    top = "; ".join(f"{n} × {status}: {reason}" for (status, reason), n in reasons)
    return f"none of the {found['n_rows']} rows can be scored ({top}); nothing to score"


def assert_something_scoreable(checked: pl.DataFrame, source: str) -> None:
    if (problem := unscoreable_reason(checked)) is not None:
        raise NothingScoreableError(source, problem, checked)


def ref_concordance(checked: pl.DataFrame | pl.LazyFrame) -> float | None:
    """Share of REF-checked rows whose REF matched (None when no row was checked)."""
    found = _collect(
        checked.lazy()
        .filter(
            pl.col("status").is_in(_REF_CHECKED)
            | (
                (pl.col("status") == Status.SKIPPED)
                & pl.col("variant_type").is_in(["mnv", "indel"])
            )
        )
        .select(pl.len().alias("n"), (pl.col("status") != Status.REF_MISMATCH).sum().alias("hits"))
    ).row(0)
    n, hits = found
    return None if n == 0 else hits / n


def summarize(
    checked: pl.DataFrame | pl.LazyFrame, panel_path: str | Path, notes: Sequence[str] = ()
) -> dict:
    """Counts of every status (they add up to the number of input rows) and what was mapped.
    `checked` may be lazy (a checked panel on disk): it is aggregated, never held whole."""
    columns = checked.lazy().collect_schema().names()
    counts = {status: n for (status,), n in _counted(checked, ["status"])}
    aliased = _collect(
        checked.lazy()
        .select("chrom", "ref_chrom")
        .filter(pl.col("ref_chrom").is_not_null() & (pl.col("ref_chrom") != pl.col("chrom")))
        .unique()
    )
    unscored = (
        checked.lazy()
        .select("status", "reason")
        .filter((pl.col("status") != Status.OK) & (pl.col("reason") != ""))
    )
    variant_types = {kind: n for (kind,), n in _counted(checked, ["variant_type"])}
    flags = _collect(
        checked.lazy().select(
            pl.len().alias("n_rows"),
            (
                pl.col("duplicate_of").is_not_null().sum()
                if "duplicate_of" in columns
                else pl.lit(0)
            ).alias("n_duplicate_rows"),
            (pl.col("label_conflict").sum() if "label_conflict" in columns else pl.lit(0)).alias(
                "n_label_conflicts"
            ),
        )
    ).row(0, named=True)
    summary = {
        "panel": str(panel_path),
        "n_rows": flags["n_rows"],
        "status_counts": dict(sorted(counts.items())),
        "variant_type_counts": dict(sorted(variant_types.items())),
        "top_reasons": {reason: n for (reason,), n in _counted(unscored, ["reason"], 20)},
        "contig_aliases": {r["chrom"]: r["ref_chrom"] for r in aliased.to_dicts()},
        "n_scoreable": counts.get(Status.OK, 0),
        "ref_concordance": ref_concordance(checked),
        "n_duplicate_rows": int(flags["n_duplicate_rows"]),
        "n_label_conflicts": int(flags["n_label_conflicts"]),
        "notes": list(notes),
    }
    if sum(counts.values()) != summary["n_rows"]:  # cannot happen; guards the promise above
        raise AssertionError("status counts do not add up to the rows")
    return summary


def log_summary(summary: dict, reasons: int = 3) -> None:
    """Say what the check of a panel found (every command that checks one: check-panel, score,
    annotate): the status counts, the contigs mapped to the reference's names, the commonest
    reasons rows are not scored, and the reader's notes (blank lines, renamed columns, header
    lengths), as warnings."""
    panel = summary.get("panel", "panel")
    log.info("checked %d rows: %s", summary.get("n_rows", 0), summary.get("status_counts"))
    aliases = summary.get("contig_aliases") or {}
    if aliases:
        mapped = ", ".join(f"{chrom} -> {ref}" for chrom, ref in sorted(aliases.items()))
        log.info("%s: contigs mapped to the reference's names: %s", panel, mapped)
    n_rows, n_ok = summary.get("n_rows", 0), summary.get("n_scoreable", 0)
    if n_rows > n_ok:
        top = list((summary.get("top_reasons") or {}).items())[:reasons]
        said = "; ".join(f"{reason} ({n})" for reason, n in top)
        log.warning(
            "%s: %d of %d rows will not be scored%s",
            panel,
            n_rows - n_ok,
            n_rows,
            f", e.g. {said}" if said else "",
        )
    for note in summary.get("notes", []):
        log.warning("%s: %s", panel, note)
