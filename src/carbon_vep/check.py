"""Check each panel variant against the reference and give every row a status and a reason.

Rows are never dropped: a row that cannot be scored keeps its place with a status other than
`ok`. A panel that is unusable as a whole (wrong build, 0-based coordinates, contigs that match
nothing) raises `PanelUnusableError` before any scoring job starts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from .errors import PanelUnusableError
from .reference import Reference, resolve_contigs

ACGT = frozenset("ACGT")
STATUSES = ("ok", "invalid", "unknown_contig", "out_of_bounds", "skipped", "ref_mismatch")


@dataclass(frozen=True)
class CheckPolicy:
    min_ref_concordance: float = 0.9
    min_rows_for_concordance: int = 20
    indel_policy: str = "skip"


def _classify(ref: str, alt: str) -> tuple[str, str]:
    """(variant_type, skip reason or '') from the alleles alone."""
    if alt in (".", "*", "") or alt.startswith("<") or "[" in alt or "]" in alt:
        return "symbolic", f"symbolic, star or missing ALT {alt!r}"
    if not set(ref) <= ACGT or not set(alt) <= ACGT:
        return "non_acgt", f"non-ACGT allele ({ref}>{alt})"
    if ref == alt:
        return "no_change", "ALT equals REF"
    if len(ref) == 1 and len(alt) == 1:
        return "snv", ""
    kind = "mnv" if len(ref) == len(alt) else "indel"
    return kind, f"{kind} {len(ref)}>{len(alt)} bp (indel_policy: skip; SNVs only)"


def _row_status(
    row: dict, mapping: dict[str, str], reference: Reference
) -> tuple[str | None, str, str, str]:
    """(ref_chrom, variant_type, status, reason) for one panel row."""
    chrom, pos = row["chrom"], row["pos"]
    ref = (row["ref"] or "").upper()
    alt = (row["alt"] or ".").upper()
    if chrom is None or pos is None or not ref:
        return None, "invalid", "invalid", "missing or non-integer CHROM/POS/REF"
    ref_chrom = mapping.get(chrom)
    variant_type, skip_reason = _classify(ref, alt)
    if ref_chrom is None:
        return None, variant_type, "unknown_contig", f"contig {chrom!r} not in the reference"
    if pos < 1 or pos + len(ref) - 1 > reference.lengths[ref_chrom]:
        length = reference.lengths[ref_chrom]
        return ref_chrom, variant_type, "out_of_bounds", f"POS {pos} outside {ref_chrom}:1-{length}"
    if skip_reason:
        return ref_chrom, variant_type, "skipped", skip_reason
    genome_ref = reference.fetch(ref_chrom, pos - 1, pos - 1 + len(ref))
    if genome_ref != ref:
        return ref_chrom, variant_type, "ref_mismatch", f"REF {ref} but reference has {genome_ref}"
    return ref_chrom, variant_type, "ok", ""


def _concordance(rows: list[dict], reference: Reference, shift: int) -> float:
    """Share of SNV rows whose REF equals the reference base at POS + shift."""
    hits = 0
    for row in rows:
        start = row["pos"] - 1 + shift
        hits += reference.fetch(row["ref_chrom"], start, start + 1) == row["ref"].upper()
    return hits / len(rows)


def _assert_build_matches(frame: pl.DataFrame, reference: Reference, policy: CheckPolicy) -> None:
    """Abort when REF concordance says the panel is on another build or 0-based."""
    snvs = frame.filter(
        pl.col("status").is_in(["ok", "ref_mismatch"]) & (pl.col("variant_type") == "snv")
    ).to_dicts()
    if len(snvs) < policy.min_rows_for_concordance:
        return
    observed = _concordance(snvs, reference, 0)
    if observed >= policy.min_ref_concordance:
        return
    shifted = {shift: _concordance(snvs, reference, shift) for shift in (1, -1)}
    best_shift = max(shifted, key=lambda s: shifted[s])
    message = (
        f"REF matches {observed:.0%} of {len(snvs)} SNV rows against {reference.path} "
        f"(minimum {policy.min_ref_concordance:.0%}); panel and genome builds differ?"
    )
    if shifted[best_shift] >= policy.min_ref_concordance:
        hint = "0-based (BED-style)" if best_shift == 1 else "off by one the other way"
        message += (
            f" REF matches {shifted[best_shift]:.0%} at POS{best_shift:+d}: the positions look "
            f"{hint}; add {best_shift} to POS to make them 1-based."
        )
    raise PanelUnusableError(frame["source"][0].rsplit(":", 1)[0], message)


def check_panel(
    panel: pl.DataFrame, reference: Reference, policy: CheckPolicy | None = None
) -> pl.DataFrame:
    """Add ref_chrom, variant_type, status and reason to every panel row (none dropped)."""
    policy = policy or CheckPolicy()
    contigs = panel["chrom"].drop_nulls().unique().to_list()
    mapping = resolve_contigs(contigs, reference.contigs)
    if contigs and not mapping:
        raise PanelUnusableError(
            panel["source"][0].rsplit(":", 1)[0],
            f"no panel contig matches the reference {reference.path}: panel uses "
            f"{sorted(contigs)[:5]}, reference has {reference.contigs[:5]}",
        )
    results = [_row_status(row, mapping, reference) for row in panel.iter_rows(named=True)]
    ref_chrom, variant_type, status, reason = zip(*results, strict=True)
    checked = panel.with_columns(
        pl.Series("ref_chrom", ref_chrom, dtype=pl.Utf8),
        pl.Series("variant_type", variant_type, dtype=pl.Utf8),
        pl.Series("status", status, dtype=pl.Utf8),
        pl.Series("reason", reason, dtype=pl.Utf8),
        pl.col("ref").str.to_uppercase(),
        pl.col("alt").str.to_uppercase(),
    )
    _assert_build_matches(checked, reference, policy)
    return checked


def summarize(checked: pl.DataFrame, panel_path: str | Path) -> dict:
    """Counts of every status; they add up to the number of input rows."""
    counts = Counter(checked["status"].to_list())
    aliased = (
        checked.filter(pl.col("ref_chrom").is_not_null() & (pl.col("ref_chrom") != pl.col("chrom")))
        .select("chrom", "ref_chrom")
        .unique()
    )
    return {
        "panel": str(panel_path),
        "n_rows": checked.height,
        "status_counts": dict(sorted(counts.items())),
        "contig_aliases": {r["chrom"]: r["ref_chrom"] for r in aliased.to_dicts()},
        "n_scoreable": counts.get("ok", 0),
    }
