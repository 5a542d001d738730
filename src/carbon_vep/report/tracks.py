"""Genome-browser tracks from a scan (export-tracks): bigWig files written with pyBigWig
(libBigWig, UCSC's format), a UCSC track hub beside them, and an IGV session and igv.js
configuration that open them with the reference (docs/tracks.md).

Tracks (one bigWig each, every contig of the scan, names exactly the scan's contigs, sizes from
the reference's index):
- `score_A` … `score_T`: the SNV score (log m(ref) − log m(alt), FNS marginals; larger = more
  damaging) of changing each base to that base, as UCSC's CADD track has four; no value where
  the base already is that base;
- `phred_A` … `phred_T`: the same SNVs' PHRED (the scan's calibration), when it has one;
- `max_score`, `max_phred`: the largest of a base's three SNVs;
- `surprise`: −log p(reference base) from the FNS marginals, in nats: how unexpected the
  genome's own base is to the model.
Bases the scan did not score (N runs, gaps, contig ends it could not reach) have no value,
never zero. A scan's positions are read one row group at a time (2^20 bases), so memory does
not grow with the genome. No torch here.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from carbon_vep import atomic
from carbon_vep.columns import SCAN_BASES
from carbon_vep.errors import InputError
from carbon_vep.genome.builds import canonical_build
from carbon_vep.genome.reference import open_reference
from carbon_vep.report.track_list import Track, track_set
from carbon_vep.scan.calibrate import Calibration
from carbon_vep.scan.outputs import read_scan
from carbon_vep.scan.snvs import at_base, score_key

# UCSC's assembly names for the builds it hosts (canonical build -> UCSC `genome` line)
UCSC_GENOMES = {"GRCh38": "hg38", "GRCh37": "hg19", "NCBI36": "hg18", "GRCm39": "mm39",
                "GRCm38": "mm10"}  # fmt: skip
HUB_EMAIL = "not-set@example.org"  # hub.txt needs a contact; export-tracks --email sets it


# ---- values per base ------------------------------------------------------------------------
def base_values(bases: pl.DataFrame, calibration: Calibration | None) -> dict[str, np.ndarray]:
    """Every track's value at each base of `bases` (NaN = no value): the same float32 score the
    scan's SNV rows have (scan.snvs.snv_rows), its PHRED as the TSV prints it."""
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
        for i, b in enumerate(SCAN_BASES):
            out[f"phred_{b}"] = phred[:, i]
        out["max_phred"] = np.nanmax(phred, axis=1)
    return out


def _row_groups(scan_dir: Path, record: Mapping[str, Any]) -> Iterator[pl.DataFrame]:
    """The scan's per-base rows in reference order, a row group at a time."""
    for entry in record["files"]:
        path = scan_dir / "positions" / f"{entry['name']}.parquet"
        if not path.is_file():
            raise InputError(path, "missing: the scan's merge has not run (or was moved)")
        parquet = pq.ParquetFile(path)
        columns = ["chrom", "pos", "ref", *(f"log_fns_{b}" for b in SCAN_BASES)]
        for group in range(parquet.num_row_groups):
            yield pl.from_arrow(parquet.read_row_group(group, columns=columns))


