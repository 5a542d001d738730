"""A scan's SNVs counted into calibration cells (no torch): what `scan.calibrate` builds its
rank scales and context means from.

Every scanned SNV falls in one calibration cell (`scan.snvs`: its pentanucleotide and alternate
base, or its trinucleotide where the pentanucleotide touches an N or a contig end, or the global
cell). A count job (count-scan, one per output file) reads its merged Parquet file
(`scan.positions`) row group by row group (`count_positions`) and counts its SNVs per (cell,
score) at the precision the tabix TSV prints the score with (`snvs.score_key`: the rounded score
× 10^decimals, an integer), and the neutral set's score sums per cell (`CalibrationCounts`);
counts from every job add up (`read_counts`), so memory is bounded by the number of cells and
score values, never by the genome.

Only the SNVs a scan scored with its full left context (`ranked`: at least its `min_context` bp)
go into the cells; the SNVs of bases with less, at a contig start or after an assembly gap, are
counted apart (`unranked_snvs`). A counts file records what its scores were made with
(`counts_meta`: the FINGERPRINT_KEYS its provenance names, the printed precision, the neutral
set), and `read_counts` refuses to add up counts made under other settings.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from carbon_vep.atomic import atomic_path
from carbon_vep.errors import InputError
from carbon_vep.genome.reference import Reference
from carbon_vep.scan.snvs import (
    N_CELLS,
    SNV_BATCH_BASES,
    NeutralRegions,
    snv_rows,
    with_cells,
)

log = logging.getLogger("carbon_vep")

# what a calibration holds for: scores made otherwise must not be put on its scales
FINGERPRINT_KEYS = (
    "model",
    "revision",
    "dtype",
    "upcast_output_layer",
    "normalization",
    "tile_bp",
    "min_context",
    "decimals",
)


def min_context_of(meta: Mapping[str, Any]) -> int:
    """The left context (bp) an SNV's base needs for the SNV to be ranked: the scan's
    min_context as its provenance, counts and calibration record it (0, every SNV, where the
    provenance does not say)."""
    return int(meta.get("min_context") or 0)


def ranked(min_context: int) -> pl.Expr:
    """Per base (or SNV) with its `context_bp`: scored with the scan's full left context, so
    on the scales. A base at a contig start or after a gap has less: its scores are kept, it
    is left out of the counts and the context means, and it has no PHRED."""
    return pl.col("context_bp") >= min_context


def counts_meta(
    provenance: Mapping[str, Any], decimals: int, neutral: str | None
) -> dict[str, Any]:
    """What a scan's counts hold for: the fingerprint keys its provenance names, the
    normalisation (a scan's marginals are over the 6-mer block), the printed precision, and the
    neutral set (a BED file, or every scanned SNV)."""
    meta = {k: provenance[k] for k in FINGERPRINT_KEYS if k in provenance}
    meta.update(normalization="dna_block", decimals=decimals)
    meta["neutral"] = neutral or "every scanned SNV"
    return meta


# ---- counting -----------------------------------------------------------------------------
COUNT_SCHEMA = {"cell": pl.Int64, "key": pl.Int64, "n": pl.Int64}
SUMS = "neutral_sums"  # the metadata key of a counts file's neutral sums per cell
UNRANKED = "unranked_snvs"  # SNVs left off the scales (less than min_context): counts, calibration
FOLD_ROWS = 1 << 20  # partial-count rows held before the first fold
NEUTRAL_SCHEMA = {"cell": pl.Int64, "n": pl.Int64, "key_sum": pl.Int64}


class CalibrationCounts:
    """Counts of one job's SNVs per (cell, score key), and the neutral SNVs' key sums per cell,
    added batch by batch; memory is bounded by cells × score values."""

    def __init__(self) -> None:
        self._counts: list[pl.DataFrame] = []
        self._folded = self._pending = 0  # rows of the folded table, and of the partial ones
        self.neutral_n = np.zeros(N_CELLS, dtype=np.int64)
        self.neutral_sum = np.zeros(N_CELLS, dtype=np.int64)
        self.unranked = 0  # SNVs of bases with less than min_context: on no scale

    def add(self, cells: np.ndarray, keys: np.ndarray, neutral: np.ndarray | None = None) -> None:
        """SNVs with their cells and score keys; `neutral` marks the neutral set (None: all)."""
        batch = pl.DataFrame(
            {"cell": cells, "key": keys}, schema={"cell": pl.Int64, "key": pl.Int64}
        )
        self._counts.append(batch.group_by("cell", "key").len("n").cast({"n": pl.Int64}))
        self._pending += self._counts[-1].height
        # fold the partial counts together once they hold as many rows as the folded table (or
        # FOLD_ROWS): memory stays within a few times the table, each row is folded O(1) times
        if self._pending > max(FOLD_ROWS, self._folded):
            self._counts = [self.counts()]
            self._folded, self._pending = self._counts[0].height, 0
        mask = slice(None) if neutral is None else neutral
        self.neutral_n += np.bincount(cells[mask], minlength=N_CELLS)
        self.neutral_sum += np.bincount(cells[mask], weights=keys[mask], minlength=N_CELLS).astype(
            np.int64
        )

    def counts(self) -> pl.DataFrame:
        if not self._counts:
            return pl.DataFrame(schema=COUNT_SCHEMA)
        return _summed(pl.concat(self._counts))

    def neutral(self) -> pl.DataFrame:
        used = np.flatnonzero(self.neutral_n)
        return pl.DataFrame(
            {"cell": used, "n": self.neutral_n[used], "key_sum": self.neutral_sum[used]},
            schema=NEUTRAL_SCHEMA,
        )

    def write(self, path: str | Path, meta: Mapping[str, Any]) -> None:
        """One Parquet file: the (cell, key, n) counts, the neutral sums in its metadata."""
        table = self.counts().to_arrow()
        extra = {**{k: json.dumps(v) for k, v in meta.items()}, SUMS: self.neutral().write_json()}
        extra[UNRANKED] = json.dumps(self.unranked)
        table = table.replace_schema_metadata({f"carbon_vep.{k}": v for k, v in extra.items()})
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")


def _summed(counts: pl.DataFrame) -> pl.DataFrame:
    return counts.group_by("cell", "key").agg(pl.col("n").sum()).sort("cell", "key")


def read_counts(paths: list[str | Path]) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Every job's counts summed: (counts, neutral sums, the metadata they share, with the
    unranked SNVs summed; none where the counts predate them and rank every SNV)."""
    counts, neutral, meta, unranked = [], [], None, []
    for path in paths:
        table = pq.read_table(path)
        raw = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        own = {
            k.removeprefix("carbon_vep."): json.loads(v)
            for k, v in raw.items()
            if k != f"carbon_vep.{SUMS}"
        }
        unranked.append(own.pop(UNRANKED, None))
        if (unranked[0] is None) != (unranked[-1] is None):
            raise InputError(
                path,
                "counts of two versions (one ranks every SNV, one leaves bases with less than "
                "min_context off): recount every file (snakemake --forcerun count_scan_file)",
            )
        if meta is None:
            meta = own
        elif own != meta:
            raise InputError(path, f"counts made under other settings ({own} vs {meta})")
        counts.append(pl.from_arrow(table))
        neutral.append(pl.read_json(raw[f"carbon_vep.{SUMS}"].encode(), schema=NEUTRAL_SCHEMA))
    summed = _summed(pl.concat(counts)) if counts else pl.DataFrame(schema=COUNT_SCHEMA)
    neutral_sums = (
        pl.concat(neutral).group_by("cell").agg(pl.col("n").sum(), pl.col("key_sum").sum())
        if neutral
        else pl.DataFrame(schema=NEUTRAL_SCHEMA)
    )
    meta = meta or {}
    if unranked and unranked[0] is not None:
        meta[UNRANKED] = sum(unranked)
    return summed, neutral_sums.sort("cell"), meta


def count_snvs(
    counts: CalibrationCounts,
    bases: pl.DataFrame,
    reference: Reference,
    decimals: int,
    neutral: NeutralRegions | None,
    min_context: int,
) -> None:
    """Add the SNVs of per-base rows to `counts` (their printed scores' keys and context cells),
    SNV_BATCH_BASES bases at a time; those of bases with less than `min_context` bp of left
    context only to its unranked count (`ranked`)."""
    for piece in bases.iter_slices(SNV_BATCH_BASES):
        full = piece.filter(ranked(min_context))
        counts.unranked += 3 * (piece.height - full.height)
        if full.height:
            snvs = with_cells(snv_rows(full), reference, decimals, neutral)
            counts.add(*(snvs[c].to_numpy() for c in ("cell", "key", "neutral")))


def neutral_regions(bed: str | None, lengths: dict[str, int]) -> NeutralRegions | None:
    """The neutral BED's intervals on the reference's contigs (aliases as for scan regions)."""
    if bed is None:
        return None
    from carbon_vep.scan.targets import resolve_neutral

    targets, note = resolve_neutral(bed, lengths)
    if note:
        log.warning("%s", note)
    return NeutralRegions(targets)


def count_positions(
    parquet_in: str | Path,
    counts_out: str | Path,
    counts_meta: Mapping[str, Any],
    reference: Reference,
    neutral: NeutralRegions | None,
) -> dict[str, Any]:
    """The SNVs of an output file's Parquet (merge_group's) counted for the calibration, row
    group by row group: from the file, not the chunks, so that a change of the printed precision
    or the neutral set recounts the file and never needs the (temporary) chunks again."""
    decimals, counts, start = int(counts_meta["decimals"]), CalibrationCounts(), time.monotonic()
    min_context = min_context_of(counts_meta)
    parquet = pq.ParquetFile(parquet_in)
    for group in range(parquet.num_row_groups):
        bases = pl.from_arrow(parquet.read_row_group(group))
        count_snvs(counts, bases, reference, decimals, neutral, min_context)
    counts.write(counts_out, counts_meta)
    return {
        "snvs": 3 * parquet.metadata.num_rows,
        "unranked_snvs": counts.unranked,
        "neutral_snvs": int(counts.neutral_n.sum()),
        "count_s": round(time.monotonic() - start, 3),
    }
