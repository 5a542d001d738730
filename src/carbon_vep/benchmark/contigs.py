"""Benchmark: a genome of many small contigs against the same bases in 3 contigs, each scanned
end to end through the Snakefile with the demo model on CPU, side by side in one run.

The 450,000 bases are real sequence: the shipped lambda phage genome (resources/genome) and
chr17 fragment (resources/demo), joined and repeated. The same bases are written as

- 3 contigs of 150,000 bp (`chr1..chr3`: large enough for their own output files), and
- 1,500 contigs of 300 bp (named as GRCh38's decoys, `chrUn_JTFH01000001v1_decoy`, ...),

and each genome is scanned by `snakemake --cores 2` (plan, chunk jobs of `chunk_bp` scored
bases, merges, summary) with the same settings: tiles 49,146 / 120 (min_context 120: at the
default 24,000 no base of a 300 bp contig is ranked, and the plan refuses such a scan), chunk_bp
150,000, group_bp 100,000 (a scaled-down genome: contigs of 150 kbp keep their own files, the
300 bp contigs share files of up to 100,000 bases). Reported per run: wall time of the whole
`snakemake` call, jobs by rule, output and log files, and the chunk jobs' own time (the model).
`--ungrouped` adds the 1,500 contigs with `group_bp: 1` (one merge job and file set per contig,
the layout before grouping; ~30 min on 2 cores).

Usage: python -m carbon_vep.benchmark.contigs [--json results/bench_contigs.json] [--ungrouped]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import yaml

from carbon_vep.benchmark.harness import PROJECT_ROOT, job_env, run_command, write_json
from carbon_vep.benchmark.synthetic import write_fasta

ROOT = PROJECT_ROOT
SOURCES = (ROOT / "resources/genome/lambda_phage.fa", ROOT / "resources/demo/chr17.hg19.part.fa")
TOTAL_BP, SMALL_BP = 450_000, 300
# min_context 120, not the default 24,000: a 300 bp contig then has bases on the calibration's
# scales (at 24,000 none has, and the plan refuses a scan with no ranked base)
SETTINGS = {"tile_bp": 49_146, "min_context": 120, "group_bp": 100_000}
CHUNK_BP = 150_000
MODEL = {"trust_remote_code": True, "dtype": "float32", "device": "cpu", "batch_size": 4}


def _sequence() -> str:
    """TOTAL_BP bases of real sequence: the shipped genomes joined, repeated as needed."""
    parts = ["".join(p.read_text().splitlines()[1:]) for p in SOURCES]
    joined = "".join(parts)
    return (joined * (TOTAL_BP // len(joined) + 1))[:TOTAL_BP]


def genomes() -> dict[str, dict[str, str]]:
    seq = _sequence()
    third = TOTAL_BP // 3
    return {
        "3 contigs": {f"chr{i + 1}": seq[i * third : (i + 1) * third] for i in range(3)},
        "1,500 contigs": {
            f"chrUn_JTFH0100{i:04d}v1_decoy": seq[i * SMALL_BP : (i + 1) * SMALL_BP]
            for i in range(TOTAL_BP // SMALL_BP)
        },
    }


def run(work: Path, label: str, contigs: dict[str, str], model: Path, **settings) -> dict:
    """One genome scanned end to end in a fresh working directory: wall time, jobs, files."""
    folder = work / re.sub(r"\W+", "_", label).strip("_")
    folder.mkdir(parents=True)
    fasta = write_fasta(folder / "genome.fa", contigs)
    config = {
        "outdir": "results",
        "chunk_bp": CHUNK_BP,
        "models": {"demo": MODEL | {"path": str(model)}},
        "scans": {"g": {"reference": str(fasta), "build": "bench", "regions": "all"} | SETTINGS},
    }
    config["scans"]["g"].update(settings)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(folder),
        "--configfile",
        str(folder / "config.yaml"),
        "--cores",
        "2",
        "results/scans/g/demo/summary.json",
    ]
    env = job_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = run_command(command, env=env, cwd=ROOT, check=False)
    if done.returncode:
        sys.exit(f"{label}: snakemake failed\n{done.stderr[-3000:]}")
    wall = done.seconds
    rules = re.findall(
        r"^(?:local)?(?:rule|checkpoint) (\w+):$", done.stdout + done.stderr, re.MULTILINE
    )
    scan = folder / "results/scans/g/demo"
    outputs = [p for p in scan.rglob("*") if p.is_file()]
    logs = [p for p in (folder / "logs").rglob("*.log")]
    chunks = [json.loads(p.read_text()) for p in (scan / "chunks").glob("chunk_*.json")]
    summary = json.loads((scan / "summary.json").read_text())
    return {
        "contigs": len(contigs),
        "bases": sum(len(s) for s in contigs.values()),
        "snvs_written": 3 * summary["bases_written"],
        "wall_s": round(wall, 1),
        "jobs": len(rules),
        "jobs_by_rule": {rule: rules.count(rule) for rule in dict.fromkeys(rules)},
        "output_files": len(outputs),
        "log_files": len(logs),
        "chunk_jobs_s": round(sum(c["wall_s"] for c in chunks), 1),
        "settings": {**SETTINGS, **settings, "chunk_bp": CHUNK_BP},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--ungrouped",
        action="store_true",
        help="also the 1,500 contigs with one merge job per contig",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_contigs_"))
    from carbon_vep.model.demo import build_demo_model, is_complete

    model = ROOT / "resources/demo_model"
    if not is_complete(model):
        model = build_demo_model(work / "demo_model")
    runs = genomes()
    report = {
        "machine": f"{os.cpu_count()} CPU cores (shared), CPU only",
        "model": "demo (64,2), float32, batch 4",
        "runs": {label: run(work, label, contigs, model) for label, contigs in runs.items()},
    }
    if args.ungrouped:
        report["runs"]["1,500 contigs, group_bp 1"] = run(
            work, "1,500 contigs, group_bp 1", runs["1,500 contigs"], model, group_bp=1
        )
    few, many = report["runs"]["3 contigs"], report["runs"]["1,500 contigs"]
    report["ratio_wall_many_over_few"] = round(many["wall_s"] / few["wall_s"], 2)
    print(json.dumps(report, indent=2))
    write_json(args.json, report)


if __name__ == "__main__":
    main()
