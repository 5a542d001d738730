"""Check each panel variant against the reference and give every row a status and a reason.

Rows are never dropped: a row that cannot be scored keeps its place with a status other than
`ok`. A panel that is unusable as a whole (wrong build, 0-based coordinates, contigs that match
nothing or, through aliases, more than one reference contig, nothing scoreable) raises
`PanelUnusableError` before any scoring job starts; when nothing is scoreable,
`NothingScoreableError` (a `PanelUnusableError`) carries the checked table, so that each row's
status can still be written.

The checks are vectorised (polars expressions; REF is compared with the genome a 1 Mb block
at a time) and run a batch of rows at a time (`PanelCheck`), so that a ClinVar-size panel never
has to be in memory whole; `check_panel` checks an in-memory panel as one batch. The allele
policy is in `variants.alleles`, the build check in `variants.genome_match`, the summary in
`variants.summary`; REF is compared with the reference over its whole length (`ref_mismatch`
when it differs), after the allele policy and before an unscored type is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import polars as pl

from carbon_vep.columns import Status
from carbon_vep.config.stages import (
    commonest_label_values,
    label_classes,
    unmatched_label_counts,
)
from carbon_vep.errors import PanelUnusableError
from carbon_vep.genome.contigs import resolve_contigs
from carbon_vep.genome.reference import Reference
from carbon_vep.variants.alleles import (
    allele_policy,
    invalid_rows,
    normalized_alleles,
    python_text,
    scatter,
    short_allele_expr,
)
from carbon_vep.variants.genome_match import (
    CHECKED_POS,
    CHECKED_REF,
    REF_CHECKED,
    WORKING_COLUMNS,
    ambiguous_contigs,
    assert_build_matches,
    reference_bases,
    unmapped_reasons,
)
from carbon_vep.variants.policy import INDEL_POLICIES, CheckPolicy
from carbon_vep.variants.summary import assert_something_scoreable

log = logging.getLogger("carbon_vep")


def _check_rows(
    panel: pl.DataFrame,
    mapping: Mapping[str, str],
    unmapped: Mapping[str, str],
    reference: Reference,
) -> pl.DataFrame:
    """Every row's checked key, variant type, status and reason (see the module docstring),
    and the `WORKING_COLUMNS`."""
    frame = normalized_alleles(panel)
    work = allele_policy(frame, *invalid_rows(frame))
    work = _against_reference(work, mapping, unmapped, reference)
    return _with_status(work)


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
        pl.col("chrom")
        .replace_strict(lengths, default=None, return_dtype=pl.Int64)
        .alias("length"),
        (pl.col("pos") + pl.col("ref").str.len_chars().cast(pl.Int64) - 1).alias("end"),
    ).with_columns(
        ((pl.col("pos") < 1) | (pl.col("end") > pl.col("length"))).alias("out_of_bounds"),
    )
    unknown = ~work["invalid"] & work["ref_chrom"].is_null()
    unknown_reason = python_text(work["chrom"].filter(unknown), lambda c: unmapped[c])
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
        scatter(no_text, compare, genome).alias("genome"),
        scatter(no_text, unknown, unknown_reason).alias("unknown_reason"),
        compare.alias("ref_checked"),
    )


def _with_status(work: pl.DataFrame) -> pl.DataFrame:
    """The checked rows: key (an SNV in its trimmed form), variant type, status, reason."""
    mismatch = pl.col("ref_checked") & (pl.col("genome") != pl.col("ref"))
    status = (
        pl.when("invalid")
        .then(pl.lit(Status.INVALID.value))
        .when(pl.col("ref_chrom").is_null())
        .then(pl.lit(Status.UNKNOWN_CONTIG.value))
        .when("out_of_bounds")
        .then(pl.lit(Status.OUT_OF_BOUNDS.value))
        .when(~pl.col("ref_checked"))
        .then(pl.lit(Status.SKIPPED.value))
        .when(mismatch)
        .then(pl.lit(Status.REF_MISMATCH.value))
        .when(pl.col("skip_reason") != "")
        .then(pl.lit(Status.SKIPPED.value))
        .otherwise(pl.lit(Status.OK.value))
    )
    reason = (
        pl.when("invalid")
        .then("invalid_reason")
        .when(pl.col("ref_chrom").is_null())
        .then("unknown_reason")
        .when("out_of_bounds")
        .then(_outside_reason())
        .when(mismatch)
        .then(
            pl.concat_str(
                pl.lit("REF "),
                short_allele_expr(pl.col("ref")),
                pl.lit(" but reference has "),
                short_allele_expr(pl.col("genome")),
            )
        )
        .otherwise("skip_reason")
    )
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


def _outside_reason() -> pl.Expr:
    """`POS 3001 outside 1:1-3000`, or `POS 2999 to 3001 ...` for a longer REF (a range
    written `a-b` reads badly when the positions are negative: `-5--3`)."""
    span = (
        pl.when(pl.col("end") == pl.col("pos"))
        .then(pl.col("pos").cast(pl.Utf8))
        .otherwise(pl.format("{} to {}", "pos", "end"))
    )
    return pl.format("POS {} outside {}:1-{}", span, "ref_chrom", "length")


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
        self.ambiguous: dict[str, list[str]] = {}  # panel contig -> reference contigs it aliases
        self.n_checked = 0  # rows whose REF was compared with the genome
        self.n_mismatch = 0
        self.label_values = LabelValues(self.policy)

    def rows(self, batch: pl.DataFrame) -> pl.DataFrame:
        """`batch` with ref_chrom, variant_type, status and reason added; pos / ref / alt
        become the checked (trimmed, upper-case) form; none dropped."""
        batch = _with_input_columns(batch)
        new = [
            c
            for c in batch["chrom"].cast(pl.Utf8).drop_nulls().unique().to_list()
            if c not in self.contigs
        ]
        self.contigs.update(new)
        self.mapping.update(resolve_contigs(new, self.reference.contigs))
        self.unmapped.update(unmapped_reasons(new, self.mapping, self.reference))
        self.ambiguous.update(ambiguous_contigs(new, self.mapping, self.reference))
        checked = _check_rows(batch, self.mapping, self.unmapped, self.reference)
        self.n_checked += int(checked[REF_CHECKED].sum())
        self.n_mismatch += int((checked["status"] == Status.REF_MISMATCH).sum())
        if self.policy.label_column in batch.columns:
            self.label_values.add(batch[self.policy.label_column])
        return batch.with_columns(checked)

    def require_label_values(self) -> None:
        """Stop a panel whose label column holds values, none of them of either list (once
        every batch is in): every row would be unlabelled and the metrics empty after the
        whole scoring run (a table labelled `pathogenic` / `benign` against the defaults)."""
        values = self.label_values
        if values.matched or values.unmatched.is_empty():  # a label, or no value at all
            return
        from carbon_vep.config.run import setting_name

        policy = self.policy
        found, rest = commonest_label_values(values.unmatched, 5)
        more = f" and {'over ' * values.more_values}{rest} more" if rest else ""
        raise PanelUnusableError(
            self.source,
            f"label column {policy.label_column!r} ({setting_name('label_column')}) holds no "
            f"value of {setting_name('positive_labels')} {list(policy.positive_labels)} or "
            f"{setting_name('negative_labels')} {list(policy.negative_labels)}, so no row "
            f"would be labelled: its values are {found}{more}; list them under those settings",
        )

    def assert_usable(
        self, header_mismatches: Sequence[str], checked_rows: Callable[[], pl.DataFrame]
    ) -> list[str]:
        """Stop a panel with a contig that could be several reference contigs (the reference
        spells one chromosome two ways), whose contigs match nothing in the reference, or whose
        REF alleles (or VCF header) say it is on another build or 0-based. `checked_rows()`
        gives the rows with ref_chrom and the `WORKING_COLUMNS` (read only when needed).
        Returns notes for the summary (a build check too small to be conclusive)."""
        if self.ambiguous:
            which = "; ".join(
                f"panel contig {contig!r} could be any of {hits}"
                for contig, hits in sorted(self.ambiguous.items())[:5]
            )
            raise PanelUnusableError(
                self.source,
                f"contig names match more than one contig of the reference "
                f"{self.reference.path} ({which}); spell them in the panel exactly as the "
                "reference contig they are on",
            )
        contigs = sorted(self.contigs)
        if contigs and not self.mapping:
            names = self.reference.contigs
            listed = f"{names[:5]}" + (f" (and {len(names) - 5} more)" if len(names) > 5 else "")
            raise PanelUnusableError(
                self.source,
                f"no panel contig matches the reference {self.reference.path}: panel uses "
                f"{contigs[:5]}, reference has {listed}; rename the panel's contigs or use the "
                "FASTA they come from",
            )
        observed = None
        if self.n_checked:
            observed = (self.n_checked - self.n_mismatch) / self.n_checked
        return assert_build_matches(
            self.n_checked,
            observed,
            lambda: checked_rows().filter(pl.col(REF_CHECKED)),
            self.reference,
            self.policy,
            self.source,
            header_mismatches,
        )


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
    carries the checked table. Notes of `assert_usable` are logged as warnings.
    """
    check = PanelCheck(reference, policy, _panel_source(panel))
    require_label_column(panel, check.policy.label_column, check.source)
    checked = check.rows(panel)
    for note in check.assert_usable(header_mismatches, lambda: checked):
        log.warning("%s: %s", check.source, note)  # no summary here to carry it
    check.require_label_values()
    checked = flag_duplicates(checked.drop(WORKING_COLUMNS), check.policy)
    assert_something_scoreable(checked, check.source)
    return checked


