"""Benchmark: genome-browser tracks of a scan (export-tracks) on CPU, streamed against whole.

A synthetic scan (random genome, Dirichlet(1) log-marginals written by the scan's own writer,
benchmark/synthetic.py) with its calibration (counted and built by the calibration's own
code), at two sizes; for each, in a fresh process that reports its peak RSS:

1. ours: the product's command, `carbon-vep export-tracks` (the workflow's export_track jobs
   run it one track a job): here the 11 bigWigs one after the other in one process, each
   streamed from the scan one Parquet row group (2^20 bases) at a time into bigtools' writer
   (pybigtools);
2. whole: the straightforward approach: every base of the scan in memory at once, the values
   computed in one go, each track's entries as one list handed to the same writer (its memory
   grows with the genome).

It checks that both give the same values (every track, a sample of positions), and prints
bases/s/core, peak RSS at both sizes, bytes a base of the bigWigs against the scan's Parquet,
and the arithmetic for hg38 (2.9e9 scored bases): one job (a bigWig is written by one process;
the 11 tracks could go to 11 processes, one track each, reading the scan 11 times).

Usage: python -m carbon_vep.benchmark.tracks [--bases 1000000 4000000] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from carbon_vep.benchmark.calibrate import scan_folder
from carbon_vep.benchmark.harness import HG38_BASES, run_command, run_step, write_json
from carbon_vep.markdown import table as markdown_table


def step_whole(folder: str) -> dict:
    """All bases at once: the reference approach (same values, same writer)."""
    import polars as pl
    import pybigtools

    from carbon_vep.report.tracks import base_values, chrom_sizes, track_set
    from carbon_vep.scan.calibrate import Calibration
    from carbon_vep.scan.record import read_scan

    scan = Path(folder) / "scan"
    record = read_scan(scan)
    bases = pl.read_parquet(scan / "positions")
    values = base_values(bases, Calibration.read(scan / "calibration"))
    out = Path(folder) / "whole"
    out.mkdir(exist_ok=True)
    pos = bases["pos"].to_numpy() - 1
    for track in track_set(True):
        keep = ~np.isnan(values[track.name])
        starts, kept = pos[keep].tolist(), values[track.name][keep].astype(np.float64).tolist()
        entries = [("chrS", s, s + 1, v) for s, v in zip(starts, kept, strict=True)]
        pybigtools.open(str(out / f"{track.name}.bw"), "w").write(
            dict(chrom_sizes(record)), entries
        )
    return {}


OURS_EXE = Path(sys.executable).parent / "carbon-vep"  # the workflow's export_track jobs


def measured_ours(folder: Path) -> dict:
    """The product's command, every track in one process (the workflow runs one track a job):
    seconds, peak RSS."""
    argv = [str(OURS_EXE), "export-tracks", "--scan", str(folder / "scan")]
    return run_command([*argv, "--out", str(folder / "ours")]).as_dict()


def measured_whole(folder: Path) -> dict:
    """The reference approach in a fresh process (its peak RSS its own)."""
    return run_step(step_whole, folder).as_dict()


def same_values(folder: Path, bases: int) -> None:
    import pyBigWig

    rng = np.random.default_rng(0)
    for path in sorted((folder / "ours").glob("*.bw")):
        ours, whole = pyBigWig.open(str(path)), pyBigWig.open(str(folder / "whole" / path.name))
        for start in rng.integers(0, bases - 1000, 20):
            a = np.array(ours.values("chrS", int(start), int(start) + 1000))
            b = np.array(whole.values("chrS", int(start), int(start) + 1000))
            np.testing.assert_array_equal(a, b, err_msg=path.name)


def _size_table(rows: list[dict]) -> str:
    """The measured sizes as a Markdown table."""
    header = [
        "bases",
        "ours s",
        "whole s",
        "bases/s (1 core)",
        "peak RSS MB ours / whole",
        "bigWig B/base",
        "Parquet B/base",
    ]
    cells = [
        [
            f"{r['bases']:,}",
            r["ours_s"],
            r["whole_s"],
            f"{r['bases_per_s']:,}",
            f"{r['ours_peak_rss_mb']:,} / {r['whole_peak_rss_mb']:,}",
            r["bigwig_bytes_per_base"],
            r["parquet_bytes_per_base"],
        ]
        for r in rows
    ]
    return markdown_table(header, cells)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bases", type=int, nargs=2, default=[1_000_000, 4_000_000])
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for bases in args.bases:
            folder = Path(tmp) / str(bases)
            scan_folder(folder, bases)
            ours, whole = measured_ours(folder), measured_whole(folder)
            same_values(folder, bases)
            parquet = (folder / "scan/positions/chrS.parquet").stat().st_size
            bigwig = sum(p.stat().st_size for p in (folder / "ours").glob("*.bw"))
            rows.append(
                {
                    "bases": bases,
                    "ours_s": round(ours["s"], 2),
                    "whole_s": round(whole["s"], 2),
                    "ours_peak_rss_mb": round(ours["peak_rss_mb"]),
                    "whole_peak_rss_mb": round(whole["peak_rss_mb"]),
                    "bases_per_s": round(bases / ours["s"]),
                    "bigwig_bytes_per_base": round(bigwig / bases, 2),
                    "parquet_bytes_per_base": round(parquet / bases, 2),
                }
            )
    print(_size_table(rows))
    small, large = rows[0], rows[-1]
    growth = large["bases"] / small["bases"]
    ratio = {k: large[f"{k}_peak_rss_mb"] / small[f"{k}_peak_rss_mb"] for k in ("ours", "whole")}
    print(f"peak RSS for x{growth:g} bases: ours x{ratio['ours']:.2f}, whole x{ratio['whole']:.2f}")
    hours = HG38_BASES / large["bases_per_s"] / 3600
    gigabytes = HG38_BASES * large["bigwig_bytes_per_base"] / 1e9
    print(
        f"hg38 ({HG38_BASES:.1e} bases), one job: {hours:.2f} h, bigWigs ~{gigabytes:.0f} GB "
        "(arithmetic from the measured rate and size)"
    )
    result = {"sizes": rows, "hg38_hours_one_job": hours, "hg38_bigwig_gb": gigabytes}
    write_json(args.json, result)


if __name__ == "__main__":
    main()
