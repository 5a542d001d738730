"""Check each panel variant against the reference and give every row a status and a reason.

Rows are never dropped: a row that cannot be scored keeps its place with a status other than
`ok`. A panel that is unusable as a whole (wrong build, 0-based coordinates, contigs that match
nothing, nothing scoreable) raises `PanelUnusableError` before any scoring job starts.

Allele policy (the scoring recipes score SNVs):
- alleles are upper-cased; bases shared at the end and then at the start of REF and ALT are
  trimmed as `bcftools norm` does (without left-alignment), so a padded SNV such as `AT>GT`
  from a multi-allelic caller record becomes `A>G` and is scored; `input_*` keep the values read;
- symbolic, star and missing ALTs (`<DEL>`, `*`, `<NON_REF>`, `.`), breakends, non-ACGT alleles
  (N, IUPAC codes) and ALT = REF are `skipped` with the reason, before any REF check;
- REF is compared with the reference over its whole length (`ref_mismatch` when it differs);
- indels and MNVs with a matching REF are `skipped` (`indel_policy: skip`): an MNV is never
  split into SNVs whose scores would have to be combined into one row's score.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import polars as pl

from .contigs import alias_candidates, resolve_contigs
from .errors import PanelUnusableError
from .reference import Reference

ACGT = frozenset("ACGT")
STATUSES = ("ok", "invalid", "unknown_contig", "out_of_bounds", "skipped", "ref_mismatch")
INDEL_POLICIES = ("skip",)
_REF_CHECKED = ("ok", "ref_mismatch")


@dataclass(frozen=True)
class CheckPolicy:
    min_ref_concordance: float = 0.9
    min_rows_for_concordance: int = 20
    indel_policy: str = "skip"
    label_column: str | None = None  # duplicates whose labels differ get label_conflict
    build: str | None = None  # the dataset's declared build, named in error messages


class RowCheck(NamedTuple):
    ref_chrom: str | None
    variant_type: str
    status: str
    reason: str
    pos: int | None
    ref: str
    alt: str
    ref_checked: bool = False  # REF was compared with the genome (counts for concordance)


def trim_alleles(pos: int, ref: str, alt: str) -> tuple[int, str, str]:
    """Drop bases shared at the end, then at the start, keeping at least one base each."""
    while len(ref) > 1 and len(alt) > 1 and ref[-1] == alt[-1]:
        ref, alt = ref[:-1], alt[:-1]
    while len(ref) > 1 and len(alt) > 1 and ref[0] == alt[0]:
        ref, alt, pos = ref[1:], alt[1:], pos + 1
    return pos, ref, alt


def _short(allele: str) -> str:
    """An allele as shown in a reason: long ones abbreviated with their length."""
    return allele if len(allele) <= 12 else f"{allele[:10]}...({len(allele)} bp)"


def classify(ref: str, alt: str) -> tuple[str, str]:
    """(variant_type, skip reason or '') of upper-cased, trimmed alleles."""
    if alt in (".", "*", "") or alt.startswith("<") or "[" in alt or "]" in alt:
        return "symbolic", f"symbolic, star or missing ALT {_short(alt)!r}"
    if not set(ref) <= ACGT or not set(alt) <= ACGT:
        alleles = f"{_short(ref)}>{_short(alt)}"
        return "non_acgt", f"non-ACGT allele ({alleles}): N and IUPAC codes are not scored"
    if ref == alt:
        return "no_change", "ALT equals REF"
    if len(ref) == 1 and len(alt) == 1:
        return "snv", ""
    if len(ref) == len(alt):
        return "mnv", f"MNV of {len(ref)} bp (indel_policy skip: SNVs only are scored)"
    size = abs(len(ref) - len(alt))
    kind = "deletion" if len(ref) > len(alt) else "insertion"
    return "indel", f"{kind} of {size} bp (indel_policy skip: SNVs only are scored)"


def _invalid(row: dict, ref: str) -> str:
    """Why a row lacks a usable key, or '' when it has one."""
    if not (row["chrom"] or "").strip():
        return "missing CHROM"
    if row["pos"] is None:
        raw = row.get("input_pos")
        return "missing POS" if raw in (None, "", ".") else f"POS {raw!r} is not an integer"
    if ref in ("", "."):
        return "missing REF"
    return ""


def _row_check(
    row: dict, mapping: Mapping[str, str], unmapped: Mapping[str, str], reference: Reference
) -> RowCheck:
    chrom, pos = row["chrom"], row["pos"]
    ref = (row["ref"] or "").strip().upper()
    alt = (row["alt"] or "").strip().upper() or "."
    if problem := _invalid(row, ref):
        return RowCheck(None, "invalid", "invalid", problem, pos, ref, alt)
    short_pos, short_ref, short_alt = trim_alleles(pos, ref, alt)
    variant_type, skip_reason = classify(short_ref, short_alt)
    if variant_type == "snv":  # a padded SNV is reported (and scored) in its trimmed form
        pos, ref, alt = short_pos, short_ref, short_alt
    ref_chrom = mapping.get(chrom)
    if ref_chrom is None:
        return RowCheck(None, variant_type, "unknown_contig", unmapped[chrom], pos, ref, alt)
    length = reference.lengths[ref_chrom]
    start, end = row["pos"], row["pos"] + len(row["ref"].strip()) - 1
    if start < 1 or end > length:
        reason = f"POS {start}-{end} outside {ref_chrom}:1-{length}"
        return RowCheck(ref_chrom, variant_type, "out_of_bounds", reason, pos, ref, alt)
    if variant_type in ("symbolic", "non_acgt", "no_change"):
        return RowCheck(ref_chrom, variant_type, "skipped", skip_reason, pos, ref, alt)
    input_ref = row["ref"].strip().upper()
    genome_ref = reference.fetch(ref_chrom, start - 1, end)
    if genome_ref != input_ref:
        reason = f"REF {_short(input_ref)} but reference has {_short(genome_ref)}"
        return RowCheck(ref_chrom, variant_type, "ref_mismatch", reason, pos, ref, alt, True)
    if skip_reason:
        return RowCheck(ref_chrom, variant_type, "skipped", skip_reason, pos, ref, alt, True)
    return RowCheck(ref_chrom, variant_type, "ok", "", pos, ref, alt, True)


def _unmapped_reasons(contigs: list[str], mapping: Mapping[str, str], reference: Reference):
    reasons = {}
    for contig in contigs:
        if contig in mapping:
            continue
        hits = alias_candidates(contig, reference.contigs)
        reasons[contig] = (
            f"contig {contig!r} matches several reference contigs {hits}"
            if hits
            else f"contig {contig!r} not in the reference under any alias"
        )
    return reasons


def _concordance(checked: list[tuple[str, int, str]], reference: Reference, shift: int) -> float:
    """Share of REF-checked rows whose input REF equals the reference at POS + shift."""
    hits = 0
    for ref_chrom, pos, ref in checked:
        start = pos - 1 + shift
        hits += reference.fetch(ref_chrom, start, start + len(ref)) == ref
    return hits / len(checked)


def contig_length_mismatches(
    declared: Mapping[str, int], mapping: Mapping[str, str], reference: Reference
) -> list[str]:
    """Panel contigs whose length in the VCF header differs from the reference's."""
    return [
        f"{contig} is {declared[contig]:,} bp in the panel header but {ref_chrom} is "
        f"{reference.lengths[ref_chrom]:,} bp in the reference"
        for contig, ref_chrom in sorted(mapping.items())
        if declared.get(contig) and declared[contig] != reference.lengths[ref_chrom]
    ]