def require_label_column(batch: pl.DataFrame, column: str | None, source: object) -> None:
    """The configured label column must be a column of the panel (as read: a VCF's INFO
    fields are columns when `info_fields` names them): else the labels would be silently
    missing and the metrics empty."""
    if column and column not in batch.columns:
        from carbon_vep.config.run import setting_name

        found = [c for c in batch.columns if c not in (*WORKING_COLUMNS, "source", "row_id")]
        raise PanelUnusableError(
            source,
            f"label column {column!r} ({setting_name('label_column')}) is not a column of the "
            "panel; its "
            f"columns are {found} (a VCF's INFO field is a column when `info_fields` names it)",
        )


class LabelValues:
    """Whether a panel's label column holds any value of the two lists, fed a batch at a
    time: until one matches, the values met that match neither (`unmatched_label_counts`) with
    their rows, at most `KEPT` distinct ones (so memory is bounded by the batch, not the
    panel: a column of free text has as many values as rows)."""

    KEPT = 1000  # more than any label column has; enough to name the commonest

    def __init__(self, policy: CheckPolicy) -> None:
        self.policy = policy
        self.matched = False
        self.unmatched = pl.DataFrame(schema={"value": pl.Utf8, "n": pl.Int64})
        self.more_values = False  # distinct values were met beyond the `KEPT`

    def add(self, labels: pl.Series) -> None:
        if self.matched:
            return
        policy = self.policy
        counts = unmatched_label_counts(labels, policy.positive_labels, policy.negative_labels)
        if counts["n"].sum() < labels.len() - labels.null_count():  # some value matched
            self.matched, self.unmatched = True, self.unmatched.clear()
            return
        tally = pl.concat([self.unmatched, counts]).group_by("value").agg(pl.col("n").sum())
        tally = tally.sort(["n", "value"], descending=[True, False])
        self.more_values |= tally.height > self.KEPT
        self.unmatched = tally.head(self.KEPT)


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


