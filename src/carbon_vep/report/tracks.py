"""Genome-browser tracks from a scan (export-tracks): one bigWig a track, streamed through
bigtools' writer (pybigtools; UCSC's format). The hub and IGV sessions beside them, and each
track's view range: report.track_hub (docs/tracks.md).

Tracks (one bigWig each, names exactly the scan's contigs, sizes from the reference's index;
a header lists only the contigs with a value in that track, as bigtools' writer does:
docs/tracks.md):
- `score_A` … `score_T`: the SNV score (log m(ref) − log m(alt), FNS marginals; larger = more
  damaging) of changing each base to that base, as UCSC's CADD track has four; no value where
  the base already is that base;
- `phred_A` … `phred_T`: the same SNVs' PHRED (the scan's calibration), when it has one; no
  value at a base scored with less than the scan's min_context (off the scales, as in the TSV);
- `max_score`, `max_phred`: the largest of a base's three SNVs;
- `surprise`: −log p(reference base) from the FNS marginals, in nats: how unexpected the
  genome's own base is to the model.
Bases the scan did not score (N runs, gaps, contig ends it could not reach) have no value,
never zero. A scan's positions are read one row group at a time (2^20 bases), so memory does
not grow with the genome. No torch here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from carbon_vep import atomic
from carbon_vep.columns import SCAN_BASES
from carbon_vep.errors import InputError
from carbon_vep.genome.reference import open_reference
from carbon_vep.report.track_list import Track, track_set
from carbon_vep.scan.calibrate import Calibration
from carbon_vep.scan.record import read_scan
from carbon_vep.scan.snvs import at_base, score_key


# ---- values per base ------------------------------------------------------------------------
def base_values(bases: pl.DataFrame, calibration: Calibration | None) -> dict[str, np.ndarray]:
    """Every track's value at each base of `bases` (NaN = no value): the same float32 score the
    scan's SNV rows have (scan.snvs.snv_rows), its PHRED as the TSV prints it (none at a base
    off the calibration's scales: Calibration.on_scales)."""
    lp_ref = at_base(pl.col("ref"), "log_fns_{}").cast(pl.Float32)
    scores = bases.select(
        *((lp_ref - pl.col(f"log_fns_{b}").cast(pl.Float32)).alias(b) for b in SCAN_BASES),
        (-lp_ref).alias("surprise"),
    )
    out: dict[str, np.ndarray] = {"surprise": scores["surprise"].to_numpy().astype(np.float32)}
    is_ref = np.stack([bases["ref"].to_numpy() == b for b in SCAN_BASES], axis=1)
    score = np.stack([scores[b].to_numpy() for b in SCAN_BASES], axis=1).astype(np.float32)
    score[is_ref] = np.nan
    for i, b in enumerate(SCAN_BASES):
        out[f"score_{b}"] = score[:, i]
    out["max_score"] = np.nanmax(score, axis=1)
    if calibration is not None:
        keys = (
            pl.DataFrame({"s": score.reshape(-1)})
            .select(score_key(pl.col("s").fill_nan(0.0), calibration.decimals))
            .to_series()
            .to_numpy()
        )
        phred = calibration.phred(keys).reshape(score.shape).astype(np.float32)
        phred[is_ref] = np.nan
        on_scales = bases.with_columns(calibration.on_scales.alias("_on"))["_on"].to_numpy()
        phred[~on_scales] = np.nan
        for i, b in enumerate(SCAN_BASES):
            out[f"phred_{b}"] = phred[:, i]
        out["max_phred"] = np.fmax.reduce(phred, axis=1)  # NaN only where all three are
    return out


def _row_groups(scan_dir: Path, record: Mapping[str, Any]) -> Iterator[pl.DataFrame]:
    """The scan's per-base rows in reference order, a row group at a time."""
    for entry in record["files"]:
        path = scan_dir / "positions" / f"{entry['name']}.parquet"
        if not path.is_file():
            raise InputError(path, "missing: the scan's merge has not run (or was moved)")
        parquet = pq.ParquetFile(path)
        columns = ["chrom", "pos", "ref", "context_bp", *(f"log_fns_{b}" for b in SCAN_BASES)]
        for group in range(parquet.num_row_groups):
            yield pl.from_arrow(parquet.read_row_group(group, columns=columns))


