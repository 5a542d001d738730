"""Annotate a panel from an existing scan: every row gets the scan's score by lookup, or a
status saying why not. No model, no torch.

The panel goes through the same ingest as every panel (aliases, REF check, SNV/indel triage),
on the scan's build and, unless another is given, the scan's reference (`scan.json`, written
with the scan's outputs); its `ok` SNVs are joined on (contig, position) with the scan's
per-base dataset (`<scan>/positions/<file>.parquet`, the file `scan.json` names for the contig,
reading only the row groups whose contig and position range hold a panel position), then

- `scored`: score = log m(ref) − log m(alt) from the stored log-marginals (as the scan's TSV;
  ref_ll / alt_ll are the log-marginals, window_bp the base's left context in the scan), and
  its `phred`, `calibrated` and `calibrated_phred` on the scan's calibration (`<scan>/calibration/`,
  or another scan's made with the same model and settings: `calibration_dir`),
- `not_scanned`: the position is not in the scan (outside its regions, an N, a short run),
- `ref_mismatch`: the scan's base at the position differs from the panel's REF (a scan of
  another reference); rows that failed the checks keep their check status, and scoreable
  variants other than SNVs are `skipped`.

`annotate_checked` works from the checked table's file and never holds it: the lookup reads its
key, status and variant type, the scores go to score files in position order within each of the
scan's files, and the workflow's merge (`merge_score_files`) sets them beside the checked rows a
slice at a time.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from carbon_vep import columns
from carbon_vep.columns import SCAN_BASES, Status
from carbon_vep.config.stages import LabelSettings, PanelSettings
from carbon_vep.errors import InputError
from carbon_vep.genome.builds import canonical_build
from carbon_vep.genome.contigs import resolve_contigs
from carbon_vep.genome.reference import Reference, open_reference
from carbon_vep.scan.calibrate import Calibration
from carbon_vep.scan.record import read_scan
from carbon_vep.scan.snvs import at_base, with_cells
from carbon_vep.scoring.merge import BATCH_ROWS, merge_score_files

log = logging.getLogger("carbon_vep")

RECIPE = "from_scan"
NORMALIZATION = "dna_block"  # the scan's: softmax over the 4,096 6-mers, FNS marginals

_READ = ["pos", "ref", "context_bp", *(f"log_fns_{b}" for b in SCAN_BASES)]
# SNVs looked up at a time (~600 bytes each until written: their scores, then calibrated)
LOOKUP_ROWS = 500_000
# what the lookup reads of the checked table (the rest is set beside the scores by the merge)
_LOOKUP_COLUMNS = [*columns.VARIANT_KEY, "status", "variant_type"]


def resolve_build(record: dict, given: str | None, scan_dir: str | Path) -> str:
    """The scan's build, or `given` when it names the same assembly (hg38 = GRCh38)."""
    build = record["build"]
    if given is not None and canonical_build(given) != canonical_build(build):
        raise InputError(
            scan_dir,
            f"--build {given} ({canonical_build(given)}) disagrees with the scan's build {build} "
            f"({canonical_build(build)}); a scan answers for the genome it scanned: leave out "
            "--build, or annotate from a scan of that build",
        )
    return build if given is None else given


def check_reference(record: dict, lengths: dict[str, int], reference: str | Path) -> None:
    """A reference other than the scan's must be the same genome: it names the scanned contigs
    as the scan does (else every row would be `not_scanned`) with the same lengths."""
    scanned = [c for c, entry in record["contigs"].items() if entry["file"]]
    if scanned and not set(scanned) & set(lengths):
        raise InputError(
            reference,
            f"none of the scan's contigs ({scanned[0]!r}, ...) is named here: the scan's "
            f"reference {record['reference']} names them otherwise",
        )
    for contig, entry in record["contigs"].items():
        if contig in lengths and lengths[contig] != entry["length"]:
            raise InputError(
                reference,
                f"contig {contig!r} is {lengths[contig]:,} bp here but {entry['length']:,} bp in "
                f"the scan's reference {record['reference']}: not the genome the scan read",
            )


def _lookup(scan_dir: str | Path, file: str | None, contigs: list[str], positions: list[int]):
    """The scan's bases of one output file on `contigs` at any of `positions` (sorted; one read
    of the file for all its contigs: small contigs share files), reading only the row groups
    whose contigs and position range can hold them."""
    wanted = ["chrom", *_READ]
    if file is None or not positions:
        return pl.DataFrame(schema={c: columns.schema(columns.SCAN_BASE)[c] for c in wanted})
    path = Path(scan_dir) / "positions" / f"{file}.parquet"
    filters = [
        ("chrom", "in", contigs),
        ("pos", ">=", positions[0]),
        ("pos", "<=", positions[-1]),
        ("pos", "in", positions),
    ]
    return pl.from_arrow(pq.read_table(path, columns=wanted, filters=filters))


