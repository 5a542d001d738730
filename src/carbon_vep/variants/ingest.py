"""The ingest stage in one call: read the panel, derive labels, check every row, summarize.

`check-panel` (the Snakemake rule) and the one-process `score` command both go through
`write_checked_panel` (`ingest_panel` returns its table), so a panel gets the same statuses
either way. The panel is read, labelled and checked a batch of rows at a time, and the batches
wait on disk (next to the output) until the whole panel has been seen: duplicates, the build
check and the summary need every row, but only a few columns of each, so a ClinVar-size panel
is checked in bounded memory.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from carbon_vep.atomic import atomic_path
from carbon_vep.config.stages import LabelSettings, PanelSettings
from carbon_vep.genome.builds import check_reference_build
from carbon_vep.genome.reference import Reference
from carbon_vep.variants.check import (
    PanelCheck,
    duplicate_key_hash,
    flag_duplicates,
    require_label_column,
)
from carbon_vep.variants.genome_match import WORKING_COLUMNS, contig_length_mismatches
from carbon_vep.variants.labels import CONFLICT_COLUMN, add_clnsig_labels
from carbon_vep.variants.panel import PanelReader, ReadAgain
from carbon_vep.variants.panel_columns import ALL_INFO
from carbon_vep.variants.policy import CheckPolicy
from carbon_vep.variants.summary import NothingScoreableError, summarize, unscoreable_reason

# What the summary (and the stop when nothing can be scored) reads back of every row.
_SUMMARY_COLUMNS = ("chrom", "ref_chrom", "status", "reason", "variant_type")


def ingest_panel(
    panel_path: str | Path,
    reference: Reference,
    panel: PanelSettings,
    labels: LabelSettings | None = None,
) -> tuple[pl.DataFrame, dict]:
    """(checked table with every input row, summary) for a panel file against a reference.

    When no row can be scored, the `NothingScoreableError` carries the table and the summary.
    The callers say what the summary holds, its notes too (variants.summary.log_summary).
    """
    with tempfile.TemporaryDirectory(prefix="carbon-vep-ingest-") as tmp:
        out = Path(tmp) / "checked.parquet"
        try:
            summary = write_checked_panel(panel_path, reference, panel, labels, out)
        except NothingScoreableError as err:
            err.checked = pl.read_parquet(out)
            raise
        return pl.read_parquet(out), summary


def write_checked_panel(
    panel_path: str | Path,
    reference: Reference,
    panel: PanelSettings,
    labels: LabelSettings | None,
    out: str | Path,
) -> dict:
    """Read, label and check a panel; write the checked table (every input row, in order) to
    `out` (Parquet, atomically) and return the summary.

    A panel unusable as a whole (no matching contig, wrong build, 0-based) stops before
    anything is written. When no row can be scored, the table is written and then
    `NothingScoreableError` (with `.summary`) says why.
    """
    labels = labels or LabelSettings()
    check_reference_build(panel.build, reference.lengths, reference.path)
    from_clnsig = labels.label_source == "clinvar_clnsig"
    info_fields = list(panel.info_fields)
    if from_clnsig and labels.clnsig_field not in info_fields and ALL_INFO not in info_fields:
        info_fields.append(labels.clnsig_field)
    policy = CheckPolicy.from_settings(panel, labels)
    reader = PanelReader(panel_path, panel.format, panel.columns, info_fields)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    parts_dir = Path(tempfile.mkdtemp(prefix=f".{out.name}.parts-", dir=out.parent))
    try:
        check, parts, key_hashes = _check_batches(
            reader, reference, policy, labels if from_clnsig else None, parts_dir
        )
        mismatches = contig_length_mismatches(reader.declared_lengths, check.mapping, reference)
        build_notes = check.assert_usable(
            mismatches, lambda: pl.read_parquet(parts, columns=["ref_chrom", *WORKING_COLUMNS])
        )
        check.require_label_values()  # its values were tallied batch by batch
        flags = _duplicate_flags(parts, key_hashes, policy)
        del key_hashes
        notes = reader.notes + [f"panel header: {m}" for m in mismatches] + build_notes
        on_disk = pl.scan_parquet(parts).select(_SUMMARY_COLUMNS)
        summary = summarize(on_disk, panel_path, notes)
        summary["n_duplicate_rows"] = int(flags["duplicate_of"].is_not_null().sum())
        summary["n_label_conflicts"] = int(flags["label_conflict"].sum())
        problem = unscoreable_reason(on_disk)
        _write_parts(parts, flags, reader, out)
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)
    if problem is not None:
        error = NothingScoreableError(str(reader.path), problem, None)
        error.summary = summary
        raise error
    return summary


def _check_batches(
    reader: PanelReader,
    reference: Reference,
    policy: CheckPolicy,
    clnsig: LabelSettings | None,
    parts_dir: Path,
) -> tuple[PanelCheck, list[Path], pl.Series]:
    """Every batch of the panel labelled, checked and written to `parts_dir`, in order; and
    the hash of every row's variant key (for duplicates). With `clnsig`, labels are derived
    from CLNSIG."""
    while True:
        check = PanelCheck(reference, policy, str(reader.path))
        parts: list[Path] = []
        hashes: list[pl.Series] = []
        try:
            for number, batch in enumerate(reader.batches()):
                if clnsig is not None:  # label_source clinvar_clnsig
                    batch = add_clnsig_labels(
                        batch, clnsig.clnsig_field, clnsig.clnsig_labels, str(reader.path)
                    )
                if number == 0:
                    require_label_column(batch, policy.label_column, reader.path)
                checked = check.rows(batch)
                hashes.append(duplicate_key_hash(checked))
                parts.append(parts_dir / f"part-{number:06d}.parquet")
                checked.write_parquet(parts[-1])
            return check, parts, pl.concat(hashes)
        except ReadAgain:  # an INFO field is read as text from now on: start over
            for part in parts:
                part.unlink()


def _duplicate_flags(parts: list[Path], key_hashes: pl.Series, policy: CheckPolicy) -> pl.DataFrame:
    """duplicate_of, label_conflict and n_copies_in_panel of every row (`flag_duplicates`'s
    columns). Only rows whose key hash recurs can be
    duplicates: their keys (and labels) are read back and compared by `flag_duplicates`."""
    schema = pl.read_parquet_schema(parts[0])
    label_column = policy.label_column
    wanted = ["row_id", "chrom", "ref_chrom", "pos", "ref", "alt"]
    wanted += [c for c in (label_column, CONFLICT_COLUMN) if c and c in schema and c not in wanted]
    candidate = key_hashes.is_duplicated()
    candidates, conflicted, start = [], [], 0
    for part in parts:
        rows = pl.read_parquet(part, columns=wanted)
        is_candidate = candidate.slice(start, rows.height)
        start += rows.height
        candidates.append(rows.filter(is_candidate))
        if CONFLICT_COLUMN in schema:
            conflicted.append(rows[CONFLICT_COLUMN].fill_null(False))
    n_rows = key_hashes.len()
    no_conflict = pl.repeat(False, n_rows, dtype=pl.Boolean, eager=True)
    flags = pl.DataFrame(
        {
            "duplicate_of": pl.repeat(None, n_rows, dtype=pl.Int64, eager=True),
            "label_conflict": pl.concat(conflicted) if conflicted else no_conflict,
            "n_copies_in_panel": pl.repeat(1, n_rows, dtype=pl.UInt32, eager=True),
        }
    )
    if candidate.any():
        found = flag_duplicates(pl.concat(candidates), policy)
        flags = flags.with_columns(
            flags["duplicate_of"].scatter(found["row_id"], found["duplicate_of"]),
            flags["label_conflict"].scatter(found["row_id"], found["label_conflict"]),
            flags["n_copies_in_panel"].scatter(found["row_id"], found["n_copies_in_panel"]),
        )
    return flags


def _write_parts(parts: list[Path], flags: pl.DataFrame, reader: PanelReader, out: Path) -> None:
    """The checked table: the parts in order, with the panel-wide flags, in one Parquet."""
    writer: pq.ParquetWriter | None = None
    schema: pa.Schema | None = None
    start = 0
    with atomic_path(out) as tmp:
        try:
            for part in parts:
                frame = pl.read_parquet(part).drop(WORKING_COLUMNS)
                frame = frame.with_columns(flags.slice(start, frame.height).get_columns())
                start += frame.height
                table = reader.finish(frame).to_arrow()
                if writer is None:
                    schema = table.schema
                    writer = pq.ParquetWriter(tmp, schema)
                writer.write_table(table.cast(schema))
        finally:
            if writer is not None:
                writer.close()
