"""Benchmark: the whole-genome scan on CPU with the demo model, and annotate-by-lookup.

1. Scan: the complete lambda phage genome (resources/genome, 48,502 bp) planned at the default
   tile (49,146 bp, min_context 24,000) and scanned by `carbon-vep scan-chunk`, each run in a fresh
   process that reports its peak RSS, at two chunk sizes (every base in one chunk, and chunks of
   a quarter of it), and again with small tiles (6,000 bp, min_context 3,000) so that the large
   chunk holds several batches of tiles: bases/s, the share of wall time outside the model's
   forward passes (body and DNA output layer), peak memory per job.
2. Merge: the product's jobs on the one-chunk scan at 2, 3 and 4 decimals, each a fresh
   process like the scan's: `carbon-vep merge-scan` (the chunks into the contig's Parquet file),
   `count-scan` (its SNVs counted for the calibration), `calibrate-scan`, `write-scan-tsv` (the
   tabix TSV with each SNV's PHRED): their wall seconds (start-up included: the merge's own
   `merge_s` is only in its log, so the job's wall time stands for it) and peak RSS, bytes per
   SNV of what they wrote, the hg38 projection (9.3e9 SNVs), and the precision check of the
   TSV's rounded scores (Spearman correlation with the full scores, and the share of SNV pairs
   whose order changes).
3. Annotate: a generated 1 Mbp contig with a synthetic scan chunk (random float16
   log-marginals, the real writer), merged, counted and calibrated by the same jobs, and a
   1,000,000-SNV panel on it (TSV, numpy seed 11), through the workflow's two jobs:
   `carbon-vep check-panel` (ingest) and `carbon-vep annotate --checked` (the lookup: score,
   PHRED, calibrated score), each timed whole, and the lookup's own seconds from the annotate
   job's log; variants/s of the lookup and of the job whole.

Usage: python -m carbon_vep.benchmark.scan [--json results/bench_scan.json] [--workdir DIR]
       python -m carbon_vep.benchmark.scan --shape 512,8   (scan only, a larger random-weight model)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.atomic import indexed_bytes
from carbon_vep.benchmark.harness import PROJECT_ROOT, carbon_vep_job, write_json

LAMBDA = PROJECT_ROOT / "resources/genome/lambda_phage.fa"
TILE_BP, MIN_CONTEXT = 49_146, 24_000
HG38_SNVS = 9.3e9
# the annotate job's log line with its lookup's seconds (cli/scoring.py annotate)
LOOKUP_LOG = re.compile(r"annotated \d+ rows in ([\d.]+) s \(lookup")


def _run(*argv: str | Path) -> tuple[float, float]:
    """A carbon-vep command in a fresh process: (wall seconds, peak RSS MB)."""
    measured = carbon_vep_job(*argv)
    return measured.seconds, measured.peak_rss_mb


def scan(work: Path, model: Path, tile_bp: int = TILE_BP, min_context: int = MIN_CONTEXT) -> dict:
    results = {}
    length = 48_502
    for label, chunk_bp in (("one chunk", length), ("quarter chunks", length // 4 + 1)):
        folder = work / f"scan_{tile_bp}_{chunk_bp}"
        folder.mkdir(exist_ok=True)
        plan_path = folder / "plan.json"
        _run(
            "plan-scan",
            "--reference",
            str(LAMBDA),
            "--regions",
            "all",
            "--tile-bp",
            str(tile_bp),
            "--min-context",
            str(min_context),
            "--chunk-bp",
            str(chunk_bp),
            "--out",
            str(plan_path),
        )
        plan = json.loads(plan_path.read_text())
        stats, peaks, walls = [], [], []
        for index in range(len(plan["chunks"])):
            wall, peak = _run(
                "scan-chunk",
                "--plan",
                str(plan_path),
                "--chunk",
                str(index),
                "--reference",
                str(LAMBDA),
                "--model",
                str(model),
                "--trust-remote-code",
                "--dtype",
                "float32",
                "--device",
                "cpu",
                "--batch-size",
                "4",
                "--out",
                str(folder / f"chunk_{index:05d}.parquet"),
                "--stats",
                str(folder / f"chunk_{index:05d}.json"),
            )
            stats.append(json.loads((folder / f"chunk_{index:05d}.json").read_text()))
            peaks.append(peak)
            walls.append(wall)
        bases = sum(s["bases"] for s in stats)
        scan_s = sum(s["wall_s"] for s in stats)
        forward = sum(s["forward_s"] for s in stats)
        results[label] = {
            "tile_bp": tile_bp,
            "min_context": min_context,
            "chunk_bp": chunk_bp,
            "jobs": len(stats),
            "tiles": plan["totals"]["tiles"],
            "bases": bases,
            "scan_wall_s": round(scan_s, 2),
            "job_wall_s_with_startup": round(sum(walls), 2),
            "bases_per_s": round(bases / scan_s),
            "overhead_share": round(1 - forward / scan_s, 3),
            "write_us_per_base": round(1e6 * sum(s["write_s"] for s in stats) / bases, 3),
            "peak_rss_mb_max": round(max(peaks)),
            "chunks": [str(folder / f"chunk_{i:05d}.parquet") for i in range(len(stats))],
        }
    return results


def merge(work: Path, chunks: list[str]) -> dict:
    """The product's jobs on the one-chunk scan, as the workflow runs them: merge-scan (the
    Parquet file, once), then at 2, 3 and 4 decimals count-scan (its SNVs counted for the
    calibration), calibrate-scan and write-scan-tsv, each a fresh process (wall seconds with
    start-up, peak RSS); bytes per SNV of what they wrote, and how much of the ranking survives
    the TSV's rounding."""
    from carbon_vep.scan.snvs import snv_rows

    plan = Path(chunks[0]).parent / "plan.json"
    name = json.loads(plan.read_text())["files"][0]["name"]
    file, provenance = ("--plan", plan, "--file", name), ("--provenance", "model=demo")
    parquet = work / f"merged/positions/{name}.parquet"  # the decimals recount it, as a rerun does
    merge_s, merge_mb = _run("merge-scan", *file, "--chunks", *chunks, "--out-parquet", parquet)
    out = {}
    rng = np.random.default_rng(5)
    for decimals in (2, 3, 4):
        folder = work / f"merged_{decimals}"
        tsv = folder / f"snvs/{name}.tsv.gz"
        counts, calibration = folder / "calibration/counts.parquet", folder / "calibration"
        counted = ("--parquet", parquet, "--reference", LAMBDA, *provenance)
        counted += ("--tsv-decimals", str(decimals), "--out-counts", counts)
        jobs = {"count-scan": _run("count-scan", *counted)}
        jobs["calibrate-scan"] = _run("calibrate-scan", "--counts", counts, "--out", calibration)
        written = ("--parquet", parquet, "--calibration", calibration, "--out-tsv", tsv)
        file_job = (*file, "--reference", LAMBDA, *provenance)
        jobs["write-scan-tsv"] = _run("write-scan-tsv", *file_job, *written)
        bases = pl.read_parquet(parquet)
        snvs, tsv_bytes = 3 * bases.height, indexed_bytes(tsv)
        x = snv_rows(bases)["score"].to_numpy().astype(np.float64)
        y = pl.read_csv(tsv, separator="\t", comment_prefix="#", has_header=False)[:, 4]
        y = y.to_numpy()
        a, b = rng.integers(0, len(x), (2, 500_000))
        keep = x[a] != x[b]
        reversed_ = (np.sign(x[a] - x[b]) * np.sign(y[a] - y[b]) < 0) & keep
        tied = (y[a] == y[b]) & keep
        spearman = pl.DataFrame({"x": x, "y": y}).select(pl.corr("x", "y", method="spearman"))
        out[f"decimals_{decimals}"] = {
            "tsv_bytes_per_snv": round(tsv_bytes / snvs, 3),
            "hg38_tsv_gb": round(tsv_bytes / snvs * HG38_SNVS / 1e9, 1),
            "spearman_vs_stored": round(spearman.item(), 6),
            "pairs_reversed": float(reversed_.mean()),
            "pairs_tied_by_rounding": round(float(tied.mean()), 4),
            "jobs_s_peak_rss_mb": {job: [round(s, 2), round(mb)] for job, (s, mb) in jobs.items()},
        }
    parquet_bytes = parquet.stat().st_size
    out |= {
        "snvs": snvs,
        "score_range": [round(float(x.min()), 4), round(float(x.max()), 4)],
        "score_sd": round(float(x.std()), 5),
        "parquet_bytes": parquet_bytes,
        "parquet_bytes_per_snv": round(parquet_bytes / snvs, 3),
        "hg38_parquet_gb": round(parquet_bytes / snvs * HG38_SNVS / 1e9, 1),
        "merge_job_s": round(merge_s, 2),  # the whole process, start-up included
        "merge_job_peak_rss_mb": round(merge_mb),
    }
    return out