def scan_contig_names(rows: pl.DataFrame, record: dict, checked: str | Path) -> dict[str, str]:
    """The checked panel's `ref_chrom` names that the scan spells otherwise, and the scan's
    spelling: a panel checked against a copy of the genome that names its contigs otherwise
    (`17` where the scan read `chr17`) is looked up under the scan's names (one unambiguous
    alias, as ingest resolves a panel's contigs), so its rows are not all `not_scanned`. A
    contig of the panel's that names none of the scan's (a contig the scan's reference does not
    have) is left as it is. A panel of which no scoreable row is on a contig of the scan's
    stops with the reason."""
    scan_contigs = list(record["contigs"])
    ok = rows.filter((pl.col("status") == Status.OK) & pl.col("ref_chrom").is_not_null())
    names = ok["ref_chrom"].unique(maintain_order=True).to_list()
    mapping = resolve_contigs(names, scan_contigs)
    if names and not mapping:
        raise InputError(
            checked,
            f"none of the checked panel's contigs ({names[0]!r}, ...) is one of the scan's "
            f"({scan_contigs[0]!r}, ...), under any alias: it was checked against another "
            f"genome than the scan's reference {record['reference']}; check it against that "
            "reference, or annotate with --panel",
        )
    renamed = {k: v for k, v in mapping.items() if k != v}
    if renamed:
        log.info("checked panel contigs looked up under the scan's names: %s", renamed)
    return renamed


def checked_file(
    record: dict,
    checked: str | None,
    panel: str | None,
    reference: str | None,
    settings: tuple[PanelSettings, LabelSettings],
    workdir: Path,
) -> Path:
    """The checked table to look up in a scan (`record`: its scan.json): a checked panel as
    given (the workflow's check_panel output), else `panel` checked into `workdir` against
    `reference` (which must be the scan's genome) or the scan's own reference."""
    if checked:
        if reference:  # the SNVs' contexts are read there: it must be the scan's genome
            with open_reference(reference) as opened:
                check_reference(record, opened.lengths, reference)
        return Path(checked)
    if not panel:
        raise InputError("command line", "annotate needs --panel (or --checked)")
    from carbon_vep.variants.ingest import write_checked_panel
    from carbon_vep.variants.summary import log_summary

    path = reference or record["reference"]
    if not Path(path).is_file():
        message = "the scan's reference is not there any more; give --reference (the same genome)"
        raise InputError(path, message)
    out = workdir / "checked.parquet"
    with open_reference(path) as opened:
        if reference:
            check_reference(record, opened.lengths, reference)
        log_summary(write_checked_panel(panel, opened, *settings, out))
    return out


def scan_scores(checked: pl.DataFrame, scan_dir: str | Path) -> Iterator[pl.DataFrame]:
    """One score row (columns.SCORE_SHARD) per distinct scoreable variant of `checked`: the
    scan's score, or the status saying why not; a frame for each output file of the scan (its
    contigs' SNVs, the file read once), then one of the variants that are not SNVs."""
    files = {c: entry["file"] for c, entry in read_scan(scan_dir)["contigs"].items()}
    key = list(columns.VARIANT_KEY)
    ok = checked.filter(pl.col("status") == Status.OK)
    todo = ok.filter(pl.col("variant_type") == "snv").select(key).unique(maintain_order=True)
    by_file: dict[str | None, list[str]] = {}
    for contig in todo["ref_chrom"].unique(maintain_order=True).to_list():
        by_file.setdefault(files.get(contig), []).append(contig)
    for file, contigs in by_file.items():
        in_file = todo.filter(pl.col("ref_chrom").is_in(contigs)).sort("pos", maintain_order=True)
        for start in range(0, in_file.height, LOOKUP_ROWS):  # a stretch of positions a read
            rows = in_file.slice(start, LOOKUP_ROWS)
            names = rows["ref_chrom"].unique().to_list()
            bases = _lookup(scan_dir, file, names, rows["pos"].unique().sort().to_list())
            bases = bases.rename({"chrom": "ref_chrom", "ref": "scan_ref"})
            found = rows.join(bases, on=["ref_chrom", "pos"], how="left", maintain_order="left")
            yield _in_score_schema(_looked_up(found))
        del in_file
    del todo
    other = ok.filter(pl.col("variant_type") != "snv").select(key).unique(maintain_order=True)
    skipped = other.select(
        *key,
        pl.lit(Status.SKIPPED.value).alias("score_status"),
        pl.lit("not an SNV: a scan scores SNVs only").alias("score_reason"),
    )
    yield _in_score_schema(skipped)


