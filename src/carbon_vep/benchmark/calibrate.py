"""Benchmark: a scan's calibration (PHRED and context means) on CPU, against a direct sort.

A synthetic genome (random ACGT, numpy seed 3) and a per-base scan dataset on it (random float16
log-marginals from a Dirichlet(1), written by the scan's own writer) at two sizes; for each size,
every step in a fresh process that reports its peak RSS:

1. count: what the calibration adds to a merge job: the SNVs of the Parquet file (3 a base), each
   with its printed score's key and its context cell, counted (`CalibrationCounts`);
2. calibrate: the counts into the rank scales and the context means (`Calibration.build`, write);
3. TSV: the tabix TSV written from the Parquet file with `phred` (`write_tsv`), and the same TSV
   without it (score only, as before calibration existed): seconds, and bytes per SNV of each;
4. direct: the reference approach: every score of the genome in one array, sorted, each SNV's
   rank by binary search (its memory grows with the genome; ours does not).

It prints SNVs/s per core of each step, peak memory per job at both sizes, the bytes the PHRED
column adds, and the projection for hg38's 9.3e9 SNVs on one 16-core node (arithmetic from the
measured rates: jobs run one per core, in parallel).

Usage: python -m carbon_vep.benchmark.calibrate [--bases 1000000 4000000] [--json FILE]
       [--workdir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.benchmark.harness import run_step, write_json
from carbon_vep.benchmark.synthetic import write_synthetic_scan
from carbon_vep.markdown import table as markdown_table

HG38_SNVS = 9.3e9
CORES = 16
DECIMALS = 2


# ---- the steps (each run in its own process) ------------------------------------------------
def _reference(folder: Path):
    from carbon_vep.genome.reference import open_reference

    return open_reference(folder / "genome.fa")


def step_count(folder: str) -> dict:
    import pyarrow.parquet as pq

    from carbon_vep.scan.calibrate import CalibrationCounts, counts_meta
    from carbon_vep.scan.outputs import count_snvs

    folder = Path(folder)
    counts, parquet = CalibrationCounts(), pq.ParquetFile(folder / "positions.parquet")
    with _reference(folder) as reference:
        for group in range(parquet.num_row_groups):  # what merge-scan adds, row group by group
            bases = pl.from_arrow(parquet.read_row_group(group))
            count_snvs(counts, bases, reference, DECIMALS, None)
    counts.write(folder / "counts.parquet", counts_meta({"model": "bench"}, DECIMALS, None))
    return {"snvs": int(counts.neutral_n.sum()), "cells_x_scores": counts.counts().height}


def step_calibrate(folder: str) -> dict:
    from carbon_vep.scan.calibrate import Calibration, read_counts

    folder = Path(folder)
    counts, neutral, meta = read_counts([folder / "counts.parquet"])
    calibration = Calibration.build(counts, neutral, meta, 100)
    calibration.write(folder / "calibration")
    return {"distinct_scores": len(calibration.raw.keys)}


def step_tsv(folder: str) -> dict:
    from carbon_vep.scan.calibrate import Calibration
    from carbon_vep.scan.outputs import write_tsv

    folder = Path(folder)
    calibration = Calibration.read(folder / "calibration")
    with _reference(folder) as reference:
        stats = write_tsv(
            folder / "positions.parquet",
            ["chrS"],
            folder / "with_phred.tsv.gz",
            {"model": "bench"},
            calibration,
            reference,
        )
    return {"tsv_bytes": stats["tsv_bytes"]}


def step_tsv_without_phred(folder: str) -> dict:
    """The TSV as the merge wrote it before calibration: chrom, pos, ref, alt, score."""
    import pyarrow.parquet as pq
    import pysam
    from pysam.libcbgzf import BGZFile

    from carbon_vep import columns
    from carbon_vep.scan.outputs import SNV_BATCH_BASES, tsv_header, tsv_text
    from carbon_vep.scan.snvs import snv_rows

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
    return {"tsv_bytes": out.stat().st_size + Path(f"{out}.tbi").stat().st_size}


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


def step_make(folder: str, bases: str) -> dict:
    make_scan(Path(folder), int(bases))
    return {}


STEPS = {
    "count": step_count,
    "calibrate": step_calibrate,
    "tsv": step_tsv,
    "tsv_without_phred": step_tsv_without_phred,
    "direct": step_direct,
}


# ---- the driver -----------------------------------------------------------------------------
def make_scan(folder: Path, bases: int) -> None:
    """A random genome of `bases` bases (one contig) and its per-base scan dataset."""
    rng = np.random.default_rng(3)
    write_synthetic_scan(folder / "genome.fa", folder / "positions.parquet", bases, rng)


def measured_step(name: str, folder: Path, *extra: str) -> dict:
    """One step in a fresh process (its peak RSS its own): seconds, peak RSS and its numbers."""
    return run_step(STEPS.get(name, step_make), folder, *extra).as_dict()


def bench(work: Path, sizes: list[int]) -> dict:
    results = {}
    for bases in sizes:
        folder = work / f"scan_{bases}"
        measured_step("make", folder, str(bases))
        steps = {name: measured_step(name, folder) for name in STEPS}
        snvs = 3 * bases
        results[bases] = {
            "snvs": snvs,
            **{f"{name}_s": round(s["s"], 2) for name, s in steps.items()},
            **{f"{name}_snvs_per_s": round(snvs / s["s"]) for name, s in steps.items()},
            **{f"{name}_peak_rss_mb": round(s["peak_rss_mb"]) for name, s in steps.items()},
            "cells_x_scores": steps["count"]["cells_x_scores"],
            "distinct_scores": steps["calibrate"]["distinct_scores"],
            "tsv_bytes_per_snv_with_phred": round(steps["tsv"]["tsv_bytes"] / snvs, 3),
            "tsv_bytes_per_snv_score_only": round(
                steps["tsv_without_phred"]["tsv_bytes"] / snvs, 3
            ),
        }
    largest = results[max(sizes)]
    # the calibration's own work per SNV: counting (in the merge) and the PHRED column's share
    # of the TSV pass; the combine step is a few seconds, whatever the genome
    per_snv = (
        largest["count_s"] / largest["snvs"]
        + max(largest["tsv_s"] - largest["tsv_without_phred_s"], 0) / largest["snvs"]
    )
    tsv_pass = largest["tsv_s"] / largest["snvs"]
    results["hg38_projection_16_cores_h"] = {
        "calibration_work": round(HG38_SNVS * per_snv / CORES / 3600, 2),
        "calibration_and_tsv_pass": round(
            HG38_SNVS * (largest["count_s"] / largest["snvs"] + tsv_pass) / CORES / 3600, 2
        ),
        "direct_sort_memory_gb": round(HG38_SNVS * 8 * 2 / 1e9),  # keys + sorted copy, int64
    }
    return results


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
            [name, r[f"{name}_s"], f"{r[f'{name}_snvs_per_s']:,}", f"{r[f'{name}_peak_rss_mb']:,}"]
            for name in STEPS
        ]
        print(markdown_table(["step", "s", "SNVs/s (1 core)", "peak RSS MB"], rows))
        print(
            f"TSV + index bytes/SNV: {r['tsv_bytes_per_snv_with_phred']} with phred, "
            f"{r['tsv_bytes_per_snv_score_only']} score only"
        )
    small, large = results[min(args.bases)], results[max(args.bases)]
    for name in ("count", "calibrate", "tsv", "direct"):
        ratio = large[f"{name}_peak_rss_mb"] / small[f"{name}_peak_rss_mb"]
        print(f"peak RSS {name}: x{ratio:.2f} for x{max(args.bases) // min(args.bases)} bases")
    print(
        "hg38 projection (16 cores, arithmetic from the measured rates):",
        results["hg38_projection_16_cores_h"],
    )
    write_json(args.json, results, indent=1)


if __name__ == "__main__":
    main()