def _build_hint(policy: CheckPolicy, reference: Reference) -> str:
    declared = f"the dataset declares build {policy.build}; " if policy.build else ""
    return (
        f" {declared}point `reference` at the FASTA of the panel's build, or lift the panel "
        f"over to the build of {reference.path.name} (e.g. CrossMap, Picard LiftoverVcf)."
    )


def _assert_build_matches(
    checked: list[tuple[str, int, str]],
    observed: float | None,
    reference: Reference,
    policy: CheckPolicy,
    source: str,
    header_mismatches: Sequence[str],
) -> None:
    """Abort when REF concordance (or the VCF header) says the panel is on another build or
    0-based."""
    measured = len(checked) >= policy.min_rows_for_concordance
    if measured and observed is not None and observed >= policy.min_ref_concordance:
        return  # enough REF alleles match: a header disagreeing is only a note in the summary
    if not measured:
        if header_mismatches:
            message = (
                f"the panel header's contig lengths disagree with {reference.path}: "
                f"{'; '.join(header_mismatches[:3])}; panel and genome builds differ?"
            )
            raise PanelUnusableError(source, message + _build_hint(policy, reference))
        return
    message = (
        f"REF matches {observed:.0%} of {len(checked)} rows against {reference.path} "
        f"(minimum {policy.min_ref_concordance:.0%}); panel and genome builds differ?"
    )
    if header_mismatches:
        message += f" The panel header agrees: {'; '.join(header_mismatches[:3])}."
    shifted = {shift: _concordance(checked, reference, shift) for shift in (1, -1)}
    best_shift = max(shifted, key=lambda s: shifted[s])
    if shifted[best_shift] >= policy.min_ref_concordance:
        hint = "0-based (BED-style)" if best_shift == 1 else "off by one the other way"
        message += (
            f" REF matches {shifted[best_shift]:.0%} at POS{best_shift:+d}: the positions look "
            f"{hint}; add {best_shift} to POS to make them 1-based."
        )
        raise PanelUnusableError(source, message)
    raise PanelUnusableError(source, message + _build_hint(policy, reference))