def _looked_up(hits: pl.DataFrame) -> pl.DataFrame:
    """SNVs joined with the scan's bases at their positions (`scan_ref` and the log-marginals:
    null where the scan has no base) -> their scores and statuses."""

    def log_marginal(allele: str) -> pl.Expr:
        return at_base(pl.col(allele), "log_fns_{}").cast(pl.Float64)

    missing, differs = pl.col("scan_ref").is_null(), pl.col("scan_ref") != pl.col("ref")
    valid = ~missing & ~differs
    return hits.select(
        *columns.VARIANT_KEY,
        pl.when(missing)
        .then(pl.lit(Status.NOT_SCANNED.value))
        .when(differs)
        .then(pl.lit(Status.REF_MISMATCH.value))
        .otherwise(pl.lit(Status.SCORED.value))
        .alias("score_status"),
        pl.when(missing)
        .then(pl.lit("position not in the scan"))
        .when(differs)
        .then(pl.format("the scan's base here is {}", pl.col("scan_ref")))
        .otherwise(pl.lit(""))  # empty when scored, as every recipe writes it
        .alias("score_reason"),
        pl.when(valid).then(log_marginal("ref") - log_marginal("alt")).alias("score"),
        pl.when(valid).then(log_marginal("ref")).alias("ref_ll"),
        pl.when(valid).then(log_marginal("alt")).alias("alt_ll"),
        pl.when(valid).then(log_marginal("ref").exp()).alias("p_ref"),
        pl.when(valid).then(log_marginal("alt").exp()).alias("p_alt"),
        pl.when(valid).then(pl.col("context_bp").cast(pl.Int64)).alias("window_bp"),
        pl.lit(0, pl.Int64).alias("window_non_acgt"),
        pl.lit(RECIPE).alias("recipe"),
        pl.lit(NORMALIZATION).alias("normalization"),
    )


def _in_score_schema(scores: pl.DataFrame) -> pl.DataFrame:
    """`scores` with every column of columns.SCORE_SHARD, in its order and types."""
    return scores.select(
        pl.col(name).cast(dtype) if name in scores.columns else pl.lit(None, dtype).alias(name)
        for name, dtype in columns.schema(columns.SCORE_SHARD).items()
    )


def calibrated_scores(
    scores: pl.DataFrame, calibration: Calibration, reference: Reference
) -> pl.DataFrame:
    """`scores` with phred, calibrated and calibrated_phred for the scored rows: the score's key
    as the TSV prints it (the same float32 difference of the stored log-marginals), the SNV's
    context cell from `reference`, then the calibration's scales (no PHRED for an SNV whose
    base the scan scored with less than its min_context, as in the TSV)."""
    scored = scores.filter(pl.col("score_status") == Status.SCORED).select(
        pl.col("ref_chrom").alias("chrom"),
        "pos",
        "ref",
        "alt",
        (pl.col("ref_ll").cast(pl.Float32) - pl.col("alt_ll").cast(pl.Float32)).alias("score"),
        pl.col("window_bp").alias("context_bp"),  # the base's left context in the scan
    )
    keyed = with_cells(scored, reference, calibration.decimals, None)
    values = calibration.annotate(keyed).select(
        pl.col("chrom").alias("ref_chrom"),
        "pos",
        "ref",
        "alt",
        *(pl.col(c.name).cast(c.dtype) for c in columns.CALIBRATED),
    )
    return scores.join(values, on=list(columns.VARIANT_KEY), how="left", maintain_order="left")


def annotate_checked(
    checked: str | Path,
    scan_dir: str | Path,
    out: str | Path,
    reference_path: str | Path | None = None,
    calibration_dir: str | Path | None = None,
) -> int:
    """The checked table at `checked` (ingest's) with the score columns, the calibrated scales
    and final statuses, as scores.parquet of any recipe, written to `out`; the rows written.
    The SNVs' contexts are read from the scan's reference unless another copy is given."""
    record = read_scan(scan_dir)
    folder = Path(calibration_dir or Path(scan_dir) / "calibration")
    calibration = Calibration.read(folder)
    calibration.check_fingerprint(record, folder)
    rows = pl.read_parquet(checked, columns=_LOOKUP_COLUMNS)
    renamed = scan_contig_names(rows, record, checked)
    if renamed:
        rows = rows.with_columns(pl.col("ref_chrom").replace(renamed))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix=f".{out.name}.scores-", dir=out.parent) as tmp,
        open_reference(reference_path or record["reference"]) as reference,
    ):
        # the scores in files of BATCH_ROWS at most, in position order within each scan file
        # (the files in the order the panel first names their contigs): a slice of a panel in
        # position order finds its scores in a file or two, and the merge holds only those
        files = []
        for scores in scan_scores(rows, scan_dir):
            scores = calibrated_scores(scores, calibration, reference)
            for start in range(0, max(scores.height, 1), BATCH_ROWS):  # none: one empty file
                files.append(Path(tmp) / f"scores_{len(files):06d}.parquet")
                scores.slice(start, BATCH_ROWS).write_parquet(files[-1])
        del rows, scores
        return merge_score_files(checked, files, out, renamed)
