"""Benchmark: a scan's plan (`carbon-vep plan-scan`, the workflow's checkpoint, no model) on a
genome of hg38's size, as a job in a fresh process: wall seconds and peak RSS.

The genome is written here: hg38's 24 chromosomes at their lengths to the Mbp (3.1 Gbp) and
3,000 contigs of 20 kbp (the unplaced, alt and decoy contigs of an analysis set), random ACGT with
a 100-bp N gap every 10 kbp (a draft assembly: 314,000 gaps; GRCh38 has under a thousand), so a
plan holds a piece per gap. Two plans:
- `all`: every contig, the default tile, `min_context` 5,000 (the gaps leave no base 24,000 bp of
  context, which the plan refuses);
- `exome`: a BED of 200,000 targets of 150 bp spread over the 24 chromosomes (an exome's
  count), tiles of 1,000 bp, `min_context` 100: each target's pieces found among its contig's
  runs.

`--scale` shrinks every length (the smoke test's genome is 1/1,000 of it).
Usage: python -m carbon_vep.benchmark.scan_plan [--json results/bench_scan_plan.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from carbon_vep.benchmark.harness import carbon_vep_job, write_json

# GRCh38's chromosomes 1-22, X and Y, Mbp (NCBI's assembly report, rounded)
HG38_MBP = dict(
    zip(
        [f"chr{i}" for i in range(1, 23)] + ["chrX", "chrY"],
        [249, 242, 198, 190, 182, 171, 159, 145, 138, 134, 135, 133, 114, 107, 102, 90, 83, 80,
         59, 64, 47, 51, 156, 57],
        strict=True,
    )
)  # fmt: skip
SMALL_CONTIGS, SMALL_BP = 3_000, 20_000
GAP_EVERY, GAP_BP = 10_000, 100
TARGETS, TARGET_BP = 200_000, 150
LINE = 50  # FASTA line length


def write_genome(path: Path, scale: float) -> dict[str, int]:
    """The draft-like genome (module docstring) at `scale`; its contigs' lengths."""
    block_bp = max(GAP_EVERY, int(1_000_000 * scale) // GAP_EVERY * GAP_EVERY)
    rng = np.random.default_rng(0)
    block = np.frombuffer(b"ACGT", np.uint8)[rng.integers(0, 4, block_bp)].copy()
    for at in range(GAP_EVERY // 2, block_bp, GAP_EVERY):
        block[at : at + GAP_BP] = ord("N")
    lines = block.reshape(-1, LINE)
    text = np.hstack([lines, np.full((len(lines), 1), ord("\n"), np.uint8)]).tobytes()
    small = text[: (LINE + 1) * (max(LINE, int(SMALL_BP * scale)) // LINE)]
    lengths = {}
    with open(path, "wb") as out:
        for name, mbp in HG38_MBP.items():
            blocks = max(1, round(mbp * 1_000_000 * scale / block_bp))
            out.write(f">{name}\n".encode() + text * blocks)
            lengths[name] = blocks * block_bp
        for number in range(SMALL_CONTIGS):
            out.write(f">chrUn_{number}\n".encode() + small)
            lengths[f"chrUn_{number}"] = len(small) // (LINE + 1) * LINE
    return lengths


def write_exome(path: Path, lengths: dict[str, int], targets: int) -> None:
    """`targets` intervals of TARGET_BP, evenly over the 24 chromosomes by their length."""
    chromosomes = {name: lengths[name] for name in HG38_MBP}
    total = sum(chromosomes.values())
    with open(path, "w") as out:
        for name, length in chromosomes.items():
            count = max(1, targets * length // total)
            step = length // (count + 1)
            out.writelines(
                f"{name}\t{k * step}\t{k * step + TARGET_BP}\n" for k in range(1, count + 1)
            )


def plan(work: Path, reference: Path, label: str, *options: str) -> dict:
    out = work / f"plan_{label}.json"
    job = carbon_vep_job("plan-scan", "--reference", reference, *options, "--out", out)
    totals = json.loads(out.read_text())["totals"]
    kept = ("targeted_bp", "scored_bp", "n_runs", "tiles", "chunks")
    return {"s": round(job.seconds, 1), "peak_rss_mb": round(job.peak_rss_mb)} | {
        key: totals[key] for key in kept
    }


def bench(work: Path, scale: float = 1.0, targets: int = TARGETS) -> dict:
    reference = work / "draft.fa"
    lengths = write_genome(reference, scale)
    write_exome(work / "exome.bed", lengths, targets)
    largest = max(lengths.values())
    return {
        "genome_bp": sum(lengths.values()),
        "contigs": len(lengths),
        "largest_contig_bp": largest,
        "all": plan(work, reference, "all", "--regions", "all", "--min-context", "5000"),
        "exome": plan(
            work,
            reference,
            "exome",
            *("--regions", work / "exome.bed", "--tile-bp", "1000", "--min-context", "100"),
        ),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--workdir", default=None, help="where the 3.2 GB FASTA is written")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--targets", type=int, default=TARGETS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_scan_plan_", dir=args.workdir) as tmp:
        report = {"machine": f"{os.cpu_count()} CPU cores (shared), CPU only"}
        report |= bench(Path(tmp), args.scale, args.targets)
    print(json.dumps(report, indent=2))
    write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