# ---- the bigWigs ------------------------------------------------------------------------------
def chrom_sizes(record: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The scan's contigs with their lengths in the reference's index, in reference order."""
    with open_reference(record["reference"]) as reference:
        lengths = reference.lengths
    missing = sorted(set(record["contigs"]) - set(lengths))
    if missing:
        raise InputError(record["reference"], f"lacks the scan's contig(s) {missing[:3]}: not "
                         "the genome the scan read")  # fmt: skip
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


def _entries(scan_dir: Path, record: Mapping[str, Any], track: str,
             calibration: Calibration | None) -> Iterator[tuple[str, int, int, float]]:  # fmt: skip
    """(chrom, start, end, value) of every run of bases with one value, in reference order,
    one row group of the scan at a time; bases without a value get no entry (not zero)."""
    for group in _row_groups(scan_dir, record):
        # the PHRED lookup only for the PHRED tracks: a job writes one track
        needs_phred = "phred" in track
        values = base_values(group, calibration if needs_phred else None)[track]
        for (chrom,), part in group.with_row_index("i").partition_by(
            "chrom", as_dict=True, maintain_order=True
        ).items():  # fmt: skip
            rows = part["i"].to_numpy()
            keep = ~np.isnan(values[rows])
            starts, ends, kept = runs(part["pos"].to_numpy()[keep], values[rows][keep])
            yield from zip([chrom] * len(starts), starts.tolist(), ends.tolist(),
                           kept.astype(np.float64).tolist(), strict=True)  # fmt: skip


def write_bigwig(scan_dir: Path, out_dir: Path, track: Track, calibration: Calibration | None,
                 record: Mapping[str, Any]) -> Path:  # fmt: skip
    """One track's bigWig, streamed through bigtools' writer (pybigtools: base-level data and
    its zoom levels with memory that does not grow with the genome), under a temporary name
    renamed when complete."""
    import pybigtools

    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{track.name}.bw"
    tmp = out_dir / f".{track.name}.tmp-{os.getpid()}.bw"  # the writer wants a .bw name
    try:
        writer = pybigtools.open(str(tmp), "w")
        writer.write(dict(chrom_sizes(record)), _entries(scan_dir, record, track.name, calibration))
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


# ---- hub, IGV ----------------------------------------------------------------------------------
def ucsc_genome(build: str) -> str | None:
    return UCSC_GENOMES.get(canonical_build(build))


def hub_files(
    tracks: Sequence[Track], record: Mapping[str, Any], name: str, email: str = HUB_EMAIL
) -> dict[str, str]:
    """hub.txt, genomes.txt and trackDb.txt of a UCSC track hub (for a build UCSC hosts)."""
    genome = ucsc_genome(record["build"]) or record["build"]
    about = (f"model {record.get('model')} (revision {record.get('revision')}), scan "
             f"{record.get('scan')}, tiles {record.get('tile_bp')} bp")  # fmt: skip
    hub = (f"hub {name}\nshortLabel carbon-vep {name}\nlongLabel carbon-vep scan {name}: "
           f"{about}\ngenomesFile genomes.txt\nemail {email}\n")  # fmt: skip
    genomes = f"genome {genome}\ntrackDb trackDb.txt\n"
    scores = [t for t in tracks if t.name.startswith("score_")]
    phreds = [t for t in tracks if t.name.startswith("phred_")]
    stanzas = []
    composites = (("scores", scores, "scores by alt", "SNV scores by alternative base"),
                  ("phreds", phreds, "PHRED by alt", "SNV PHRED by alternative base"))  # fmt: skip
    for parent, members, label, long_label in composites:
        if not members:
            continue
        stanzas.append(
            f"track {name}_{parent}\ncompositeTrack on\nshortLabel {label}\n"
            f"longLabel {long_label} ({about})\ntype bigWig\nvisibility full\n"
            f"autoScale off\nviewLimits {members[0].view[0]:g}:{members[0].view[1]:g}\n"
            "maxHeightPixels 100:40:8\n"
        )  # fmt: skip
        stanzas += [_stanza(t, name, parent=f"{name}_{parent}") for t in members]
    stanzas += [_stanza(t, name) for t in tracks if t not in scores and t not in phreds]
    return {"hub.txt": hub, "genomes.txt": genomes, "trackDb.txt": "\n".join(stanzas)}


def _stanza(track: Track, hub: str, parent: str | None = None) -> str:
    lines = [f"track {hub}_{track.name}", f"bigDataUrl {track.name}.bw",
             f"shortLabel {track.short}", f"longLabel {track.long}", "type bigWig",
             f"color {track.colour}", "autoScale off",
             f"viewLimits {track.view[0]:g}:{track.view[1]:g}", "visibility full"]  # fmt: skip
    if parent:
        lines.insert(1, f"parent {parent} on")
    return "\n".join(lines) + "\n"


def igv_session(tracks: Sequence[Track], record: Mapping[str, Any]) -> str:
    """An IGV desktop session (XML): the scan's reference and every track, by relative path."""
    reference = record["reference"]
    resources = "".join(f"<Resource path={quoteattr(t.name + '.bw')} name={quoteattr(t.short)}/>"
                        for t in tracks)  # fmt: skip
    panel = "".join(
        f"<Track attributeKey={quoteattr(t.name + '.bw')} id={quoteattr(t.name + '.bw')} "
        f'name={quoteattr(t.short)} color={quoteattr(t.colour)} autoScale="false">'
        f'<DataRange baseline="0.0" maximum="{t.view[1]:g}" minimum="{t.view[0]:g}" '
        f'type="LINEAR"/></Track>'
        for t in tracks
    )
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Session genome={quoteattr(reference)} '
            f'version="8"><Resources>{resources}</Resources><Panel name="DataPanel">{panel}'
            "</Panel></Session>\n")  # fmt: skip