def _panel_source(panel: pl.DataFrame) -> str:
    """The panel file, from the first row's `file:line N`."""
    return panel["source"][0].rsplit(":", 1)[0] if panel.height else "panel"


def check_panel(
    panel: pl.DataFrame,
    reference: Reference,
    policy: CheckPolicy | None = None,
    header_mismatches: Sequence[str] = (),
) -> pl.DataFrame:
    """Add ref_chrom, variant_type, status, reason, duplicate_of and label_conflict to every
    panel row (none dropped); pos / ref / alt become the checked (trimmed, upper-case) form.

    `header_mismatches` (from `contig_length_mismatches`) abort the run unless enough REF
    alleles match to vouch for the panel.
    """
    policy = policy or CheckPolicy()
    if policy.indel_policy not in INDEL_POLICIES:
        raise ValueError(f"indel_policy must be one of {INDEL_POLICIES}")
    source = _panel_source(panel)
    panel = _with_input_columns(panel)
    contigs = panel["chrom"].drop_nulls().unique().sort().to_list()
    mapping = resolve_contigs(contigs, reference.contigs)
    if contigs and not mapping:
        raise PanelUnusableError(
            source,
            f"no panel contig matches the reference {reference.path}: panel uses "
            f"{contigs[:5]}, reference has {reference.contigs[:5]}; rename the panel's contigs "
            "or use the FASTA they come from",
        )
    unmapped = _unmapped_reasons(contigs, mapping, reference)
    results = [
        _row_check(row, mapping, unmapped, reference)
        for row in panel.select("chrom", "pos", "ref", "alt", "input_pos").iter_rows(named=True)
    ]
    checked_rows = [
        (r.ref_chrom, row_pos, row_ref.strip().upper())
        for r, row_pos, row_ref in zip(results, panel["pos"], panel["ref"], strict=True)
        if r.ref_checked
    ]
    observed = None
    if checked_rows:
        observed = sum(r.status != "ref_mismatch" for r in results if r.ref_checked) / len(
            checked_rows
        )
    _assert_build_matches(checked_rows, observed, reference, policy, source, header_mismatches)
    checked = panel.with_columns(
        pl.Series("pos", [r.pos for r in results], dtype=pl.Int64),
        pl.Series("ref", [r.ref for r in results], dtype=pl.Utf8),
        pl.Series("alt", [r.alt for r in results], dtype=pl.Utf8),
        pl.Series("ref_chrom", [r.ref_chrom for r in results], dtype=pl.Utf8),
        pl.Series("variant_type", [r.variant_type for r in results], dtype=pl.Utf8),
        pl.Series("status", [r.status for r in results], dtype=pl.Utf8),
        pl.Series("reason", [r.reason for r in results], dtype=pl.Utf8),
    )
    checked = flag_duplicates(checked, policy.label_column)
    _assert_something_scoreable(checked, source)
    return checked