# ---- the bigWigs ------------------------------------------------------------------------------
def chrom_sizes(record: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The scan's contigs with their lengths in the reference's index, in reference order."""
    with open_reference(record["reference"]) as reference:
        lengths = reference.lengths
    missing = sorted(set(record["contigs"]) - set(lengths))
    if missing:
        raise InputError(
            record["reference"],
            f"lacks the scan's contig(s) {missing[:3]}: not the genome the scan read",
        )
    return [(name, lengths[name]) for name in lengths if name in record["contigs"]]


def runs(pos: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bedGraph runs of 1-based positions with a value: consecutive bases with the same value
    become one (start, end) entry, 0-based half-open (what a bigWig stores)."""
    if len(pos) == 0:
        return pos, pos, values
    new = np.ones(len(pos), dtype=bool)
    new[1:] = (np.diff(pos) != 1) | (values[1:] != values[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(pos)) - 1
    return pos[first] - 1, pos[last], values[first]


def _entries(
    scan_dir: Path, record: Mapping[str, Any], track: str, calibration: Calibration | None
) -> Iterator[tuple[str, int, int, float]]:
    """(chrom, start, end, value) of every run of bases with one value, in reference order,
    one row group of the scan at a time; bases without a value get no entry (not zero)."""
    for group in _row_groups(scan_dir, record):
        # the PHRED lookup only for the PHRED tracks: a job writes one track
        needs_phred = "phred" in track
        values = base_values(group, calibration if needs_phred else None)[track]
        for (chrom,), part in (
            group.with_row_index("i")
            .partition_by("chrom", as_dict=True, maintain_order=True)
            .items()
        ):
            rows = part["i"].to_numpy()
            keep = ~np.isnan(values[rows])
            starts, ends, kept = runs(part["pos"].to_numpy()[keep], values[rows][keep])
            yield from zip(
                [chrom] * len(starts),
                starts.tolist(),
                ends.tolist(),
                kept.astype(np.float64).tolist(),
                strict=True,
            )


def write_bigwig(
    scan_dir: Path,
    out_dir: Path,
    track: Track,
    calibration: Calibration | None,
    record: Mapping[str, Any],
) -> Path:
    """One track's bigWig, streamed through bigtools' writer (pybigtools: base-level data and
    its zoom levels with memory that does not grow with the genome), under a temporary name
    renamed when complete and readable. A track with no value at any base is refused
    (`_no_values`): no bigWig can hold it."""
    import pybigtools

    final = out_dir / f"{track.name}.bw"
    entries = _entries(scan_dir, record, track.name, calibration)
    first = next(entries, None)
    if first is None:
        # given no entry, bigtools' writer prints "Input bedGraph is empty." and leaves a file
        # no reader opens: refuse before writing anything
        raise InputError(scan_dir, _no_values(track.name, record, calibration))
    with atomic.atomic_path(final, suffix=".bw") as tmp:  # the writer wants a .bw name
        writer = pybigtools.open(str(tmp), "w")
        writer.write(dict(chrom_sizes(record)), itertools.chain([first], entries))
        check_bigwig(tmp, final)
    return final


def _no_values(track: str, record: Mapping[str, Any], calibration: Calibration | None) -> str:
    """Why `track` has no value at any base of the scan, and what to change."""
    scored = sum(contig["scored_bp"] for contig in record["contigs"].values())
    about = f"track {track} of scan {record.get('scan')!r} has no value at any base"
    if scored == 0:
        return f"{about}: the scan scored no base (its regions hold only N); nothing written"
    alt = track[-1] if track.startswith(("score_", "phred_")) else None
    if "phred" in track and calibration is not None:
        context = f"the scan's min_context ({calibration.min_context:,} bp) of left context"
        if calibration.raw.total == 0 or alt is None:
            why = f"none of its {scored:,} scored bases had {context}, so none has a PHRED"
        else:
            why = (
                f"every base it scored with {context} (the bases with a PHRED) is {alt}, so no "
                f"SNV with a PHRED changes one to {alt}"
            )
        return (
            f"{about}: {why} (docs/calibration.md); lower the scan's min_context or scan "
            "longer contigs, or set the scan's tracks: false; nothing written"
        )
    if alt:
        return (
            f"{about}: every base the scan scored ({scored:,}) is {alt}, so no SNV changes one "
            f"to {alt}; scan regions holding other bases, or set the scan's tracks: false; "
            "nothing written"
        )
    return f"{about} ({scored:,} bases scored); nothing written"


def check_bigwig(path: Path, name: Path | None = None) -> None:
    """Refuse a bigWig no reader opens (pybigtools reads its header), named `name` (default
    `path`): bigtools' writer can return normally and leave one."""
    import pybigtools

    try:
        with pybigtools.open(str(path)) as bigwig:
            bigwig.chroms()
    except (pybigtools.BBIReadError, ValueError) as err:
        name = name or path
        raise InputError(
            name,
            f"not a readable bigWig ({err}); export its track again (carbon-vep export-tracks "
            f"--track {name.stem})",
        ) from None


def scan_inputs(scan_dir: Path) -> tuple[dict[str, Any], Calibration | None, list[Track]]:
    """A scan's record (scan.json), its calibration (None if uncalibrated) and its tracks."""
    record = read_scan(scan_dir)
    calibration_dir = scan_dir / "calibration"
    calibration = Calibration.read(calibration_dir) if calibration_dir.is_dir() else None
    return record, calibration, track_set(calibration is not None)


def track_names(scan_dir: str | Path) -> list[str]:
    """The tracks a scan gets (PHRED ones when it is calibrated)."""
    return [t.name for t in scan_inputs(Path(scan_dir))[2]]


def export_tracks(
    scan_dir: str | Path, out_dir: str | Path, only: Sequence[str] | None = None
) -> list[str]:
    """The bigWigs of a scan's output folder into `out_dir`: every track, or those named in
    `only` (the workflow runs one job a track); the names written."""
    scan_dir, out_dir = Path(scan_dir), Path(out_dir)
    record, calibration, tracks = scan_inputs(scan_dir)
    unknown = sorted(set(only or ()) - {t.name for t in tracks})
    if unknown:
        raise InputError(
            scan_dir,
            f"no track(s) {unknown} for this scan; its tracks are {[t.name for t in tracks]}",
        )
    chosen = [t for t in tracks if only is None or t.name in only]
    for track in chosen:
        write_bigwig(scan_dir, out_dir, track, calibration, record)
    return [t.name for t in chosen]
