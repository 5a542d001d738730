"""A scan's tracks as browsers open them: the view range of each track from the scan's own
scores, a UCSC track hub (hub.txt, genomes.txt, trackDb.txt), an IGV desktop session and an
igv.js configuration, with the reference named so the folder works where it is published
(`session_reference`; docs/tracks.md). The bigWigs themselves: report.tracks. No torch here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from carbon_vep import atomic
from carbon_vep.config.entries import TRACK_REFERENCES
from carbon_vep.errors import InputError
from carbon_vep.genome.builds import UCSC_GENOMES, ucsc_genome
from carbon_vep.genome.reference import index_paths
from carbon_vep.report.track_list import Track
from carbon_vep.report.tracks import check_bigwig, export_tracks, scan_inputs
from carbon_vep.scan.calibrate import Calibration

# UCSC's assembly names for the builds it hosts (canonical build -> UCSC `genome` line)
HUB_EMAIL = "not-set@example.org"  # hub.txt needs a contact; export-tracks --email sets it
log = logging.getLogger("carbon_vep")


# ---- view ranges ------------------------------------------------------------------------------
VIEW_FRACTIONS = (0.001, 0.999)  # the view covers the SNV scores from the 0.1th to 99.9th centile
SUMMARY_SDS = 4  # without a calibration: the mean ± 4 sd of the track's bases, within min-max


def outward(value: float, digits: int = 2) -> float:
    """`value` rounded away from 0 to `digits` significant digits (a readable axis label that
    still covers it)."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    exponent = math.floor(math.log10(abs(value))) - (digits - 1)
    step = 10.0**exponent
    rounded = math.ceil(value / step) if value > 0 else math.floor(value / step)
    return round(rounded * step, max(0, -exponent))


def around_zero(low: float, high: float) -> tuple[float, float]:
    """A view from `low` to `high` that includes 0 (the score's neutral value), rounded
    outward; (-1, 1) when the data leave it empty."""
    low, high = outward(min(low, 0.0)), outward(max(high, 0.0))
    return (low, high) if low < high else (-1.0, 1.0)


def summary_range(path: Path) -> tuple[float, float]:
    """The range of a bigWig's values to show, from its header's summary (no data read): the
    mean ± SUMMARY_SDS sd, within the track's min and max."""
    import pybigtools

    with pybigtools.open(str(path)) as bigwig:
        summary = bigwig.info()["summary"]
    spread = SUMMARY_SDS * summary["std"]
    low = max(summary["min"], summary["mean"] - spread)
    return low, min(summary["max"], summary["mean"] + spread)


def data_views(
    tracks: Sequence[Track], calibration: Calibration | None, out_dir: Path
) -> list[Track]:
    """`tracks` with view ranges from the scan's data: the SNV score tracks (each alternate
    base and the maximum: one scale, so they compare) from the calibration's counts of every
    SNV score (VIEW_FRACTIONS), or from their bigWigs' summaries without a calibration; the
    surprise track from 0 to its own summary's upper end; PHRED tracks unchanged."""
    scores = [t for t in tracks if t.name.startswith("score_") or t.name == "max_score"]
    if calibration is not None:
        low, high = (calibration.raw.quantile(f, calibration.decimals) for f in VIEW_FRACTIONS)
    else:
        ranges = [summary_range(out_dir / f"{t.name}.bw") for t in scores]
        low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
    views = {t.name: around_zero(low, high) for t in scores}
    if any(t.name == "surprise" for t in tracks):
        views["surprise"] = around_zero(0.0, summary_range(out_dir / "surprise.bw")[1])
    return [dataclasses.replace(t, view=views.get(t.name, t.view)) for t in tracks]


# ---- hub, IGV ----------------------------------------------------------------------------------
def _model_label(model: str | None) -> str | None:
    """A model as a published label: a Hub id as it is, a local checkpoint by its folder name
    (a local path means nothing where the hub is read)."""
    return Path(model).name if model and os.path.isabs(model) else model