def _with_input_columns(panel: pl.DataFrame) -> pl.DataFrame:
    """Panels built in code may lack input_*: they are the key values as given."""
    missing = {
        "input_pos": pl.col("pos").cast(pl.Utf8),
        "input_ref": pl.col("ref").cast(pl.Utf8),
        "input_alt": pl.col("alt").cast(pl.Utf8),
    }
    return panel.with_columns(
        [expr.alias(name) for name, expr in missing.items() if name not in panel.columns]
    )


def flag_duplicates(checked: pl.DataFrame, label_column: str | None) -> pl.DataFrame:
    """`duplicate_of`: row_id of the key's first row (null on that row and on unique keys);
    `n_copies_in_panel`: rows of the same variant (1 for a row without a usable key);
    `label_conflict`: the key's rows carry different labels (or a label was conflicted already).

    One key for all three: the contig as aliased to the reference (`chr1` and `1` are one
    variant), else as written. Duplicates are kept and, when scoreable, scored once;
    conflicted rows are left out of metrics.
    """
    key = [pl.coalesce("ref_chrom", "chrom"), pl.col("pos"), pl.col("ref"), pl.col("alt")]
    has_key = pl.col("chrom").is_not_null() & pl.col("pos").is_not_null()
    first = pl.col("row_id").min().over(key)
    duplicate_of = pl.when(has_key & (pl.col("row_id") != first)).then(first)
    conflict = pl.lit(False)
    if label_column and label_column in checked.columns:
        n_labels = pl.col(label_column).cast(pl.Utf8).drop_nulls().n_unique().over(key)
        conflict = has_key & (n_labels > 1)
    if "label_conflict" in checked.columns:
        conflict = conflict | pl.col("label_conflict").fill_null(False)
    copies = pl.when(has_key).then(pl.len().over(key)).otherwise(1)
    return checked.with_columns(
        duplicate_of.otherwise(None).cast(pl.Int64).alias("duplicate_of"),
        conflict.alias("label_conflict"),
        copies.cast(pl.UInt32).alias("n_copies_in_panel"),
    )


def _assert_something_scoreable(checked: pl.DataFrame, source: str) -> None:
    if (checked["status"] == "ok").any():
        return
    reasons = Counter(f"{s}: {r}" for s, r in checked.select("status", "reason").iter_rows())
    top = "; ".join(f"{n} × {reason}" for reason, n in reasons.most_common(4))
    raise PanelUnusableError(
        source, f"none of the {checked.height} rows can be scored ({top}); nothing to score"
    )


def ref_concordance(checked: pl.DataFrame) -> float | None:
    """Share of REF-checked rows whose REF matched (None when no row was checked)."""
    checked_rows = checked.filter(
        pl.col("status").is_in(_REF_CHECKED)
        | ((pl.col("status") == "skipped") & pl.col("variant_type").is_in(["mnv", "indel"]))
    )
    if checked_rows.height == 0:
        return None
    return float((checked_rows["status"] != "ref_mismatch").mean())


def summarize(checked: pl.DataFrame, panel_path: str | Path, notes: Sequence[str] = ()) -> dict:
    """Counts of every status (they add up to the number of input rows) and what was mapped."""
    counts = Counter(checked["status"].to_list())
    aliased = (
        checked.filter(pl.col("ref_chrom").is_not_null() & (pl.col("ref_chrom") != pl.col("chrom")))
        .select("chrom", "ref_chrom")
        .unique()
    )
    reasons = Counter(r for r in checked.filter(pl.col("status") != "ok")["reason"].to_list() if r)
    summary = {
        "panel": str(panel_path),
        "n_rows": checked.height,
        "status_counts": dict(sorted(counts.items())),
        "variant_type_counts": dict(sorted(Counter(checked["variant_type"].to_list()).items())),
        "top_reasons": dict(reasons.most_common(20)),
        "contig_aliases": {r["chrom"]: r["ref_chrom"] for r in aliased.to_dicts()},
        "n_scoreable": counts.get("ok", 0),
        "ref_concordance": ref_concordance(checked),
        "n_duplicate_rows": int(checked["duplicate_of"].is_not_null().sum())
        if "duplicate_of" in checked.columns
        else 0,
        "n_label_conflicts": int(checked["label_conflict"].sum())
        if "label_conflict" in checked.columns
        else 0,
        "notes": list(notes),
    }
    if sum(counts.values()) != checked.height:  # cannot happen; guards the promise above
        raise AssertionError("status counts do not add up to the rows")
    return summary
