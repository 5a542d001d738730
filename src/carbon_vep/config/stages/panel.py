"""How a panel is read and checked against the reference (`PanelSettings`), and where its labels
come from and what they mean (`LabelSettings`, `label_classes`, `unmatched_label_counts`,
`commonest_label_values`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import polars as pl

from carbon_vep.config.fields import ConfigError, default_of, describe, field_named, setting


@dataclass(frozen=True)
class PanelSettings:
    """How a panel is read and checked against the reference (check-panel, score, annotate)."""

    build: str = setting(
        help="genome build the panel and reference are on (e.g. hg38); datasets sharing a "
        "reference must declare the same build (hg38 = GRCh38, hg19 = GRCh37 = b37)"
    )
    format: Literal["auto", "vcf", "parquet", "tsv", "csv"] = setting(
        "auto", help="panel file format (auto: from the file name)"
    )
    columns: dict[str, str] = setting(
        {},
        flag="column",
        help="standard name (chrom, pos, ref, alt, or any other) -> column in a table panel; "
        "without it chrom/chr/chromosome/#CHROM, pos/position, ref and alt are found in any "
        "letter case",
    )
    info_fields: tuple[str, ...] = setting(
        (), flag="info-field", help='VCF INFO fields to carry to the outputs ("*" = every field)'
    )
    indel_policy: Literal["skip"] = setting(
        "skip",
        help="indels and MNVs (after trimming shared bases) are kept with status skipped and "
        "the reason; the recipes score SNVs",
    )
    min_ref_concordance: float = setting(
        0.9,
        scope="run",
        minimum=0,
        maximum=1,
        help="abort before scoring when fewer SNV REF alleles match the reference",
    )


DEFAULT_CLNSIG_LABELS = {
    "Pathogenic": 1,
    "Likely_pathogenic": 1,
    "Pathogenic/Likely_pathogenic": 1,
    "Benign": 0,
    "Likely_benign": 0,
    "Benign/Likely_benign": 0,
}


CLNSIG_LABEL_COLUMN = "label"  # the column label_source clinvar_clnsig derives


def _label_list_help(meaning: str, derived: str) -> str:
    """The help of `positive_labels` / `negative_labels`: one text, the class and the value of
    it that the clinvar_clnsig labels hold."""
    return (
        f"values of the label column that mean {meaning}, matched ignoring letter case and "
        "surrounding whitespace (a value in both lists is refused; so is this list with no "
        "label column; under label_source clinvar_clnsig, whose labels are 1 / 0, it must "
        f"hold {derived})"
    )


@dataclass(frozen=True)
class LabelSettings:
    """Where a panel's labels come from and which values are positive (check-panel, score,
    annotate, metrics)."""

    label_source: Literal["column", "clinvar_clnsig"] = setting(
        "column",
        help="column: labels are read from `label_column` as they are; clinvar_clnsig: a "
        f"`{CLNSIG_LABEL_COLUMN}` column (1, 0 or null) and `label_conflict` are derived from "
        "the INFO field `clnsig_field` through `clnsig_labels`",
    )
    label_column: str | None = setting(
        None,
        help="column holding the labels (default: none, or the derived "
        f"`{CLNSIG_LABEL_COLUMN}` under label_source clinvar_clnsig)",
    )
    clnsig_field: str = setting("CLNSIG", help="INFO field holding ClinVar's significance")
    clnsig_labels: dict[str, int] = setting(
        DEFAULT_CLNSIG_LABELS,
        flag="clnsig-label",
        value_choices=(0, 1),
        help="CLNSIG term -> label, matched ignoring letter case; terms not named here "
        "(Uncertain_significance, risk_factor, ...) leave the row unlabeled; Conflicting_* and "
        "terms naming both labels give a null label and label_conflict = true (such rows are "
        "left out of metrics)",
    )
    positive_labels: tuple[str, ...] = setting(
        ("1", "1.0", "True", "true"), flag="positive", help=_label_list_help("positive", "1")
    )
    negative_labels: tuple[str, ...] = setting(
        ("0", "0.0", "False", "false"), flag="negative", help=_label_list_help("negative", "0")
    )

    def __post_init__(self) -> None:
        self._refuse_a_value_of_both_classes()
        self._refuse_a_clnsig_term_of_both_classes()
        if self.label_column is not None:
            return
        clnsig = self.label_source == "clinvar_clnsig"  # its derived column holds 1 / 0 alone
        for name, derived in (("positive_labels", "1"), ("negative_labels", "0")):
            f, values = field_named(self, name), tuple(getattr(self, name))
            if clnsig and derived not in values:  # metrics would find no label of this class
                why = (
                    f"the labels {describe(field_named(self, 'label_source'), 'clinvar_clnsig')}"
                    f" derives are 1 / 0, and {derived!r} is not among these: name the CLNSIG "
                    f"terms in {describe(field_named(self, 'clnsig_labels'))} instead"
                )
            elif not clnsig and values != default_of(f):  # a default says nothing: the
                why = (  # schema fills it in; metrics would read no labels, whatever it says
                    f"no label column to read it in: set "
                    f"{describe(field_named(self, 'label_column'))} (the panel's column of "
                    "labels), or drop it"
                )
            else:
                continue
            raise ConfigError(f"{describe(f, ', '.join(values), tuple[str, ...])}: {why}")

    def _refuse_a_value_of_both_classes(self) -> None:
        """A value that folds (`fold_label`) into both lists would be positive by the order of
        a `when`, whatever the user meant: refused, naming each list's spelling of it."""
        negatives = self.negative_labels
        negative = dict(zip(folded_labels(negatives), negatives, strict=True))
        positives = self.positive_labels
        clashes = [
            (written, negative[folded])
            for folded, written in zip(folded_labels(positives), positives, strict=True)
            if folded in negative
        ]
        if not clashes:
            return
        positive_field, negative_field = (
            field_named(self, "positive_labels"),
            field_named(self, "negative_labels"),
        )
        named = "; ".join(
            f"{describe(positive_field, p, tuple[str, ...])} and "
            f"{describe(negative_field, n, tuple[str, ...])}"
            for p, n in clashes
        )
        raise ConfigError(
            f"{named}: a label value means positive or negative, not both (values match "
            "ignoring letter case and surrounding whitespace); keep it in one list"
        )

    def _refuse_a_clnsig_term_of_both_classes(self) -> None:
        """CLNSIG terms are looked up ignoring letter case (`clnsig_term_key`): two entries
        of one term with different labels would leave the label to the mapping's order."""
        seen: dict[str, tuple[str, int]] = {}
        for term, label in self.clnsig_labels.items():
            first = seen.setdefault(clnsig_term_key(term), (term, label))
            if first[1] != label:
                f = field_named(self, "clnsig_labels")
                raise ConfigError(
                    f"{describe(f, f'{first[0]}={first[1]}', dict[str, int])} and "
                    f"{describe(f, f'{term}={label}', dict[str, int])}: CLNSIG terms match "
                    "ignoring letter case, so these are one term with two labels; keep one"
                )

    @property
    def column(self) -> str | None:
        """The label column metrics read: the configured one, or the one ingest derives."""
        if self.label_column:
            return self.label_column
        return CLNSIG_LABEL_COLUMN if self.label_source == "clinvar_clnsig" else None


