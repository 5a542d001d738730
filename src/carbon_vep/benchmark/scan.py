"""Benchmark: the whole-genome scan on CPU with the demo model, and annotate-by-lookup.

1. Scan: the complete lambda phage genome (resources/genome, 48,502 bp) planned at the default
   tile (49,146 bp, min_context 24,000) and scanned by `carbon-vep scan-chunk`, each run in a fresh
   process that reports its peak RSS, at two chunk sizes (every base in one chunk, and chunks of
   a quarter of it), and again with small tiles (6,000 bp, min_context 3,000) so that the large
   chunk holds several batches of tiles: bases/s, the share of wall time outside the model's
   forward passes (body and DNA output layer), peak memory per job.
2. Merge: the chunks into the contig's Parquet file (and the calibration's counts), then the
   tabix TSV with each SNV's PHRED: bytes per SNV of each, the hg38 projection (9.3e9 SNVs),
   and the precision check of the TSV's rounded scores (Spearman correlation with the full
   scores, and the share of SNV pairs whose order changes).
3. Annotate: a generated 1 Mbp contig with a synthetic per-base scan dataset (random float16
   log-marginals, the real writer, and its calibration) and a 1,000,000-SNV panel on it (TSV,
   numpy seed 11): ingest (start-up) and the lookup (score, PHRED, calibrated score) timed
   apart; variants/s of the lookup.

Usage: python -m carbon_vep.benchmark.scan [--json results/bench_scan.json] [--workdir DIR]
       python -m carbon_vep.benchmark.scan --shape 512,8   (scan only, a larger random-weight model)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.benchmark.harness import PROJECT_ROOT, run_command, timed, write_json

LAMBDA = PROJECT_ROOT / "resources/genome/lambda_phage.fa"
TILE_BP, MIN_CONTEXT = 49_146, 24_000
HG38_SNVS = 9.3e9


def _run(*argv: str) -> tuple[float, float]:
    """A carbon-vep command in a fresh process: (wall seconds, peak RSS MB)."""
    measured = run_command([sys.executable, "-m", "carbon_vep.cli", *argv])
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
    """Merge, calibrate and write the TSV at 2, 3 and 4 decimals: bytes per SNV, and how much of
    the ranking survives the rounding."""
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scan.calibrate import Calibration, counts_meta, read_counts
    from carbon_vep.scan.outputs import merge_group, write_tsv
    from carbon_vep.scan.snvs import snv_rows

    out = {}
    rng = np.random.default_rng(5)
    with open_reference(LAMBDA) as reference:
        for decimals in (2, 3, 4):
            folder = work / f"merged_{decimals}"
            parquet = folder / "positions/NC_001416.1.parquet"
            counts, tsv = folder / "calibration/counts.parquet", folder / "snvs/NC_001416.1.tsv.gz"
            meta = counts_meta({"model": "demo"}, decimals, None)
            stats = merge_group(chunks, ["NC_001416.1"], parquet, counts, meta, reference, None)
            calibration = Calibration.build(*read_counts([counts])[:2], meta, 100)
            written = write_tsv(
                parquet, ["NC_001416.1"], tsv, {"model": "demo"}, calibration, reference
            )
            snvs = stats["snvs"]
            bases = pl.read_parquet(parquet)
            x = snv_rows(bases)["score"].to_numpy().astype(np.float64)
            y = pl.read_csv(tsv, separator="\t", comment_prefix="#", has_header=False)[:, 4]
            y = y.to_numpy()
            a, b = rng.integers(0, len(x), (2, 500_000))
            keep = x[a] != x[b]
            reversed_ = (np.sign(x[a] - x[b]) * np.sign(y[a] - y[b]) < 0) & keep
            tied = (y[a] == y[b]) & keep
            spearman = pl.DataFrame({"x": x, "y": y}).select(pl.corr("x", "y", method="spearman"))
            out[f"decimals_{decimals}"] = {
                "tsv_bytes_per_snv": round(written["tsv_bytes"] / snvs, 3),
                "hg38_tsv_gb": round(written["tsv_bytes"] / snvs * HG38_SNVS / 1e9, 1),
                "spearman_vs_stored": round(spearman.item(), 6),
                "pairs_reversed": float(reversed_.mean()),
                "pairs_tied_by_rounding": round(float(tied.mean()), 4),
            }
    out |= {
        "snvs": snvs,
        "score_range": [round(float(x.min()), 4), round(float(x.max()), 4)],
        "score_sd": round(float(x.std()), 5),
        "parquet_bytes": stats["parquet_bytes"],
        "parquet_bytes_per_snv": round(stats["parquet_bytes"] / snvs, 3),
        "hg38_parquet_gb": round(stats["parquet_bytes"] / snvs * HG38_SNVS / 1e9, 1),
        "merge_s": stats["merge_s"],
    }
    return out


def calibrate(scan_dir: Path, fasta: Path) -> None:
    """The synthetic scan's calibration (annotate adds its PHRED and calibrated score)."""
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scan.calibrate import Calibration, CalibrationCounts, counts_meta
    from carbon_vep.scan.snvs import snv_rows, with_cells

    counts = CalibrationCounts()
    bases = pl.read_parquet(scan_dir / "positions/chrS.parquet")
    with open_reference(fasta) as reference:
        snvs = with_cells(snv_rows(bases), reference, 2, None)
    counts.add(snvs["cell"].to_numpy(), snvs["key"].to_numpy(), snvs["neutral"].to_numpy())
    meta = counts_meta({}, 2, None)
    Calibration.build(counts.counts(), counts.neutral(), meta, 100).write(scan_dir / "calibration")