def igv_js(tracks: Sequence[Track], record: Mapping[str, Any]) -> dict[str, Any]:
    """The same as an igv.js browser configuration (paths relative to the tracks folder)."""
    reference = record["reference"]
    return {
        "reference": {"id": record["build"], "fastaURL": reference, "indexURL": f"{reference}.fai"},
        "tracks": [
            {"name": t.short, "type": "wig", "format": "bigwig", "url": f"{t.name}.bw",
             "color": f"rgb({t.colour})", "autoscale": False, "min": t.view[0], "max": t.view[1]}
            for t in tracks
        ],
    }  # fmt: skip


def _scan_inputs(scan_dir: Path) -> tuple[dict[str, Any], Calibration | None, list[Track]]:
    record = read_scan(scan_dir)
    calibration_dir = scan_dir / "calibration"
    calibration = Calibration.read(calibration_dir) if calibration_dir.is_dir() else None
    return record, calibration, track_set(calibration is not None)


def track_names(scan_dir: str | Path) -> list[str]:
    """The tracks a scan gets (PHRED ones when it is calibrated)."""
    return [t.name for t in _scan_inputs(Path(scan_dir))[2]]


def export_tracks(
    scan_dir: str | Path, out_dir: str | Path, only: Sequence[str] | None = None
) -> list[str]:
    """The bigWigs of a scan's output folder into `out_dir`: every track, or those named in
    `only` (the workflow runs one job a track); the names written."""
    scan_dir, out_dir = Path(scan_dir), Path(out_dir)
    record, calibration, tracks = _scan_inputs(scan_dir)
    unknown = sorted(set(only or ()) - {t.name for t in tracks})
    if unknown:
        raise InputError(scan_dir, f"no track(s) {unknown} for this scan; its tracks are "
                         f"{[t.name for t in tracks]}")  # fmt: skip
    chosen = [t for t in tracks if only is None or t.name in only]
    for track in chosen:
        write_bigwig(scan_dir, out_dir, track, calibration, record)
    return [t.name for t in chosen]


def write_hub(scan_dir: str | Path, out_dir: str | Path, email: str = HUB_EMAIL) -> dict:
    """The hub, the IGV session, the igv.js configuration and tracks.json beside a scan's
    complete set of bigWigs; the summary."""
    scan_dir, out_dir = Path(scan_dir), Path(out_dir)
    record, _, tracks = _scan_inputs(scan_dir)
    missing = [t.name for t in tracks if not (out_dir / f"{t.name}.bw").is_file()]
    if missing:
        raise InputError(out_dir, f"lacks the bigWig(s) of {missing}: export them first")
    name = "cvep_" + re.sub(r"[^A-Za-z0-9_]", "_", str(record.get("scan") or scan_dir.parent.name))
    for file, text in hub_files(tracks, record, name, email).items():
        atomic.write_text(text, out_dir / file)
    atomic.write_text(igv_session(tracks, record), out_dir / "igv_session.xml")
    atomic.write_text(json.dumps(igv_js(tracks, record), indent=2) + "\n", out_dir / "igv.json")
    summary = {
        "tracks": [t.name for t in tracks],
        "bases": sum(n["scored_bp"] for n in record["contigs"].values()),
        "ucsc_genome": ucsc_genome(record["build"]),
        "bigwig_bytes": sum((out_dir / f"{t.name}.bw").stat().st_size for t in tracks),
    }
    atomic.write_json(summary, out_dir / "tracks.json")
    return summary
