"""The allele policy of a panel check, as polars expressions over a batch of rows.

Alleles are upper-cased; bases shared at the end and then at the start of REF and ALT are
trimmed as `bcftools norm` does (without left-alignment), so a padded SNV such as `AT>GT` from a
multi-allelic caller record becomes `A>G` and is scored; `input_*` keep the values read.
Symbolic, star and missing ALTs (`<DEL>`, `*`, `<NON_REF>`, `.`), breakends, non-ACGT alleles (N,
IUPAC codes, and MAF/ANNOVAR's `-` for an empty allele, with a reason of its own) and ALT = REF
are classified with the reason they are not scored, as are indels and MNVs (`indel_policy:
skip`: an MNV is never split into SNVs whose scores would have to be combined into one row's
score). A symbolic ALT keeps its case (a breakend names a contig). Rows without a usable key
(CHROM, integer POS, REF) are invalid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

ACGT = frozenset("ACGT")
_DASH_REASON = (
    "): '-' is MAF/ANNOVAR's empty allele; write the variant VCF-style, with its anchor base "
    "(SNVs only are scored)"
)
_NON_ACGT_REASON = "): N and IUPAC codes are not scored"


def trim_alleles(pos: int, ref: str, alt: str) -> tuple[int, str, str]:
    """Drop bases shared at the end, then at the start, keeping at least one base each."""
    while len(ref) > 1 and len(alt) > 1 and ref[-1] == alt[-1]:
        ref, alt = ref[:-1], alt[:-1]
    while len(ref) > 1 and len(alt) > 1 and ref[0] == alt[0]:
        ref, alt, pos = ref[1:], alt[1:], pos + 1
    return pos, ref, alt


def short_allele(allele: str) -> str:
    """An allele as shown in a reason: long ones abbreviated with their length."""
    return allele if len(allele) <= 12 else f"{allele[:10]}...({len(allele)} bp)"


def classify(ref: str, alt: str) -> tuple[str, str]:
    """(variant_type, skip reason or '') of upper-cased, trimmed alleles."""
    if alt in (".", "*", "") or alt.startswith("<") or "[" in alt or "]" in alt:
        return "symbolic", f"symbolic, star or missing ALT {short_allele(alt)!r}"
    if not set(ref) <= ACGT or not set(alt) <= ACGT:
        alleles = f"{short_allele(ref)}>{short_allele(alt)}"
        why = _DASH_REASON if "-" in (ref, alt) else _NON_ACGT_REASON
        return "non_acgt", f"non-ACGT allele ({alleles}{why}"
    if ref == alt:
        return "no_change", "ALT equals REF"
    if len(ref) == 1 and len(alt) == 1:
        return "snv", ""
    if len(ref) == len(alt):
        return "mnv", f"MNV of {len(ref)} bp (indel_policy skip: SNVs only are scored)"
    size = abs(len(ref) - len(alt))
    kind = "deletion" if len(ref) > len(alt) else "insertion"
    return "indel", f"{kind} of {size} bp (indel_policy skip: SNVs only are scored)"


def short_allele_expr(allele: pl.Expr) -> pl.Expr:
    """`short_allele` as a polars expression."""
    n = allele.str.len_chars()
    return (
        pl.when(n <= 12)
        .then(allele)
        .otherwise(pl.concat_str(allele.str.slice(0, 10), pl.lit("...("), n, pl.lit(" bp)")))
    )


def _classify_exprs(ref: pl.Expr, alt: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """`classify` as polars expressions (variant_type, skip reason), except the symbolic
    reason, which quotes the allele as Python does and is filled in by `_symbolic_reasons`."""
    n_ref, n_alt = ref.str.len_chars(), alt.str.len_chars()
    symbolic = (
        alt.is_in([".", "*", ""])
        | alt.str.starts_with("<")
        | alt.str.contains("[", literal=True)
        | alt.str.contains("]", literal=True)
    )
    non_acgt = ~ref.str.contains("^[ACGT]*$") | ~alt.str.contains("^[ACGT]*$")
    dash = (ref == "-") | (alt == "-")
    snv = (n_ref == 1) & (n_alt == 1)
    policy = pl.lit(" (indel_policy skip: SNVs only are scored)")
    variant_type = (
        pl.when(symbolic)
        .then(pl.lit("symbolic"))
        .when(non_acgt)
        .then(pl.lit("non_acgt"))
        .when(ref == alt)
        .then(pl.lit("no_change"))
        .when(snv)
        .then(pl.lit("snv"))
        .when(n_ref == n_alt)
        .then(pl.lit("mnv"))
        .otherwise(pl.lit("indel"))
    )
    size = (n_ref.cast(pl.Int64) - n_alt.cast(pl.Int64)).abs()
    kind = pl.when(n_ref > n_alt).then(pl.lit("deletion")).otherwise(pl.lit("insertion"))
    reason = (
        pl.when(symbolic)
        .then(pl.lit(None, dtype=pl.Utf8))
        .when(non_acgt)
        .then(
            pl.concat_str(
                pl.lit("non-ACGT allele ("),
                short_allele_expr(ref),
                pl.lit(">"),
                short_allele_expr(alt),
                pl.when(dash).then(pl.lit(_DASH_REASON)).otherwise(pl.lit(_NON_ACGT_REASON)),
            )
        )
        .when(ref == alt)
        .then(pl.lit("ALT equals REF"))
        .when(snv)
        .then(pl.lit(""))
        .when(n_ref == n_alt)
        .then(pl.concat_str(pl.lit("MNV of "), n_ref, pl.lit(" bp"), policy))
        .otherwise(pl.concat_str(kind, pl.lit(" of "), size, pl.lit(" bp"), policy))
    )
    return variant_type, reason


def python_text(values: pl.Series, render: Callable[[Any], str]) -> pl.Series:
    """`render` applied to each distinct value (texts quoted the way Python quotes them)."""
    distinct = {v: render(v) for v in values.drop_nulls().unique().to_list()}
    out = values.replace_strict(distinct, default=None, return_dtype=pl.Utf8)
    return out.fill_null(render(None)) if values.null_count() else out


def scatter(column: pl.Series, where: pl.Series, values: pl.Series) -> pl.Series:
    """`column` with the rows where `where` is true replaced by `values` (in row order)."""
    if values.len() == 0:
        return column
    out = column.clone()
    out.scatter(where.arg_true(), values)
    return out


def _trimmed(frame: pl.DataFrame, valid: pl.Series) -> tuple[pl.Series, pl.Series, pl.Series]:
    """(pos, ref, alt) after `trim_alleles`; only rows with two multi-base alleles can change,
    so only those go through Python."""
    both_long = valid & (frame["ref"].str.len_chars() > 1) & (frame["alt"].str.len_chars() > 1)
    rows = frame.filter(both_long).select("pos", "ref", "alt").rows()
    trimmed = [trim_alleles(pos, ref, alt) for pos, ref, alt in rows]
    return (
        scatter(frame["pos"], both_long, pl.Series([t[0] for t in trimmed], dtype=pl.Int64)),
        scatter(frame["ref"], both_long, pl.Series([t[1] for t in trimmed], dtype=pl.Utf8)),
        scatter(frame["alt"], both_long, pl.Series([t[2] for t in trimmed], dtype=pl.Utf8)),
    )


def normalized_alleles(panel: pl.DataFrame) -> pl.DataFrame:
    """The key columns typed, alleles stripped and upper-cased, an empty ALT as `.`;
    `written_alt` is the ALT stripped only (a symbolic ALT keeps its case)."""
    upper = pl.col("ref").cast(pl.Utf8).fill_null("").str.strip_chars().str.to_uppercase()
    written = pl.col("alt").cast(pl.Utf8).fill_null("").str.strip_chars()
    return panel.select(
        pl.col("chrom").cast(pl.Utf8),
        pl.col("pos").cast(pl.Int64),
        upper.alias("ref"),
        pl.when(written == "").then(pl.lit(".")).otherwise(written.str.to_uppercase()).alias("alt"),
        pl.when(written == "").then(pl.lit(".")).otherwise(written).alias("written_alt"),
        pl.col("input_pos").cast(pl.Utf8),
    )


def invalid_rows(frame: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """(invalid, reason): rows with no usable key (no CHROM, a POS that is no integer, no REF)."""
    no_chrom = frame["chrom"].is_null() | (frame["chrom"].str.strip_chars() == "")
    no_pos = ~no_chrom & frame["pos"].is_null()
    no_ref = ~no_chrom & ~no_pos & frame["ref"].is_in(["", "."])
    pos_reasons = python_text(
        frame["input_pos"].filter(no_pos),
        lambda raw: "missing POS" if raw in (None, "", ".") else f"POS {raw!r} is not an integer",
    )
    reason = pl.repeat(None, frame.height, dtype=pl.Utf8, eager=True)
    reason = scatter(reason, no_chrom, pl.repeat("missing CHROM", no_chrom.sum(), eager=True))
    reason = scatter(reason, no_pos, pos_reasons)
    reason = scatter(reason, no_ref, pl.repeat("missing REF", no_ref.sum(), eager=True))
    return no_chrom | no_pos | no_ref, reason


def allele_policy(frame: pl.DataFrame, invalid: pl.Series, reason: pl.Series) -> pl.DataFrame:
    """The trimmed alleles (`short_*`), the variant type and why a type is not scored."""
    short_pos, short_ref, short_alt = _trimmed(frame, ~invalid)
    work = frame.with_columns(
        short_pos.alias("short_pos"),
        short_ref.alias("short_ref"),
        short_alt.alias("short_alt"),
        invalid.alias("invalid"),
        reason.alias("invalid_reason"),
    )
    variant_type, skip_reason = _classify_exprs(pl.col("short_ref"), pl.col("short_alt"))
    work = work.with_columns(
        pl.when("invalid").then(pl.lit("invalid")).otherwise(variant_type).alias("variant_type"),
        skip_reason.alias("skip_reason"),
    )
    symbolic = work["variant_type"] == "symbolic"
    # a breakend's mate contig (`C[chr17:500[`) is a name: shown and kept as written
    written = work["written_alt"].filter(symbolic)
    return work.with_columns(
        scatter(
            work["skip_reason"],
            symbolic,
            python_text(written, lambda a: f"symbolic, star or missing ALT {short_allele(a)!r}"),
        ).alias("skip_reason"),
        scatter(work["alt"], symbolic, written).alias("alt"),
    )