def clnsig_term_key(term: str) -> str:
    """A CLNSIG term as `clnsig_labels` looks it up: in lower case (ClinVar writes
    `Likely_pathogenic`; older releases and hand-made VCFs vary the case)."""
    return term.lower()


def fold_label(values: pl.Expr) -> pl.Expr:
    """A label value as it is matched: its text, without surrounding whitespace, in lower case
    (`Pathogenic`, ` pathogenic ` and `PATHOGENIC` are one value; spreadsheet exports and
    merged sources mix them)."""
    return values.cast(pl.Utf8).str.strip_chars().str.to_lowercase()


def folded_labels(values: Sequence[str]) -> list[str]:
    """Listed label values folded as the column's are (`fold_label`), in order."""
    listed = pl.DataFrame({"value": list(values)}, schema={"value": pl.Utf8})
    return listed.select(fold_label(pl.col("value")))["value"].to_list()


def label_classes(values: pl.Expr, positive: Sequence[str], negative: Sequence[str]) -> pl.Expr:
    """1 / 0 / null: each label's text (`1`, `1.0`, `true` for a boolean) matched against the
    values that mean positive and negative, both folded (`fold_label`); any other value is no
    label."""
    text = fold_label(values)
    return (
        pl.when(text.is_in(folded_labels(positive)))
        .then(1)
        .when(text.is_in(folded_labels(negative)))
        .then(0)
        .otherwise(None)
    )


def unmatched_label_counts(
    values: pl.Series, positive: Sequence[str], negative: Sequence[str]
) -> pl.DataFrame:
    """The label values that match neither list (`label_classes`; nulls are no value), as
    written, each with its rows: `value`, `n`, most common first (ties by value, so the order
    is the same every run)."""
    frame = pl.DataFrame({"value": values.cast(pl.Utf8)})
    unmatched = (
        pl.col("value").is_not_null() & label_classes(pl.col("value"), positive, negative).is_null()
    )
    return (
        frame.filter(unmatched)
        .group_by("value")
        .agg(pl.len().cast(pl.Int64).alias("n"))
        .sort(["n", "value"], descending=[True, False])
    )


def commonest_label_values(counts: pl.DataFrame, shown: int) -> tuple[str, int]:
    """The first `shown` values of `unmatched_label_counts` as text, each with its rows
    (`'pathogenic' (20), 'benign' (10)`), and how many values that leaves unnamed: how a
    refusal and a warning name them."""
    named = counts.head(shown)
    text = ", ".join(f"{value!r} ({n})" for value, n in named.iter_rows())
    return text, counts.height - named.height
