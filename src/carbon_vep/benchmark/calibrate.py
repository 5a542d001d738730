"""Benchmark: a scan's calibration (PHRED and context means) on CPU, against a direct sort.

A synthetic genome (random ACGT, numpy seed 3) and one scan chunk on it (random float16
log-marginals from a Dirichlet(1), written by the scan's own writer, benchmark/synthetic.py; its
plan from `carbon-vep plan-scan`) at two sizes; for each size, the product's jobs as the workflow
runs them, each a `carbon-vep` process timed whole (start-up included) with its peak RSS:

1. merge: `carbon-vep merge-scan`, the chunk into the file's Parquet (the scan's work with or
   without a calibration);
2. count: `carbon-vep count-scan`, the file's SNVs (3 a base) counted from that Parquet for the
   calibration, each with its printed score's key and its context cell;
3. calibrate: `carbon-vep calibrate-scan`, the counts into the rank scales and context means;
4. TSV: `carbon-vep write-scan-tsv`, the tabix TSV with `phred`: seconds, bytes per SNV.

Beside them, the reference approaches, in fresh processes too (`harness.run_step`); they are
functions of this module because no job gives them:

5. TSV without phred: the same TSV as written before calibration existed (score only);
6. direct: every score of the genome in one array, sorted, each SNV's rank by binary search
   (its memory grows with the genome; ours does not).

It prints each step's wall and CPU seconds (user + system: on a shared machine the wall time
also counts the waits for a core) and SNVs per second of each, peak memory per job at both
sizes, the bytes the PHRED column adds, and the projection for hg38's 9.3e9 SNVs on one 16-core
node (arithmetic from the larger size's CPU rates, and from its wall rates, start-up included:
jobs run one per core, in parallel): the calibration's own work (the count jobs, the calibrate
job, the PHRED column's share of the TSV jobs) and the four jobs whole.

Usage: python -m carbon_vep.benchmark.calibrate [--bases 1000000 4000000] [--json FILE]
       [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from carbon_vep.atomic import indexed_bytes
from carbon_vep.benchmark.harness import carbon_vep_job, run_step, write_json
from carbon_vep.benchmark.synthetic import write_synthetic_scan
from carbon_vep.markdown import table as markdown_table
from carbon_vep.scan import RAW_TABLE

HG38_SNVS = 9.3e9
CORES = 16
DECIMALS = 2  # count-scan's default --tsv-decimals
CHUNK = "chunk_00000.parquet"
MODEL = "bench"  # the model the synthetic scores stand for, in the jobs' provenance


# ---- the product's jobs -----------------------------------------------------------------------
def job(*argv: str | Path) -> dict:
    """A `carbon-vep` job in a fresh process: wall seconds ("s", start-up included), peak RSS."""
    return carbon_vep_job(*argv).as_dict()


def make_scan(folder: Path, bases: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """A random genome of `bases` bases (one contig, chrS) as a scan's chunk job leaves it:
    genome.fa, plan.json (plan-scan: one chunk, one output file) and the chunk's per-base rows;
    returns the bases."""
    rng = rng or np.random.default_rng(3)
    seq = write_synthetic_scan(folder / "genome.fa", folder / CHUNK, bases, rng)
    genome = ("--reference", folder / "genome.fa", "--regions", "all")
    # min_context 0, as the jobs' provenance (PROVENANCE: no min_context) has it: every SNV on
    # the scales, as nearly every SNV of a genome's scan is (the plan refuses a scan with none
    # ranked, which a genome this small would be at the default 24,000)
    job("plan-scan", *genome, "--min-context", "0", "--out", folder / "plan.json")
    return seq


def scan_folder(folder: Path, bases: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """A scan folder as the workflow leaves it, made by the product's jobs: `folder`/scan with
    positions/chrS.parquet, calibration/ (merge-scan, count-scan, calibrate-scan on make_scan's
    chunk) and scan.json (the scan's record from its plan, scan.record.scan_record); returns
    the bases."""
    from carbon_vep.scan.record import SCAN_RECORD, scan_record

    seq = make_scan(folder, bases, rng)
    merge_job(folder)
    count_job(folder)
    calibrate_job(folder)
    scan = folder / "scan"
    (scan / "positions").mkdir(parents=True)
    (folder / "positions.parquet").rename(scan / "positions/chrS.parquet")
    (folder / "calibration").rename(scan / "calibration")
    plan = json.loads((folder / "plan.json").read_text())
    provenance = {"build": "synthetic", "scan": "bench", "model": MODEL}  # the jobs' model
    (scan / SCAN_RECORD).write_text(json.dumps(scan_record(plan, provenance)))
    return seq


PROVENANCE = ("--provenance", f"model={MODEL}")  # what the counts and the TSV check


def merge_job(folder: str | Path) -> dict:
    """merge-scan: the chunk into the file's Parquet, positions.parquet."""
    f = Path(folder)
    file = ("--plan", f / "plan.json", "--file", "chrS", "--chunks", f / CHUNK)
    return job("merge-scan", *file, "--out-parquet", f / "positions.parquet")


def count_job(folder: str | Path) -> dict:
    """count-scan: positions.parquet's SNVs counted for the calibration, counts.parquet."""
    f = Path(folder)
    inputs = ("--parquet", f / "positions.parquet", "--reference", f / "genome.fa", *PROVENANCE)
    return job("count-scan", *inputs, "--out-counts", f / "counts.parquet")


def calibrate_job(folder: str | Path) -> dict:
    """calibrate-scan: the counts into the calibration folder."""
    f = Path(folder)
    return job("calibrate-scan", "--counts", f / "counts.parquet", "--out", f / "calibration")


def tsv_job(f: Path) -> dict:
    """write-scan-tsv: the file's tabix TSV with phred, with_phred.tsv.gz."""
    file = ("--plan", f / "plan.json", "--file", "chrS", "--reference", f / "genome.fa")
    inputs = ("--parquet", f / "positions.parquet", "--calibration", f / "calibration")
    measured = job(
        "write-scan-tsv", *file, *PROVENANCE, *inputs, "--out-tsv", f / "with_phred.tsv.gz"
    )
    return measured | {"tsv_bytes": _bytes(f / "with_phred.tsv.gz")}


def _bytes(tsv: Path) -> int:
    return indexed_bytes(tsv)


# ---- the reference approaches (no job gives them: functions run in a fresh process) -----------
def step_tsv_without_phred(folder: str) -> dict:
    """The TSV as the merge wrote it before calibration: chrom, pos, ref, alt, score."""
    import pysam
    from pysam.libcbgzf import BGZFile

    from carbon_vep import columns
    from carbon_vep.scan.snvs import SNV_BATCH_BASES, snv_rows
    from carbon_vep.scan.tsv import tsv_header, tsv_text

    folder = Path(folder)
    table = columns.SCAN_TSV[:5]
    parquet, out = pq.ParquetFile(folder / "positions.parquet"), folder / "score_only.tsv.gz"
    with BGZFile(str(out), "wb") as handle:
        handle.write(tsv_header(["chrS"], {"model": "bench"}, table).encode())
        for group in range(parquet.num_row_groups):
            bases = pl.from_arrow(parquet.read_row_group(group))
            for piece in bases.iter_slices(SNV_BATCH_BASES):
                handle.write(tsv_text(snv_rows(piece), table, DECIMALS).encode())
    pysam.tabix_index(
        str(out), force=True, seq_col=0, start_col=1, end_col=1, meta_char="#", zerobased=False
    )
    return {"tsv_bytes": _bytes(out)}


def step_direct(folder: str) -> dict:
    """The reference approach: all scores in memory, sorted, ranks by binary search."""
    from carbon_vep.scan.snvs import score_key, snv_rows

    bases = pl.read_parquet(Path(folder) / "positions.parquet")
    keys = snv_rows(bases).select(score_key(pl.col("score"), DECIMALS))
    keys = keys.to_series().to_numpy()
    ordered = np.sort(keys)
    ranks = len(ordered) - np.searchsorted(ordered, keys, side="left")
    phred = 10 * np.log10(len(keys) / ranks)
    return {"snvs": len(keys), "max_phred": float(phred.max())}


def measured(name: str, folder: Path) -> dict:
    """One step, ours (a job) or a reference, in a fresh process: seconds, peak RSS, numbers."""
    if name in JOBS:
        return JOBS[name](folder)
    return run_step(REFERENCES[name], folder).as_dict()


JOBS = {"merge": merge_job, "count": count_job, "calibrate": calibrate_job, "tsv": tsv_job}
REFERENCES = {"tsv_without_phred": step_tsv_without_phred, "direct": step_direct}
LABELS = {
    "merge": "merge (merge-scan: the chunk into the Parquet file)",
    "count": "count (count-scan: the Parquet file's SNVs, keys and context cells)",
    "calibrate": "calibrate (calibrate-scan)",
    "tsv": "TSV with phred (write-scan-tsv)",
    "tsv_without_phred": "TSV without phred (reference)",
    "direct": "direct sort (reference)",
}


# ---- the driver -----------------------------------------------------------------------------
def bench(work: Path, sizes: list[int]) -> dict:
    results = {}
    for bases in sizes:
        folder = work / f"scan_{bases}"
        make_scan(folder, bases)
        steps = {name: measured(name, folder) for name in LABELS}
        snvs = 3 * bases
        results[bases] = {
            "snvs": snvs,
            **{f"{name}_s": round(s["s"], 2) for name, s in steps.items()},
            **{f"{name}_cpu_s": round(s["cpu_s"], 2) for name, s in steps.items()},
            **{f"{name}_snvs_per_s": round(snvs / s["s"]) for name, s in steps.items()},
            **{f"{name}_snvs_per_cpu_s": round(snvs / s["cpu_s"]) for name, s in steps.items()},
            **{f"{name}_peak_rss_mb": round(s["peak_rss_mb"]) for name, s in steps.items()},
            # what the jobs wrote: the counts' (cell, printed score) rows, the scale's scores
            "cells_x_scores": pq.ParquetFile(folder / "counts.parquet").metadata.num_rows,
            "distinct_scores": pq.ParquetFile(folder / "calibration" / RAW_TABLE).metadata.num_rows,
            "tsv_bytes_per_snv_with_phred": round(steps["tsv"]["tsv_bytes"] / snvs, 3),
            "tsv_bytes_per_snv_score_only": round(
                steps["tsv_without_phred"]["tsv_bytes"] / snvs, 3
            ),
        }
    r = results[max(sizes)]
    results["hg38_projection_16_cores_h"] = projection(r, "cpu_s")
    results["hg38_projection_16_cores_h_wall"] = projection(r, "s")
    return results


def projection(r: dict, clock: str) -> dict:
    """hg38 on one 16-core node, one job a core, from the larger size's seconds per SNV on
    `clock` ("s": wall; "cpu_s": CPU, what a core of its own takes on a shared machine): each
    job on an output file whole, and the PHRED column's share of the TSV job; the calibrate job
    is a few seconds whatever the genome (one job, after every count job, added once)."""
    merge, count, tsv = (r[f"{name}_{clock}"] / r["snvs"] for name in ("merge", "count", "tsv"))
    phred = max(r[f"tsv_{clock}"] - r[f"tsv_without_phred_{clock}"], 0) / r["snvs"]
    calibrate = r[f"calibrate_{clock}"]
    return {
        "calibration_count_calibrate_phred_column": round(
            (HG38_SNVS * (count + phred) / CORES + calibrate) / 3600, 2
        ),
        "merge_count_calibrate_tsv_jobs": round(
            (HG38_SNVS * (merge + count + tsv) / CORES + calibrate) / 3600, 2
        ),
        "direct_sort_memory_gb": round(HG38_SNVS * 8 * 2 / 1e9),  # keys + sorted copy, int64
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--json", default=None)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        results = bench(Path(tmp), args.bases)
    for bases in args.bases:
        r = results[bases]
        print(
            f"\n{bases:,} bases, {r['snvs']:,} SNVs ({r['cells_x_scores']:,} cell x score "
            f"counts, {r['distinct_scores']:,} distinct scores)"
        )
        rows = [
            [
                label,
                r[f"{name}_s"],
                f"{r[f'{name}_snvs_per_s']:,}",
                r[f"{name}_cpu_s"],
                f"{r[f'{name}_snvs_per_cpu_s']:,}",
                f"{r[f'{name}_peak_rss_mb']:,}",
            ]
            for name, label in LABELS.items()
        ]
        header = ["step", "wall s", "SNVs/s", "CPU s", "SNVs per CPU s", "peak RSS MB"]
        print(markdown_table(header, rows))
        print(
            f"TSV + index bytes/SNV: {r['tsv_bytes_per_snv_with_phred']} with phred, "
            f"{r['tsv_bytes_per_snv_score_only']} score only"
        )
    small, large = results[min(args.bases)], results[max(args.bases)]
    for name in ("merge", "count", "calibrate", "tsv", "direct"):
        ratio = large[f"{name}_peak_rss_mb"] / small[f"{name}_peak_rss_mb"]
        print(f"peak RSS {name}: x{ratio:.2f} for x{max(args.bases) // min(args.bases)} bases")
    key = "hg38_projection_16_cores_h"
    for clock, name in (("CPU", key), ("wall", f"{key}_wall")):
        print(f"hg38 projection (16 cores, arithmetic from the {clock} rates):", results[name])
    write_json(args.json, results, indent=1)


if __name__ == "__main__":
    main()
