"""The table vocabulary: every row status and every column the pipeline writes, defined once.

Each stage imports its statuses, keys and columns from here; the Parquet schemas, the names a
panel column may not take (`RESERVED`), the VCF INFO descriptions, the scan TSV's `##column`
header lines and the documentation's column and status tables (`report.doc_tables`) are derived
from these definitions. Descriptions are plain ASCII: they end up in file headers that pysam and
other tools read as ASCII (tests/test_vocabulary.py checks). No torch here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import polars as pl

from carbon_vep import markdown


class Status(StrEnum):
    """Why a row has (or has no) score. Values are the strings written to every table."""

    description: str

    def __new__(cls, value: str, description: str) -> Status:
        member = str.__new__(cls, value)
        member._value_ = value
        member.description = description
        return member

    # check stage (checked.parquet): a row either passes every check or says why not
    OK = "ok", "passed every check; to be scored (checked.parquet only)"
    INVALID = (
        "invalid",
        "panel: missing CHROM, POS or REF, or a POS that is not an integer (`POS '1,234' is not "
        "an integer`). Suite task rows: perturbation `missing original_sequence or sequence`, "
        "`lengths differ`, `shorter than 12 bp`, `longer than the model's context` (more "
        "positions than the model has); recovery `missing sequence or label` (`missing "
        "sequence` with sequence_tail labels), `prompt shorter than one 6-mer`, `non-ACGT base "
        "in the prompt's last 6-mer`. Invalid rows are out of the means; a task with no other "
        "row stops with exit 2",
    )
    UNKNOWN_CONTIG = "unknown_contig", "contig not in the reference under any alias"
    OUT_OF_BOUNDS = "out_of_bounds", "POS (or the end of REF) outside the contig"
    SKIPPED = (
        "skipped",
        "not scoreable under the stated policy, with the reason: symbolic / star / missing ALT "
        "(`<DEL>`, `*`, `<NON_REF>`, `.`, breakends), non-ACGT allele (N, IUPAC), ALT = REF, "
        "indel or MNV",
    )
    REF_MISMATCH = "ref_mismatch", "REF (over its whole length) differs from the reference; kept"
    # scoring stage (scores.parquet, predictions.parquet): what became of an `ok` row
    SCORED = "scored", "scored; `score` and the recipe's raw values are set"
    CONTIG_END = (
        "contig_end",
        "the variant's base lies in the last bases of its contig that form no whole 6-mer "
        "(trimmed from the window, or outside every scan tile)",
    )
    NO_CONTEXT = (
        "no_context",
        "nexttoken: no whole 6-mer of left context once leading N are stripped (the variant is "
        "at its contig's start or right after an N gap); its score would depend on REF and ALT "
        "alone",
    )
    FAILED = "failed", "scoring failed for this row alone (out of memory at batch size 1)"
    # annotate from a scan (annotate.py): a lookup, no model
    NOT_SCANNED = (
        "not_scanned",
        "the variant's position is not in the scan (outside its regions, a non-ACGT base such "
        "as an assembly gap, or a run of ACGT shorter than one 6-mer)",
    )


# The statuses each table can hold (a row of scores.parquet carries a check status when it was
# never scored, or a scoring status when it was).
CHECK_STATUSES = (
    Status.OK,
    Status.INVALID,
    Status.UNKNOWN_CONTIG,
    Status.OUT_OF_BOUNDS,
    Status.SKIPPED,
    Status.REF_MISMATCH,
)
SCORING_STATUSES = (
    Status.SCORED,
    Status.CONTIG_END,
    Status.NO_CONTEXT,
    Status.FAILED,
    Status.NOT_SCANNED,
)
FAILED_ALONE = "out of memory even at batch size 1"  # the reason of a `failed` row
OUTPUT_STATUSES = (*SCORING_STATUSES, *(s for s in CHECK_STATUSES if s is not Status.OK))


@dataclass(frozen=True)
class Column:
    name: str
    dtype: pl.DataType | type[pl.DataType]
    description: str


def _columns(*specs: tuple[str, pl.DataType | type[pl.DataType], str]) -> tuple[Column, ...]:
    return tuple(Column(*spec) for spec in specs)


# ---- panels and the check stage ---------------------------------------------------------
PANEL_KEY = ("chrom", "pos", "ref", "alt")  # as written in the panel (after allele trimming)
VARIANT_KEY = ("ref_chrom", "pos", "ref", "alt")  # on the reference: what is scored and joined


def repeats_previous_key() -> pl.Expr:
    """True on a row whose VARIANT_KEY (a null equal to a null) is the row before it again: in
    a table sorted by the key, each repeat of a key after its first row. Sorting and comparing
    neighbours holds less than a hash table of every key (`unique`, `is_duplicated`)."""
    return (pl.int_range(pl.len()) > 0) & pl.all_horizontal(
        pl.col(k).eq_missing(pl.col(k).shift()) for k in VARIANT_KEY
    )


PANEL = _columns(
    ("row_id", pl.Int64, "0-based input order; every table keeps every input row"),
    ("source", pl.Utf8, "where the row was read: `file:line N`, `file:row N` or `file:record N`"),
    ("chrom", pl.Utf8, "contig as written in the panel"),
    ("pos", pl.Int64, "1-based position (trimmed form for padded SNVs; null if not an integer)"),
    ("ref", pl.Utf8, "reference allele, upper-cased (trimmed form for padded SNVs)"),
    ("alt", pl.Utf8, "alternate allele, upper-cased (trimmed form for padded SNVs)"),
    ("input_pos", pl.Utf8, "POS exactly as read"),
    ("input_ref", pl.Utf8, "REF exactly as read"),
    ("input_alt", pl.Utf8, "ALT exactly as read"),
)
VCF_RECORD = _columns(
    ("id", pl.Utf8, "VCF ID"),
    ("qual", pl.Float64, "VCF QUAL"),
    ("filter", pl.Utf8, "VCF FILTER values joined by `;` (null when `.`)"),
    ("n_alts_in_record", pl.Int64, "ALTs in the VCF record this row came from"),
    ("alt_index", pl.Int64, "1-based index of this row's ALT in its record"),
)
LABEL = _columns(
    ("label", pl.Int8, "1 / 0 / null derived from ClinVar CLNSIG (label_source clinvar_clnsig)"),
)
CHECK = _columns(
    ("ref_chrom", pl.Utf8, "the reference contig the panel's contig maps to (aliases resolved)"),
    ("variant_type", pl.Utf8, "snv, mnv, indel, symbolic, non_acgt, no_change or invalid"),
    ("status", pl.Utf8, "the row's status (Statuses)"),
    ("reason", pl.Utf8, "why the row was not scored (empty when scored)"),
    ("duplicate_of", pl.Int64, "row_id of the first row with the same variant (null on that row)"),
    (
        "label_conflict",
        pl.Boolean,
        "rows of this variant carry a positive and a negative label (or ClinVar says "
        "Conflicting); left out of metrics",
    ),
    ("n_copies_in_panel", pl.UInt32, "rows of the panel with the same variant (after aliasing)"),
)

# ---- windows, shards and scores ---------------------------------------------------------
WINDOW = _columns(
    ("window_start", pl.Int64, "0-based start of the variant's window on the contig"),
    ("window_end", pl.Int64, "0-based end (exclusive) of the window"),
    ("variant_index", pl.Int64, "0-based offset of the variant base inside the window"),
    ("shard", pl.Int64, "shard the variant is scored in"),
)
SCORE = _columns(
    ("score_status", pl.Utf8, "scoring status (becomes `status` in scores.parquet)"),
    ("score_reason", pl.Utf8, "scoring reason (becomes `reason` in scores.parquet)"),
    ("score", pl.Float64, "the variant's score, larger = more damaging"),
    (
        "ref_ll",
        pl.Float64,
        "log-likelihood of the reference window (mean per token or base), or log P(ref base)",
    ),
    (
        "alt_ll",
        pl.Float64,
        "log-likelihood of the alternate window (mean per token or base), or log P(alt base)",
    ),
    ("delta", pl.Float64, "LL(alt window) - LL(ref window) (centered, fns; score = -delta)"),
    ("delta_rc", pl.Float64, "the same delta on the reverse-complement windows (rc_average)"),
    ("p_ref", pl.Float64, "P(ref base) at the variant (nexttoken, scan)"),
    ("p_alt", pl.Float64, "P(alt base) at the variant (nexttoken, scan)"),
    ("window_bp", pl.Int64, "bases of the window scored (or of left context, for scan)"),
    ("window_non_acgt", pl.Int64, "bases other than ACGT in that window (sent as <oov>)"),
    ("recipe", pl.Utf8, "the recipe that scored the row"),
    ("normalization", pl.Utf8, "the softmax normalisation used (Normalisation)"),
)
METRIC = _columns(("label01", pl.Int8, "the row's label as 1 / 0 (null: not labelled)"))

# ---- scans -------------------------------------------------------------------------------
SCAN_BASES = "ACGT"  # column order of the per-base probabilities
SCAN_POSITION = _columns(
    ("chrom", pl.Utf8, "contig"),
    ("pos", pl.Int64, "1-based position"),
    ("ref", pl.Utf8, "reference base"),
    ("context_bp", pl.Int64, "bases of left context the model saw"),
    ("phase", pl.Int64, "position of the base inside its 6-mer token (0-5)"),
    *((f"fns_{b}", pl.Float32, f"FNS marginal P({b}) given the preceding tokens") for b in "ACGT"),
    *(
        (f"cond_{b}", pl.Float32, f"P({b}) given the preceding tokens and bases of its token")
        for b in "ACGT"
    ),
)
SCAN_SNV = _columns(
    ("chrom", pl.Utf8, "contig"),
    ("pos", pl.Int64, "1-based position"),
    ("ref", pl.Utf8, "reference base"),
    ("alt", pl.Utf8, "alternate base"),
    ("score", pl.Float32, "log m(ref) - log m(alt), FNS marginals (larger = more damaging)"),
    ("score_conditional", pl.Float32, "the same with the within-token conditionals"),
    ("p_ref", pl.Float32, "FNS marginal of the reference base"),
    ("p_alt", pl.Float32, "FNS marginal of the alternate base"),
    ("context_bp", pl.Int64, "bases of left context the model saw"),
)

# whole-genome scans (scan.plan, scan.positions): one row per scored base, log-marginals as
# float16 (every score within 0.008 of float32 for marginals above e^-16, no underflow; half
# the bytes), chrom and ref dictionary-encoded, pos and context_bp delta-encoded
SCAN_BASE = _columns(
    ("chrom", pl.Utf8, "contig (dictionary-encoded; row-group statistics let readers skip to it)"),
    ("pos", pl.Int64, "1-based position"),
    ("ref", pl.Utf8, "reference base"),
    ("context_bp", pl.Int32, "bases of left context the model saw"),
    ("phase", pl.UInt8, "position of the base inside its 6-mer token (0-5)"),
    *(
        (f"log_fns_{b}", pl.Float16, f"log FNS marginal log P({b}) given the preceding tokens")
        for b in "ACGT"
    ),
    *(
        (
            f"log_cond_{b}",
            pl.Float16,
            f"log P({b}) given the preceding tokens and the bases of its token before it",
        )
        for b in "ACGT"
    ),
)
# the scales a scan's calibration gives every SNV (scan.calibrate; docs/calibration.md)
CALIBRATED = _columns(
    (
        "phred",
        pl.Float32,
        "-10 log10(rank / total) of the score among every SNV of the scan scored with at "
        "least min_context bp of left context (10 = top 10%, 20 = top 1%), to one decimal; "
        "none (`.` in a TSV) for an SNV whose base had less (a contig start, after a gap)",
    ),
    (
        "calibrated",
        pl.Float32,
        "score minus the mean score of neutral SNVs of the same pentanucleotide context and "
        "alternate base (or the trinucleotide's, or the global mean)",
    ),
    (
        "calibrated_phred",
        pl.Float32,
        "the PHRED of the calibrated score among the same SNVs (none where `phred` is none)",
    ),
)
SCAN_TSV = (
    *_columns(
        ("chrom", pl.Utf8, "contig (`#chrom` in the header line)"),
        ("pos", pl.Int64, "1-based position"),
        ("ref", pl.Utf8, "reference base"),
        ("alt", pl.Utf8, "alternate base (3 rows per position)"),
        (
            "score",
            pl.Float32,
            "log m(ref) - log m(alt), FNS marginals (larger = more damaging), rounded to "
            "`tsv_decimals`",
        ),
    ),
    CALIBRATED[0],  # phred, after the raw score, as CADD lays them out
)
SCAN_TSV_CALIBRATED = (*SCAN_TSV, *CALIBRATED[1:])  # with tsv_calibrated: true
ANNOTATION = _columns(
    ("score", pl.Float32, "log m(ref) - log m(alt) looked up in the scan (larger = more damaging)"),
    ("score_conditional", pl.Float32, "the same with the within-token conditionals"),
    ("p_ref", pl.Float32, "FNS marginal of the reference base"),
    ("p_alt", pl.Float32, "FNS marginal of the alternate base"),
    ("window_bp", pl.Int64, "bases of left context the model saw (the scan's context_bp)"),
)

# Names the pipeline gives columns itself: a panel column with one of these names is carried
# as `panel_<name>` instead of being overwritten.
RESERVED = frozenset(
    c.name
    for group in (PANEL, CHECK, WINDOW, SCORE, METRIC)
    for c in group
    if c.name not in PANEL_KEY
)


# Every column name the pipeline defines: a table panel's other columns (carried by
# `info_fields: "*"` into results.vcf.gz) are those of scores.parquet not among these.
PIPELINE = frozenset(
    c.name
    for group in (PANEL, VCF_RECORD, LABEL, CHECK, WINDOW, SCORE, METRIC, CALIBRATED, ANNOTATION)
    for c in group
)


def names(columns: Iterable[Column]) -> tuple[str, ...]:
    return tuple(c.name for c in columns)


def schema(columns: Iterable[Column]) -> dict[str, pl.DataType | type[pl.DataType]]:
    return {c.name: c.dtype for c in columns}


def by_name(*groups: Sequence[Column]) -> dict[str, Column]:
    return {c.name: c for group in groups for c in group}


# the columns a score shard holds: the key, then what scoring adds
SCORE_SHARD = (*(by_name(PANEL, CHECK)[k] for k in VARIANT_KEY), *SCORE)


def markdown_table(columns: Iterable[Column]) -> str:
    """A `| column | type | meaning |` table (the docs' column tables are generated here)."""
    rows = [[f"`{c.name}`", _dtype_name(c.dtype), c.description] for c in columns]
    return markdown.table(["column", "type", "meaning"], rows)


def status_table(statuses: Iterable[Status] = (Status.OK, *OUTPUT_STATUSES)) -> str:
    """Every status a file holds (`ok`: checked.parquet's, before scoring), with its meaning."""
    return markdown.table(["status", "meaning"], [[f"`{s}`", s.description] for s in statuses])


def _dtype_name(dtype: pl.DataType | type[pl.DataType]) -> str:
    return {
        pl.Utf8: "string",
        pl.Int64: "int64",
        pl.Int8: "int8",
        pl.UInt32: "uint32",
        pl.Float64: "float64",
        pl.Float32: "float32",
        pl.Float16: "float16",
        pl.Int32: "int32",
        pl.UInt8: "uint8",
        pl.Boolean: "bool",
    }.get(dtype, str(dtype))  # type: ignore[call-overload]