def flag_duplicates(checked: pl.DataFrame, policy: CheckPolicy) -> pl.DataFrame:
    """`duplicate_of`: row_id of the key's first row (null on that row and on unique keys);
    `n_copies_in_panel`: rows of the same variant (1 for a row without a usable key);
    `label_conflict`: the key's rows carry a positive and a negative label (`policy`'s values;
    `Benign` and `Likely_benign` agree), or a label was conflicted already.

    One key for all three: the contig as aliased to the reference (`chr1` and `1` are one
    variant), else as written. Duplicates are kept and, when scoreable, scored once;
    conflicted rows are left out of metrics.
    """
    key = _duplicate_key()
    has_key = pl.col("chrom").is_not_null() & pl.col("pos").is_not_null()
    first = pl.col("row_id").min().over(key)
    duplicate_of = pl.when(has_key & (pl.col("row_id") != first)).then(first)
    conflict = pl.lit(False)
    label_column = policy.label_column
    if label_column and label_column in checked.columns:
        classes = label_classes(
            pl.col(label_column), policy.positive_labels, policy.negative_labels
        )
        conflict = has_key & (classes.drop_nulls().n_unique().over(key) > 1)
    if "label_conflict" in checked.columns:
        conflict = conflict | pl.col("label_conflict").fill_null(False)
    copies = pl.when(has_key).then(pl.len().over(key)).otherwise(1)
    return checked.with_columns(
        duplicate_of.otherwise(None).cast(pl.Int64).alias("duplicate_of"),
        conflict.alias("label_conflict"),
        copies.cast(pl.UInt32).alias("n_copies_in_panel"),
    )