def annotate(work: Path, variants: int = 1_000_000, contig_bp: int = 1_000_000) -> dict:
    """The workflow's two jobs on a synthetic scan: `carbon-vep check-panel` (ingest), then
    `carbon-vep annotate --checked` (the lookup, whose own seconds its log gives)."""
    from carbon_vep.benchmark.calibrate import scan_folder

    rng = np.random.default_rng(11)
    folder, scan_dir = work / "annotate", work / "annotate/scan"
    seq = scan_folder(folder, contig_bp, rng)  # the product's jobs make the scan it reads
    pos = np.sort(rng.choice(3 * contig_bp, variants, replace=False))
    base = pos // 3
    ref = seq[base]
    alts = np.array([[a for a in "ACGT" if a != r] for r in "ACGT"])
    alt = alts[np.searchsorted(np.array(list("ACGT")), ref), pos % 3]
    panel, checked, out = folder / "panel.tsv", folder / "checked.parquet", folder / "out.parquet"
    pl.DataFrame({"chrom": "chrS", "pos": base + 1, "ref": ref, "alt": alt}).write_csv(
        panel, separator="\t"
    )
    ingest_s, ingest_mb = _run(
        "check-panel", "--panel", panel, "--reference", folder / "genome.fa",
        "--build", "synthetic", "--out", checked, "--summary", folder / "summary.json",
    )  # fmt: skip
    job = carbon_vep_job("annotate", "--scan", scan_dir, "--checked", checked, "--out", out)
    lookup_s = float(LOOKUP_LOG.search(job.stderr).group(1))
    counts = dict(pl.read_parquet(out).group_by("status").len().iter_rows())
    return {
        "variants": variants,
        "scanned_bases": contig_bp,
        "ingest_job_s": round(ingest_s, 2),
        "annotate_job_s": round(job.seconds, 2),
        "lookup_s": round(lookup_s, 2),  # the annotate job's own clock, from its log
        "lookup_variants_per_s": round(variants / lookup_s) if lookup_s else None,
        "annotate_job_variants_per_s": round(variants / job.seconds),
        "peak_rss_mb": {"check-panel": round(ingest_mb), "annotate": round(job.peak_rss_mb)},
        "statuses": counts,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--variants", type=int, default=1_000_000)
    parser.add_argument(
        "--shape",
        default=None,
        metavar="HIDDEN,LAYERS",
        help="scan with a random-weight model of this body (e.g. 512,8) instead of the demo "
        "model, to see how the share outside the forward pass falls as the model grows; "
        "runs the scan part only",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_scan_"))
    work.mkdir(parents=True, exist_ok=True)
    from carbon_vep.model.demo import build_demo_model, is_complete

    model = PROJECT_ROOT / "resources/demo_model"
    if args.shape:
        hidden, layers = (int(x) for x in args.shape.split(","))
        model = build_demo_model(
            work / f"model_{hidden}x{layers}",
            hidden_size=hidden,
            num_layers=layers,
            num_heads=hidden // 64,
            num_kv_heads=max(1, hidden // 256),
            intermediate_size=hidden * 4,
        )
    elif not is_complete(model):
        model = build_demo_model(work / "demo_model")
    report = {
        "machine": f"{os.cpu_count()} CPU cores (shared), CPU only",
        "model": args.shape or "demo (64,2)",
        "scan": scan(work, model),
    }
    if args.shape:
        for run in report["scan"].values():
            run.pop("chunks")
        print(json.dumps(report, indent=2))
        return
    # small tiles: the one-chunk job runs 5 batches of 4 tiles, the quarter-chunk jobs 1-2
    report["scan_small_tiles"] = scan(work, model, 6_000, 3_000)
    report["merge"] = merge(work, report["scan"]["one chunk"]["chunks"])
    report["annotate"] = annotate(work, args.variants)
    for run in [*report["scan"].values(), *report["scan_small_tiles"].values()]:
        run.pop("chunks")
    print(json.dumps(report, indent=2))
    write_json(args.json, report)


if __name__ == "__main__":
    main()
