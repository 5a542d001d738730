"""A track with no value at any base is refused, not written: bigtools' writer, given no value,
prints "Input bedGraph is empty.", returns normally and leaves a file no reader opens, which
used to be renamed into place as the track. The hub refuses such a file left by an older
carbon-vep. The scans here are written by hand (scan.json, the merged Parquet, and the
calibration counted and built by the workflow's own steps), so no model runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from support.files import write_fasta

from carbon_vep.cli import main
from carbon_vep.config.stages import CalibrationSettings
from carbon_vep.scan import jobs
from carbon_vep.scan.record import RECORD_LAYOUT, SCAN_RECORD

MIN_CONTEXT = 20
PROVENANCE = {
    "model": "hand-made",
    "revision": "r1",
    "dtype": "float32",
    "upcast_output_layer": False,
    "tile_bp": 60,
    "min_context": MIN_CONTEXT,
}


def _scan(folder: Path, contigs: dict[str, str], calibrated: bool) -> Path:
    """A merged scan of `contigs` (one output file), every ACGT base scored with the left context
    it has on its contig (as a scan starting at the contig's first base does), random marginals;
    calibrated through the count and calibrate steps the workflow runs."""
    fasta = write_fasta(folder / "genome.fa", contigs)
    scan_dir = folder / "scan"
    (scan_dir / "positions").mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = [
        (name, pos, base, pos - 1)
        for name, seq in contigs.items()
        for pos, base in enumerate(seq, start=1)
        if base in "ACGT"
    ]
    log_fns = np.log(rng.dirichlet(np.ones(4), size=len(rows))).astype(np.float16)
    positions = pl.DataFrame(
        {
            "chrom": [r[0] for r in rows],
            "pos": [r[1] for r in rows],
            "ref": [r[2] for r in rows],
            "context_bp": [r[3] for r in rows],
            **{f"log_fns_{b}": log_fns[:, i] for i, b in enumerate("ACGT")},
        },
        schema_overrides={"pos": pl.Int64, "context_bp": pl.Int32},
    )
    parquet = scan_dir / "positions" / "all.parquet"
    positions.write_parquet(parquet)
    record = {
        **PROVENANCE,
        "layout": RECORD_LAYOUT,
        "scan": "handmade",
        "build": "hg38",
        "reference": str(fasta),
        "contigs": {
            name: {"file": "all", "length": len(seq), "scored_bp": sum(b in "ACGT" for b in seq)}
            for name, seq in contigs.items()
        },
        "files": [{"name": "all", "contigs": list(contigs)}],
    }
    (scan_dir / SCAN_RECORD).write_text(json.dumps(record))
    if calibrated:
        settings = CalibrationSettings(context_min_count=1)
        counts = scan_dir / "calibration" / "counts" / "all.parquet"
        counts.parent.mkdir(parents=True)
        jobs.count_file(str(parquet), str(fasta), PROVENANCE, 3, settings, str(counts))
        jobs.calibrate([str(counts)], settings, str(scan_dir / "calibration"))
    return scan_dir


def _export(scan_dir: Path, out: Path, *extra: str) -> int:
    return main(["export-tracks", "--scan", str(scan_dir), "--out", str(out), *extra])


def _readable_chroms(path: Path) -> dict[str, int]:
    import pybigtools

    with pybigtools.open(str(path)) as bigwig:
        return bigwig.chroms()


# every base with its min_context of left context is an A: no SNV with a PHRED changes one to A
MIXED_THEN_A = "ACGT" * 5 + "A" * 20


@pytest.mark.parametrize(
    ("contigs", "calibrated", "track", "why"),
    [
        (
            {"chrP": MIXED_THEN_A},
            True,
            "phred_A",
            f"every base it scored with the scan's min_context ({MIN_CONTEXT} bp) of left "
            "context (the bases with a PHRED) is A",
        ),
        ({"chrP": "A" * 40}, False, "score_A", "every base the scan scored (40) is A"),
        ({"chrN": "N" * 40}, False, "surprise", "the scan scored no base"),
    ],
)
def test_a_track_without_any_value_is_refused_and_nothing_is_written(
    tmp_path, caplog, contigs, calibrated, track, why
):
    scan_dir = _scan(tmp_path, contigs, calibrated)
    out = tmp_path / "tracks"
    out.mkdir()
    assert _export(scan_dir, out, "--track", track) == 2
    assert f"{scan_dir}: track {track} of scan 'handmade' has no value at any base" in caplog.text
    assert why in caplog.text and "nothing written" in caplog.text
    assert list(out.iterdir()) == []  # no track, no temporary file


def test_the_other_tracks_of_such_a_scan_are_written_and_read(tmp_path):
    """The same scan's tracks with values are written as before: readable, every base of the
    contig that has a value in them listed."""
    scan_dir = _scan(tmp_path, {"chrP": MIXED_THEN_A}, calibrated=True)
    out = tmp_path / "tracks"
    for track in ("score_A", "phred_C", "max_phred"):
        assert _export(scan_dir, out, "--track", track) == 0
        assert _readable_chroms(out / f"{track}.bw") == {"chrP": 40}, track


def test_the_hub_refuses_an_unreadable_bigwig(tmp_path, caplog):
    """A bigWig left by an older carbon-vep as bigtools' writer leaves one given no values is
    not published in a hub."""
    import pybigtools

    scan_dir = _scan(tmp_path, {"chrA": "ACGT" * 10}, calibrated=True)
    out = tmp_path / "tracks"
    assert _export(scan_dir, out) == 0 and (out / "hub.txt").is_file()
    for name in ("hub.txt", "genomes.txt", "trackDb.txt", "igv_session.xml", "igv.json"):
        (out / name).unlink()
    pybigtools.open(str(out / "score_G.bw"), "w").write({"chrA": 40}, iter(()))
    with pytest.raises(pybigtools.BBIReadError):
        _readable_chroms(out / "score_G.bw")
    assert _export(scan_dir, out, "--hub-only") == 2
    assert f"{out / 'score_G.bw'}: not a readable bigWig" in caplog.text
    assert "--track score_G" in caplog.text
    assert not (out / "hub.txt").exists() and not (out / "igv.json").exists()
