"""Check each panel variant against the reference and give every row a status and a reason.

Rows are never dropped: a row that cannot be scored keeps its place with a status other than
`ok`. A panel that is unusable as a whole (wrong build, 0-based coordinates, contigs that match
nothing, nothing scoreable) raises `PanelUnusableError` before any scoring job starts; when
nothing is scoreable, `NothingScoreableError` (a `PanelUnusableError`) carries the checked
table, so that each row's status can still be written.

The checks are vectorised (polars expressions; REF is compared with the genome a 1 Mb block
at a time) and run a batch of rows at a time (`PanelCheck`), so that a ClinVar-size panel never
has to be in memory whole; `check_panel` checks an in-memory panel as one batch.

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep.columns import Status
from carbon_vep.config.fields import default_of
from carbon_vep.config.run import setting_name
from carbon_vep.config.stages import LabelSettings, PanelSettings
from carbon_vep.errors import PanelUnusableError
from carbon_vep.genome.contigs import alias_candidates, resolve_contigs
from carbon_vep.genome.reference import Reference

ACGT = frozenset("ACGT")
INDEL_POLICIES = ("skip",)
_PANEL_DEFAULTS = {f.name: default_of(f) for f in fields(PanelSettings)}
_REF_CHECKED = (Status.OK.value, Status.REF_MISMATCH.value)


@dataclass(frozen=True)
class CheckPolicy:
    """What `check_panel` needs of a dataset's settings (defaults: `PanelSettings`'s)."""

    min_ref_concordance: float = _PANEL_DEFAULTS["min_ref_concordance"]
    indel_policy: str = _PANEL_DEFAULTS["indel_policy"]
    label_column: str | None = None  # duplicates whose labels differ get label_conflict
    build: str | None = None  # the dataset's declared build, named in error messages
    min_rows_for_concordance: int = 20  # fewer SNVs whose REF was checked prove nothing

    @classmethod
    def from_settings(cls, panel: PanelSettings, labels: LabelSettings) -> CheckPolicy:
        return cls(
            min_ref_concordance=panel.min_ref_concordance,
            indel_policy=panel.indel_policy,
            label_column=labels.column,
            build=panel.build,
        )


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


def _short_expr(allele: pl.Expr) -> pl.Expr:
    """`_short` as a polars expression."""
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
    snv = (n_ref == 1) & (n_alt == 1)
    policy = pl.lit(" (indel_policy skip: SNVs only are scored)")
    variant_type = (
        pl.when(symbolic).then(pl.lit("symbolic"))
        .when(non_acgt).then(pl.lit("non_acgt"))
        .when(ref == alt).then(pl.lit("no_change"))
        .when(snv).then(pl.lit("snv"))
        .when(n_ref == n_alt).then(pl.lit("mnv"))
        .otherwise(pl.lit("indel"))
    )  # fmt: skip
    size = (n_ref.cast(pl.Int64) - n_alt.cast(pl.Int64)).abs()
    kind = pl.when(n_ref > n_alt).then(pl.lit("deletion")).otherwise(pl.lit("insertion"))
    reason = (
        pl.when(symbolic).then(pl.lit(None, dtype=pl.Utf8))
        .when(non_acgt).then(pl.concat_str(
            pl.lit("non-ACGT allele ("), _short_expr(ref), pl.lit(">"), _short_expr(alt),
            pl.lit("): N and IUPAC codes are not scored")))
        .when(ref == alt).then(pl.lit("ALT equals REF"))
        .when(snv).then(pl.lit(""))
        .when(n_ref == n_alt).then(pl.concat_str(pl.lit("MNV of "), n_ref, pl.lit(" bp"), policy))
        .otherwise(pl.concat_str(kind, pl.lit(" of "), size, pl.lit(" bp"), policy))
    )  # fmt: skip
    return variant_type, reason


def _python_text(values: pl.Series, render: Callable[[Any], str]) -> pl.Series:
    """`render` applied to each distinct value (texts quoted the way Python quotes them)."""
    distinct = {v: render(v) for v in values.drop_nulls().unique().to_list()}
    out = values.replace_strict(distinct, default=None, return_dtype=pl.Utf8)
    return out.fill_null(render(None)) if values.null_count() else out


def _scatter(column: pl.Series, where: pl.Series, values: pl.Series) -> pl.Series:
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
        _scatter(frame["pos"], both_long, pl.Series([t[0] for t in trimmed], dtype=pl.Int64)),
        _scatter(frame["ref"], both_long, pl.Series([t[1] for t in trimmed], dtype=pl.Utf8)),
        _scatter(frame["alt"], both_long, pl.Series([t[2] for t in trimmed], dtype=pl.Utf8)),
    )


_FETCH_BLOCK_BP = 1 << 20  # rows are looked up in the reference a block of this size at a time
_SPARSE_BP_PER_ROW = 2_000  # ... unless they are sparser than this: then one fetch per row


def reference_bases(
    reference: Reference, contig: pl.Series, start: pl.Series, end: pl.Series
) -> pl.Series:
    """`reference.fetch(contig[i], start[i], end[i])` for every row (0-based, half-open,
    clipped to the contig; null where contig is null), fetching each 1 Mb block of the genome
    that holds rows once rather than once per row (rows sparser than one per 2 kb are fetched
    one by one: an unsorted panel does not read whole blocks for a row or two each)."""
    frame = (
        pl.DataFrame({"contig": contig, "start": start, "end": end})
        .with_row_index("row")
        .filter(pl.col("contig").is_not_null())
    )
    out: list[str | None] = [None] * contig.len()
    for (name,), rows in frame.group_by("contig"):
        length = reference.lengths[str(name)]
        rows = rows.with_columns(
            pl.col("start").clip(0, length), pl.col("end").clip(0, length)
        ).with_columns(pl.max_horizontal("start", "end").alias("end"))
        long = rows.filter(pl.col("end") - pl.col("start") > _FETCH_BLOCK_BP)
        for row, a, b in long.select("row", "start", "end").iter_rows():
            out[row] = reference.fetch(str(name), a, b)
        blocks = (
            rows.filter(pl.col("end") - pl.col("start") <= _FETCH_BLOCK_BP)
            .group_by((pl.col("start") // _FETCH_BLOCK_BP).alias("block"))
            .agg("row", "start", "end", pl.col("start").min().alias("lo"),
                 pl.col("end").max().alias("hi"))
        )  # fmt: skip
        for _, row_ids, starts, ends, lo, hi in blocks.iter_rows():
            if hi - lo > _SPARSE_BP_PER_ROW * len(row_ids):  # a few rows far apart
                for row, a, b in zip(row_ids, starts, ends, strict=True):
                    out[row] = reference.fetch(str(name), a, b)
                continue
            sequence = reference.fetch(str(name), lo, hi)
            for row, a, b in zip(row_ids, starts, ends, strict=True):
                out[row] = sequence[a - lo : b - lo]
    return pl.Series(out, dtype=pl.Utf8)


# Working columns a checked batch carries until the whole panel is checked: whether REF was
# compared with the genome, and the position and REF as compared (for the build check).
REF_CHECKED, CHECKED_POS, CHECKED_REF = (
    "_cvep_ref_checked",
    "_cvep_checked_pos",
    "_cvep_checked_ref",
)
WORKING_COLUMNS = (REF_CHECKED, CHECKED_POS, CHECKED_REF)


def _check_rows(
    panel: pl.DataFrame,
    mapping: Mapping[str, str],
    unmapped: Mapping[str, str],
    reference: Reference,
) -> pl.DataFrame:
    """Every row's checked key, variant type, status and reason (see the module docstring),
    and the `WORKING_COLUMNS`."""
    frame = _normalized_alleles(panel)
    work = _allele_policy(frame, *_invalid_rows(frame))
    work = _against_reference(work, mapping, unmapped, reference)
    return _with_status(work)


def _normalized_alleles(panel: pl.DataFrame) -> pl.DataFrame:
    """The key columns typed, alleles stripped and upper-cased, an empty ALT as `.`."""
    upper = pl.col("ref").cast(pl.Utf8).fill_null("").str.strip_chars().str.to_uppercase()
    alt = pl.col("alt").cast(pl.Utf8).fill_null("").str.strip_chars().str.to_uppercase()
    return panel.select(
        pl.col("chrom").cast(pl.Utf8),
        pl.col("pos").cast(pl.Int64),
        upper.alias("ref"),
        pl.when(alt == "").then(pl.lit(".")).otherwise(alt).alias("alt"),
        pl.col("input_pos").cast(pl.Utf8),
    )


def _invalid_rows(frame: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """(invalid, reason): rows with no usable key (no CHROM, a POS that is no integer, no REF)."""
    no_chrom = frame["chrom"].is_null() | (frame["chrom"].str.strip_chars() == "")
    no_pos = ~no_chrom & frame["pos"].is_null()
    no_ref = ~no_chrom & ~no_pos & frame["ref"].is_in(["", "."])
    pos_reasons = _python_text(
        frame["input_pos"].filter(no_pos),
        lambda raw: "missing POS" if raw in (None, "", ".") else f"POS {raw!r} is not an integer",
    )
    reason = pl.repeat(None, frame.height, dtype=pl.Utf8, eager=True)
    reason = _scatter(reason, no_chrom, pl.repeat("missing CHROM", no_chrom.sum(), eager=True))
    reason = _scatter(reason, no_pos, pos_reasons)
    reason = _scatter(reason, no_ref, pl.repeat("missing REF", no_ref.sum(), eager=True))
    return no_chrom | no_pos | no_ref, reason


def _allele_policy(frame: pl.DataFrame, invalid: pl.Series, reason: pl.Series) -> pl.DataFrame:
    """The trimmed alleles (`short_*`), the variant type and why a type is not scored."""
    short_pos, short_ref, short_alt = _trimmed(frame, ~invalid)
    work = frame.with_columns(
        short_pos.alias("short_pos"), short_ref.alias("short_ref"), short_alt.alias("short_alt"),
        invalid.alias("invalid"), reason.alias("invalid_reason"),
    )  # fmt: skip
    variant_type, skip_reason = _classify_exprs(pl.col("short_ref"), pl.col("short_alt"))
    work = work.with_columns(
        pl.when("invalid").then(pl.lit("invalid")).otherwise(variant_type).alias("variant_type"),
        skip_reason.alias("skip_reason"),
    )
    symbolic = work["variant_type"] == "symbolic"
    return work.with_columns(
        _scatter(
            work["skip_reason"], symbolic,
            _python_text(work["short_alt"].filter(symbolic),
                         lambda a: f"symbolic, star or missing ALT {_short(a)!r}"),
        ).alias("skip_reason")
    )  # fmt: skip


def _against_reference(
    work: pl.DataFrame,
    mapping: Mapping[str, str],
    unmapped: Mapping[str, str],
    reference: Reference,
) -> pl.DataFrame:
    """The contig in the reference (`ref_chrom`), bounds of the allele as given, and the genome's
    bases where REF is compared (`genome`, `ref_checked`)."""
    lengths = {c: reference.lengths[r] for c, r in mapping.items()}
    work = work.with_columns(
        pl.when(~pl.col("invalid"))
        .then(pl.col("chrom").replace_strict(dict(mapping), default=None, return_dtype=pl.Utf8))
        .alias("ref_chrom"),
        pl.col("chrom").replace_strict(lengths, default=None, return_dtype=pl.Int64)
        .alias("length"),
        (pl.col("pos") + pl.col("ref").str.len_chars().cast(pl.Int64) - 1).alias("end"),
    ).with_columns(
        ((pl.col("pos") < 1) | (pl.col("end") > pl.col("length"))).alias("out_of_bounds"),
    )  # fmt: skip
    unknown = ~work["invalid"] & work["ref_chrom"].is_null()
    unknown_reason = _python_text(work["chrom"].filter(unknown), lambda c: unmapped[c])
    compare = (
        ~work["invalid"]
        & ~unknown
        & ~work["out_of_bounds"].fill_null(True)
        & ~work["variant_type"].is_in(["symbolic", "non_acgt", "no_change"])
    )
    looked_up = work.filter(compare)
    genome = reference_bases(
        reference, looked_up["ref_chrom"], looked_up["pos"] - 1, looked_up["end"]
    )
    no_text = pl.repeat(None, work.height, dtype=pl.Utf8, eager=True)
    return work.with_columns(
        _scatter(no_text, compare, genome).alias("genome"),
        _scatter(no_text, unknown, unknown_reason).alias("unknown_reason"),
        compare.alias("ref_checked"),
    )


def _with_status(work: pl.DataFrame) -> pl.DataFrame:
    """The checked rows: key (an SNV in its trimmed form), variant type, status, reason."""
    mismatch = pl.col("ref_checked") & (pl.col("genome") != pl.col("ref"))
    status = (
        pl.when("invalid").then(pl.lit(Status.INVALID.value))
        .when(pl.col("ref_chrom").is_null()).then(pl.lit(Status.UNKNOWN_CONTIG.value))
        .when("out_of_bounds").then(pl.lit(Status.OUT_OF_BOUNDS.value))
        .when(~pl.col("ref_checked")).then(pl.lit(Status.SKIPPED.value))
        .when(mismatch).then(pl.lit(Status.REF_MISMATCH.value))
        .when(pl.col("skip_reason") != "").then(pl.lit(Status.SKIPPED.value))
        .otherwise(pl.lit(Status.OK.value))
    )  # fmt: skip
    reason = (
        pl.when("invalid").then("invalid_reason")
        .when(pl.col("ref_chrom").is_null()).then("unknown_reason")
        .when("out_of_bounds").then(pl.format(
            "POS {}-{} outside {}:1-{}", "pos", "end", "ref_chrom", "length"))
        .when(mismatch).then(pl.concat_str(
            pl.lit("REF "), _short_expr(pl.col("ref")), pl.lit(" but reference has "),
            _short_expr(pl.col("genome"))))
        .otherwise("skip_reason")
    )  # fmt: skip
    snv = pl.col("variant_type") == "snv"  # reported (and scored) in its trimmed form
    return work.select(
        pl.when(snv).then("short_pos").otherwise("pos").alias("pos"),
        pl.when(snv).then("short_ref").otherwise("ref").alias("ref"),
        pl.when(snv).then("short_alt").otherwise("alt").alias("alt"),
        "ref_chrom",
        "variant_type",
        status.alias("status"),
        reason.alias("reason"),
        pl.col("ref_checked").alias(REF_CHECKED),
        pl.col("pos").alias(CHECKED_POS),
        pl.col("ref").alias(CHECKED_REF),
    )


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


def _concordance(checked: pl.DataFrame, reference: Reference, shift: int) -> float:
    """Share of REF-checked rows (ref_chrom, CHECKED_POS, CHECKED_REF) whose input REF equals
    the reference at POS + shift."""
    ref = checked[CHECKED_REF]
    start = checked[CHECKED_POS] - 1 + shift
    genome = reference_bases(reference, checked["ref_chrom"], start, start + ref.str.len_chars())
    return float((genome == ref).mean())


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
        f" {declared}point {setting_name('reference')} at the FASTA of the panel's build, or "
        "lift the panel "
        f"over to the build of {reference.path.name} (e.g. CrossMap, Picard LiftoverVcf)."
    )


def _assert_build_matches(
    n_checked: int,
    observed: float | None,
    checked_rows: Callable[[], pl.DataFrame],
    reference: Reference,
    policy: CheckPolicy,
    source: str,
    header_mismatches: Sequence[str],
) -> None:
    """Abort when REF concordance (or the VCF header) says the panel is on another build or
    0-based. `checked_rows()` gives the REF-checked rows, read only when the panel fails."""
    measured = n_checked >= policy.min_rows_for_concordance
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
        f"REF matches {observed:.0%} of {n_checked} rows against {reference.path} "
        f"(minimum {policy.min_ref_concordance:.0%}); panel and genome builds differ?"
    )
    if header_mismatches:
        message += f" The panel header agrees: {'; '.join(header_mismatches[:3])}."
    rows = checked_rows()
    shifted = {shift: _concordance(rows, reference, shift) for shift in (1, -1)}
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


class PanelCheck:
    """The checks of one panel against a reference, fed a batch of rows at a time (so that a
    ClinVar-size panel is never in memory whole); `check_panel` feeds one batch.

    `rows(batch)` adds the per-row columns (and the `WORKING_COLUMNS`); once every batch is in,
    `assert_usable` stops a panel that is unusable as a whole.
    """

    def __init__(self, reference: Reference, policy: CheckPolicy | None, source: str) -> None:
        self.reference = reference
        self.policy = policy or CheckPolicy()
        if self.policy.indel_policy not in INDEL_POLICIES:
            raise ValueError(f"indel_policy must be one of {INDEL_POLICIES}")
        self.source = source
        self.contigs: set[str] = set()
        self.mapping: dict[str, str] = {}  # panel contig -> reference contig
        self.unmapped: dict[str, str] = {}  # panel contig -> why it has none
        self.n_checked = 0  # rows whose REF was compared with the genome
        self.n_mismatch = 0

    def rows(self, batch: pl.DataFrame) -> pl.DataFrame:
        """`batch` with ref_chrom, variant_type, status and reason added; pos / ref / alt
        become the checked (trimmed, upper-case) form; none dropped."""
        batch = _with_input_columns(batch)
        new = [c for c in batch["chrom"].cast(pl.Utf8).drop_nulls().unique().to_list()
               if c not in self.contigs]  # fmt: skip
        self.contigs.update(new)
        self.mapping.update(resolve_contigs(new, self.reference.contigs))
        self.unmapped.update(_unmapped_reasons(new, self.mapping, self.reference))
        checked = _check_rows(batch, self.mapping, self.unmapped, self.reference)
        self.n_checked += int(checked[REF_CHECKED].sum())
        self.n_mismatch += int((checked["status"] == Status.REF_MISMATCH).sum())
        return batch.with_columns(checked)

    def assert_usable(
        self, header_mismatches: Sequence[str], checked_rows: Callable[[], pl.DataFrame]
    ) -> None:
        """Stop a panel whose contigs match nothing in the reference, or whose REF alleles (or
        VCF header) say it is on another build or 0-based. `checked_rows()` gives the rows
        with ref_chrom and the `WORKING_COLUMNS` (read only when needed)."""
        contigs = sorted(self.contigs)
        if contigs and not self.mapping:
            raise PanelUnusableError(
                self.source,
                f"no panel contig matches the reference {self.reference.path}: panel uses "
                f"{contigs[:5]}, reference has {self.reference.contigs[:5]}; rename the panel's "
                "contigs or use the FASTA they come from",
            )
        observed = None
        if self.n_checked:
            observed = (self.n_checked - self.n_mismatch) / self.n_checked
        _assert_build_matches(
            self.n_checked, observed, lambda: checked_rows().filter(pl.col(REF_CHECKED)),
            self.reference, self.policy, self.source, header_mismatches,
        )  # fmt: skip


def check_panel(
    panel: pl.DataFrame,
    reference: Reference,
    policy: CheckPolicy | None = None,
    header_mismatches: Sequence[str] = (),
) -> pl.DataFrame:
    """Add ref_chrom, variant_type, status, reason, duplicate_of and label_conflict to every
    panel row (none dropped); pos / ref / alt become the checked (trimmed, upper-case) form.

    `header_mismatches` (from `contig_length_mismatches`) abort the run unless enough REF
    alleles match to vouch for the panel. When no row can be scored, `NothingScoreableError`
    carries the checked table.
    """
    check = PanelCheck(reference, policy, _panel_source(panel))
    checked = check.rows(panel)
    check.assert_usable(header_mismatches, lambda: checked)
    checked = flag_duplicates(checked.drop(WORKING_COLUMNS), check.policy.label_column)
    _assert_something_scoreable(checked, check.source)
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


def _duplicate_key() -> list[pl.Expr]:
    """What makes two rows the same variant: the contig (after aliasing), POS, REF, ALT."""
    return [pl.coalesce("ref_chrom", "chrom"), pl.col("pos"), pl.col("ref"), pl.col("alt")]


def duplicate_key_hash(checked: pl.DataFrame) -> pl.Series:
    """A 64-bit hash of each checked row's variant key: rows of one variant share it (rows
    that share it are candidates only; `flag_duplicates` compares the keys themselves)."""
    return checked.select(pl.struct(_duplicate_key()).hash().alias("key_hash")).to_series()


def flag_duplicates(checked: pl.DataFrame, label_column: str | None) -> pl.DataFrame:
    """`duplicate_of`: row_id of the key's first row (null on that row and on unique keys);
    `n_copies_in_panel`: rows of the same variant (1 for a row without a usable key);
    `label_conflict`: the key's rows carry different labels (or a label was conflicted already).

    One key for all three: the contig as aliased to the reference (`chr1` and `1` are one
    variant), else as written. Duplicates are kept and, when scoreable, scored once;
    conflicted rows are left out of metrics.
    """
    key = _duplicate_key()
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
        values.lazy().select(by).with_row_index("_first")
        .group_by(by).agg(pl.len().alias("_n"), pl.col("_first").min())
        .sort(["_n", "_first"], descending=[True, False])
    )  # fmt: skip
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


def _assert_something_scoreable(checked: pl.DataFrame, source: str) -> None:
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
        checked.lazy().select("status", "reason")
        .filter((pl.col("status") != Status.OK) & (pl.col("reason") != ""))
    )  # fmt: skip
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
        )  # fmt: skip
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