def annotate(work: Path, variants: int = 1_000_000, contig_bp: int = 1_000_000) -> dict:
    from carbon_vep.atomic import write_json
    from carbon_vep.benchmark.synthetic import write_synthetic_scan
    from carbon_vep.config.stages import LabelSettings, PanelSettings
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scan.outputs import SCAN_RECORD, scan_record
    from carbon_vep.scoring.annotate import annotate_panel
    from carbon_vep.variants.ingest import ingest_panel

    rng = np.random.default_rng(11)
    fasta = work / "annotate/genome.fa"
    scan_dir = work / "annotate/scan"
    seq = write_synthetic_scan(fasta, scan_dir / "positions/chrS.parquet", contig_bp, rng)
    plan = {  # the record of a scan of chrS alone (what annotate reads)
        "reference": str(fasta),
        "group_bp": contig_bp,
        "files": [{"name": "chrS", "contigs": ["chrS"]}],
        "contigs": {"chrS": {"file": "chrS", "length": contig_bp, "scored_bp": contig_bp}},
    }
    write_json(scan_record(plan, {"build": "synthetic"}), scan_dir / SCAN_RECORD)
    calibrate(scan_dir, fasta)
    pos = np.sort(rng.choice(3 * contig_bp, variants, replace=False))
    base = pos // 3
    ref = seq[base]
    alts = np.array([[a for a in "ACGT" if a != r] for r in "ACGT"])
    alt = alts[np.searchsorted(np.array(list("ACGT")), ref), pos % 3]
    panel = work / "annotate/panel.tsv"
    pl.DataFrame({"chrom": "chrS", "pos": base + 1, "ref": ref, "alt": alt}).write_csv(
        panel, separator="\t"
    )
    settings = PanelSettings(build="synthetic", format="auto")
    with open_reference(fasta) as reference:
        ingest_s, (checked, _) = timed(
            lambda: ingest_panel(panel, reference, settings, LabelSettings())
        )
    lookup_s, annotated = timed(lambda: annotate_panel(checked, scan_dir))
    counts = dict(annotated.group_by("status").len().iter_rows())
    return {
        "variants": variants,
        "scanned_bases": contig_bp,
        "ingest_s": round(ingest_s, 2),
        "lookup_s": round(lookup_s, 2),
        "lookup_variants_per_s": round(variants / lookup_s),
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