def hub_files(
    tracks: Sequence[Track], record: Mapping[str, Any], name: str, email: str = HUB_EMAIL
) -> dict[str, str]:
    """hub.txt, genomes.txt and trackDb.txt of a UCSC track hub (for a build UCSC hosts)."""
    genome = ucsc_genome(record["build"]) or record["build"]
    about = (
        f"model {_model_label(record.get('model'))} (revision {record.get('revision')}), scan "
        f"{record.get('scan')}, tiles {record.get('tile_bp')} bp"
    )
    hub = (
        f"hub {name}\nshortLabel carbon-vep {name}\nlongLabel carbon-vep scan {name}: "
        f"{about}\ngenomesFile genomes.txt\nemail {email}\n"
    )
    genomes = f"genome {genome}\ntrackDb trackDb.txt\n"
    scores = [t for t in tracks if t.name.startswith("score_")]
    phreds = [t for t in tracks if t.name.startswith("phred_")]
    stanzas = []
    composites = (
        ("scores", scores, "scores by alt", "SNV scores by alternative base"),
        ("phreds", phreds, "PHRED by alt", "SNV PHRED by alternative base"),
    )
    for parent, members, label, long_label in composites:
        if not members:
            continue
        stanzas.append(
            f"track {name}_{parent}\ncompositeTrack on\nshortLabel {label}\n"
            f"longLabel {long_label} ({about})\ntype bigWig\nvisibility full\n"
            f"autoScale off\nviewLimits {members[0].view[0]:g}:{members[0].view[1]:g}\n"
            "maxHeightPixels 100:40:8\n"
        )
        stanzas += [_stanza(t, name, parent=f"{name}_{parent}") for t in members]
    stanzas += [_stanza(t, name) for t in tracks if t not in scores and t not in phreds]
    return {"hub.txt": hub, "genomes.txt": genomes, "trackDb.txt": "\n".join(stanzas)}


def _stanza(track: Track, hub: str, parent: str | None = None) -> str:
    lines = [
        f"track {hub}_{track.name}",
        f"bigDataUrl {track.name}.bw",
        f"shortLabel {track.short}",
        f"longLabel {track.long}",
        "type bigWig",
        f"color {track.colour}",
        "autoScale off",
        f"viewLimits {track.view[0]:g}:{track.view[1]:g}",
        "visibility full",
    ]
    if parent:
        lines.insert(1, f"parent {parent} on")
    return "\n".join(lines) + "\n"


# ---- the reference a session opens -------------------------------------------------------------
@dataclass(frozen=True)
class SessionReference:
    """How a session names its reference: a genome id IGV and UCSC host (`genome`), or a FASTA
    and its index by paths relative to the tracks folder."""

    genome: str | None = None
    fasta: str | None = None
    index: str | None = None
    gzi: str | None = None  # a bgzip-compressed FASTA's block index


def session_reference(record: Mapping[str, Any], out_dir: Path, mode: str) -> SessionReference:
    """The reference of the scan's sessions (no absolute path, so the folder can be published
    or sent): `genome` names the build's id (hg19, hg38, mm10, ...); `relative` the scan's
    FASTA by a path relative to `out_dir`; `copy` puts the FASTA and its index into `out_dir`
    (a hard link where the filesystem allows); `auto` is `genome` for a build IGV and UCSC
    host, else `relative`."""
    if mode not in TRACK_REFERENCES:
        raise ValueError(f"reference mode {mode!r}: one of {TRACK_REFERENCES}")
    genome = ucsc_genome(record["build"])
    mode = ("genome" if genome else "relative") if mode == "auto" else mode
    reference = Path(record["reference"])
    if mode == "genome":
        if genome is None:
            raise InputError(
                out_dir,
                f"tracks_reference genome: build {record['build']!r} is "
                f"none IGV and UCSC host ({', '.join(UCSC_GENOMES.values())}); use "
                "relative or copy",
            )
        return SessionReference(genome=genome)
    files = [reference] if reference.suffix == ".parquet" else [reference, *index_paths(reference)]
    files = [f for f in files if f is not None]
    if len(files) < 2 or not all(f.is_file() for f in files):
        raise InputError(
            reference,
            f"tracks_reference {mode}: a genome browser reads an "
            "indexed FASTA (the file and its .fai), not this; name the build's "
            "genome id instead",
        )
    if mode == "copy":
        for source in files:
            _link_or_copy(source, out_dir / source.name)
        files = [out_dir / f.name for f in files]
    paths = [os.path.relpath(f, out_dir) for f in files]
    return SessionReference(fasta=paths[0], index=paths[1], gzi=(paths[2:] or [None])[0])


def _link_or_copy(source: Path, dest: Path) -> None:
    """`dest` as `source`'s contents: a hard link (no copy of a genome) where both sit on one
    filesystem, else a copy; never half-written."""
    with atomic.atomic_path(dest) as tmp:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)


def igv_session(tracks: Sequence[Track], reference: SessionReference) -> str:
    """An IGV desktop session (XML): the reference (a genome id, or the FASTA by a path relative
    to the session) and every track, by relative path."""
    genome = reference.genome or reference.fasta
    resources = "".join(
        f"<Resource path={quoteattr(t.name + '.bw')} name={quoteattr(t.short)}/>" for t in tracks
    )
    panel = "".join(
        f"<Track attributeKey={quoteattr(t.name + '.bw')} id={quoteattr(t.name + '.bw')} "
        f'name={quoteattr(t.short)} color={quoteattr(t.colour)} autoScale="false">'
        f'<DataRange baseline="0.0" maximum="{t.view[1]:g}" minimum="{t.view[0]:g}" '
        f'type="LINEAR"/></Track>'
        for t in tracks
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Session genome={quoteattr(genome)} '
        f'version="8"><Resources>{resources}</Resources><Panel name="DataPanel">{panel}'
        "</Panel></Session>\n"
    )


def igv_js(
    tracks: Sequence[Track], record: Mapping[str, Any], reference: SessionReference
) -> dict[str, Any]:
    """The same as an igv.js browser configuration (paths relative to the tracks folder: a page
    served from it opens them)."""
    if reference.genome:
        where: dict[str, Any] = {"genome": reference.genome}
    else:
        urls = {"fastaURL": reference.fasta, "indexURL": reference.index}
        if reference.gzi:
            urls["compressedIndexURL"] = reference.gzi
        # no genome of IGV's own list is needed: igv.js does not fetch it (from GitHub)
        where = {"reference": {"id": record["build"], **urls}, "loadDefaultGenomes": False}
    return {
        **where,
        "tracks": [
            {
                "name": t.short,
                "type": "wig",
                "format": "bigwig",
                "url": f"{t.name}.bw",
                "color": f"rgb({t.colour})",
                "autoscale": False,
                "min": t.view[0],
                "max": t.view[1],
            }
            for t in tracks
        ],
    }


def write_hub(
    scan_dir: str | Path, out_dir: str | Path, email: str = HUB_EMAIL, reference_mode: str = "auto"
) -> dict:
    """The hub, the IGV session, the igv.js configuration and tracks.json beside a scan's
    complete set of bigWigs (the sessions' reference: `session_reference`); the summary."""
    scan_dir, out_dir = Path(scan_dir), Path(out_dir)
    record, calibration, tracks = scan_inputs(scan_dir)
    missing = [t.name for t in tracks if not (out_dir / f"{t.name}.bw").is_file()]
    if missing:
        raise InputError(out_dir, f"lacks the bigWig(s) of {missing}: export them first")
    for track in tracks:  # one left by an older carbon-vep may be unreadable: never publish it
        check_bigwig(out_dir / f"{track.name}.bw")
    tracks = data_views(tracks, calibration, out_dir)
    name = "cvep_" + re.sub(r"[^A-Za-z0-9_]", "_", str(record.get("scan") or scan_dir.parent.name))
    for file, text in hub_files(tracks, record, name, email).items():
        atomic.write_text(text, out_dir / file)
    reference = session_reference(record, out_dir, reference_mode)
    atomic.write_text(igv_session(tracks, reference), out_dir / "igv_session.xml")
    browser = igv_js(tracks, record, reference)
    atomic.write_text(json.dumps(browser, indent=2) + "\n", out_dir / "igv.json")
    summary = {
        "tracks": [t.name for t in tracks],
        "bases": sum(n["scored_bp"] for n in record["contigs"].values()),
        "ucsc_genome": ucsc_genome(record["build"]),
        "reference": dataclasses.asdict(reference),
        "bigwig_bytes": sum((out_dir / f"{t.name}.bw").stat().st_size for t in tracks),
        "views": {t.name: list(t.view) for t in tracks},
    }
    atomic.write_json(summary, out_dir / "tracks.json")
    return summary


def export_scan_tracks(
    scan_dir: str | Path,
    out_dir: str | Path,
    only: Sequence[str] | None,
    hub_only: bool,
    email: str | None,
    reference_mode: str,
) -> None:
    """A scan's tracks into `out_dir`: its bigWigs (`export_tracks`: all, or those in `only`),
    then the hub and IGV files (`write_hub`), which need every bigWig: written when all of them
    are, or alone when `hub_only` (beside bigWigs already written)."""
    if not hub_only:
        written = export_tracks(scan_dir, out_dir, only)
        log.info("%s: %s", out_dir, ", ".join(f"{name}.bw" for name in written))
    if hub_only or only is None:
        summary = write_hub(scan_dir, out_dir, email or HUB_EMAIL, reference_mode)
        log.info(
            "%s: hub.txt, igv_session.xml, igv.json for %d tracks (%s bytes of bigWig)",
            out_dir,
            len(summary["tracks"]),
            f"{summary['bigwig_bytes']:,}",
        )
