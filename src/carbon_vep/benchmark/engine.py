"""Benchmark (`make bench`): the product's own jobs against the official scripts' approach.

The recipes, as users run them: `carbon-vep score` (check, window and score a panel in one
process; its job record gives the seconds after the model's load, model.job_record) against
benchmark.reference_job (the official vep_eval.py / clinvar_vep_eval.py way, in its own process,
timed after its load), alternating (ours, official, ours, official), on the same model, genome
and panel (a VCF written here), each side's whole-process peak RSS measured by the harness, and
the answers compared (Spearman, largest difference). Printed as a Markdown table with ratios.

Two rows stay in-process, where no job gives the figure: the output layer alone on one
window's hidden states (a single function's cost: the 4,096 DNA rows, the chunked normaliser,
full logits), and the scan against one window per base (no official script scans; the
reference is the per-base approach restated). Their peak memory is measured once per approach
in a fresh spawned process: its peak RSS above its RSS with the model loaded.

On the CPU: the demo model, a 2-layer body with Carbon's full 155,776-entry vocabulary, so the
output layer weighs what Carbon's does. On a GPU the figures come from `make gpu-check`: its
product step runs the product's jobs with Carbon's shapes in bf16 beside the official scripts'
approach, per rule tokens/s and the share of the measured bf16 matmul peak.

Usage: python -m carbon_vep.benchmark.engine [--reps 2] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import torch

from carbon_vep.benchmark import published
from carbon_vep.benchmark.harness import (
    CARBON_VEP,
    PROJECT_ROOT,
    job_env,
    median_interleaved,
    peak_rss_above_start_mb,
    run_command,
    score_agreement,
    write_json,
)
from carbon_vep.benchmark.synthetic import write_vcf
from carbon_vep.config.stages import ModelSettings, TileSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.markdown import table as markdown_table
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.engine import Engine
from carbon_vep.model.job_record import RECORDS_ENV
from carbon_vep.model.loading import load_model
from carbon_vep.scan.tiles import scan_region

FASTA = PROJECT_ROOT / "resources/demo/chr17.hg19.part.fa"
CHROM = "chr17"


@dataclass
class Workload:
    name: str
    n_variants: int
    bp: int
    approaches: dict[str, Callable[[], object]]


@dataclass
class Row:
    workload: str
    approach: str
    n_variants: int
    bp: int
    seconds: float
    peak_mb: float

    @property
    def variants_per_s(self) -> float:
        return self.n_variants / self.seconds

    @property
    def bp_per_s(self) -> float:
        return self.bp / self.seconds


def _child_peak(quick: bool, workload_index: int, approach: str, queue) -> None:
    with torch.inference_mode(), open_reference(FASTA) as ref:
        workload = build_workloads(ref, quick)[workload_index]
        queue.put(peak_rss_above_start_mb(workload.approaches[approach]))


def child_peak_mb(quick: bool, workload_index: int, approach: str) -> float:
    """Peak memory of one approach, measured alone in a fresh (spawned) process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child_peak, args=(quick, workload_index, approach, queue))
    process.start()
    value = queue.get()
    process.join()
    return value


# ---- workloads -----------------------------------------------------------------------------
def snvs(reference, start: int, n_bases: int) -> list[tuple[str, int, str, str]]:
    out = []
    for pos in range(start, start + n_bases):
        ref = reference.fetch(CHROM, pos - 1, pos)
        out += [(CHROM, pos, ref, alt) for alt in "ACGT" if alt != ref]
    return out


def build_workloads(ref, quick: bool) -> list[Workload]:
    """The same model and inputs for every approach (the demo model: Carbon's vocabulary)."""
    loaded = load_model(
        ModelSettings(
            str(build_demo_model(PROJECT_ROOT / "resources/demo_model")), trust_remote_code=True
        )
    )
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)
    model, tok, prefix = loaded.model, loaded.tokenizer, loaded.vocab.prefix_token
    window = ref.fetch(CHROM, 10_000, 18_190)  # one centered window: 1,366 tokens
    rows_h = engine.hidden_states([loaded.vocab.encode(window)])[0][0]
    n_bases, context = (24 if quick else 48), 2_400
    positions = list(range(30_001, 30_001 + n_bases))
    kmer_ids = loaded.vocab.kmer_ids.tolist()
    return [
        Workload(
            "one 8,190 bp window: output layer only",
            1,
            len(window),
            {
                "ours: 4,096 DNA rows (FNS marginals)": lambda: engine.kmer_base_marginals(
                    engine.dna_log_probs(rows_h, "dna_block")
                ),
                "ours: chunked full-vocabulary normaliser": lambda: engine.full_logsumexp(rows_h),
                "reference: full logits + log-softmax": lambda: torch.log_softmax(
                    model.lm_head(rows_h).float(), dim=-1
                ),
            },
        ),
        Workload(
            f"scan of every SNV, {n_bases} bp, >= {context} bp context",
            3 * n_bases,
            n_bases,
            {
                "ours (scan: one pass per tile)": lambda: scan_region(
                    engine,
                    ref,
                    CHROM,
                    30_000,
                    30_000 + n_bases,
                    TileSettings(context + 600, context),
                ),
                "reference (one window per base)": lambda: published.per_base_marginals(
                    model, tok, prefix, kmer_ids, ref, CHROM, positions, context
                ),
            },
        ),
    ]


# ---- the recipes: the product's jobs against the official approach, each its own process ----
@dataclass(frozen=True)
class RecipeWorkload:
    name: str
    recipe: str  # the recipe `carbon-vep score` runs; the official task of the same name
    window_bp: int
    variants: list[tuple[str, int, str, str]]


def recipe_workloads(ref, quick: bool) -> list[RecipeWorkload]:
    dense = snvs(ref, 20_001, 4 if quick else 8)  # saturation mutagenesis: 3 alts per site
    sparse = snvs(ref, 25_000, 40)[::20][: 3 if quick else 6]  # ClinVar-like: far apart
    return [
        RecipeWorkload("dense saturation, centered 8 kbp", "centered", 8192, dense),
        RecipeWorkload("sparse ClinVar-like, right-end 24 kbp", "nexttoken", 24_000, sparse),
    ]


def _ours(workload: RecipeWorkload, model_dir: Path, panel: Path, out: Path, env) -> tuple:
    """`carbon-vep score` as a user runs it: its seconds after the load (its job record) and
    its whole process's peak RSS."""
    records = out.parent / f"records_{out.stem}"
    argv = [*CARBON_VEP, "score", "--model", str(model_dir)]
    argv += ["--trust-remote-code", "--reference", str(FASTA), "--panel", str(panel)]
    argv += ["--build", "hg19", "--recipe", workload.recipe]
    argv += ["--window-bp", str(workload.window_bp), "--out", str(out)]
    done = run_command(argv, env=dict(env, **{RECORDS_ENV: str(records)}))
    [record] = [json.loads(p.read_text()) for p in records.glob("*.json")]
    return record["after_load_s"], done.peak_rss_mb


def _official(workload: RecipeWorkload, model_dir: Path, panel: Path, out: Path, env) -> tuple:
    """benchmark.reference_job: its seconds after its load and its whole process's peak RSS."""
    argv = [sys.executable, "-m", "carbon_vep.benchmark.reference_job", "--task", workload.recipe]
    argv += ["--model", str(model_dir), "--dtype", "float32", "--device", "cpu"]
    argv += ["--reference", str(FASTA), "--panel", str(panel)]
    argv += ["--window-bp", str(workload.window_bp), "--out", str(out)]
    argv += ["--record", str(out.with_suffix(".json"))]
    done = run_command(argv, env=env)
    return json.loads(out.with_suffix(".json").read_text())["score_s"], done.peak_rss_mb


def recipe_rows(reps: int, quick: bool) -> tuple[list[Row], list[dict]]:
    """Each recipe workload: ours and the official way, alternating, `reps` times each; the
    median seconds, the largest peak, and how far the answers agree."""
    model_dir = build_demo_model(PROJECT_ROOT / "resources/demo_model")
    env = job_env()
    rows, agreements = [], []
    with open_reference(FASTA) as ref, tempfile.TemporaryDirectory() as tmp:
        for index, workload in enumerate(recipe_workloads(ref, quick)):
            records = [(c, pos, r, a, ".") for c, pos, r, a in workload.variants]
            panel = write_vcf(Path(tmp) / f"panel_{index}.vcf", ref.lengths, records)
            runs: dict[str, list[tuple[float, float]]] = {"ours": [], "official": []}
            for rep in range(reps):
                for side, run in (("ours", _ours), ("official", _official)):
                    out = Path(tmp) / f"{side}_{index}_{rep}.parquet"
                    runs[side].append(run(workload, model_dir, panel, out, env))
            names = {"ours": OURS_JOB, "official": OFFICIAL_JOB}
            for side, measured in runs.items():
                seconds = statistics.median(s for s, _ in measured)
                peak = max(m for _, m in measured)
                n, bp = len(workload.variants), len(workload.variants) * workload.window_bp
                rows.append(Row(workload.name, names[side], n, bp, seconds, peak))
            ours = pl.read_parquet(Path(tmp) / f"ours_{index}_0.parquet")
            official = pl.read_parquet(Path(tmp) / f"official_{index}_0.parquet")
            agreements.append({"workload": workload.name, **score_agreement(ours, official)})
    return rows, agreements


OURS_JOB = "ours: carbon-vep score (its own process, after the load)"
OFFICIAL_JOB = "reference: the official script's way (its own process, after the load)"


def cpu_rows(reps: int, quick: bool) -> list[Row]:
    rows = []
    with torch.inference_mode(), open_reference(FASTA) as ref:
        workloads = build_workloads(ref, quick)
        for index, workload in enumerate(workloads):
            seconds = median_interleaved(workload.approaches, reps, workload.name)
            for approach, secs in seconds.items():
                memory = child_peak_mb(quick, index, approach)
                rows.append(
                    Row(workload.name, approach, workload.n_variants, workload.bp, secs, memory)
                )
    return rows


# ---- report ----------------------------------------------------------------------------------
def table(rows: list[Row]) -> str:
    """Each approach's row with its ratios against the workload's reference approach."""
    cells = []
    for row in rows:
        ref = next(r for r in rows if r.workload == row.workload and r.approach.startswith("ref"))
        speed = row.variants_per_s / ref.variants_per_s
        memory = ref.peak_mb / max(row.peak_mb, 1.0)
        ratios = ["—", "—"] if row is ref else [f"{speed:.2f}x", f"{memory:.1f}x less"]
        cells.append(
            [
                row.workload,
                row.approach,
                row.n_variants,
                f"{row.seconds:.2f}",
                f"{row.variants_per_s:.2f}",
                f"{row.bp_per_s:,.0f}",
                f"{row.peak_mb:,.0f}",
                *ratios,
            ]
        )
    header = [
        "workload",
        "approach",
        "variants",
        "s",
        "variants/s",
        "bp/s",
        "peak MB",
        "speed vs ref",
        "memory vs ref",
    ]
    return markdown_table(header, cells)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smaller workloads (smoke test)")
    parser.add_argument("--json", default=None, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads", file=sys.stderr)
    jobs, agreements = recipe_rows(args.reps, args.quick)
    rows = cpu_rows(args.reps, args.quick)
    rows = rows[:3] + jobs + rows[3:]  # the output layer, the recipes, the scan
    print(table(rows))
    for a in agreements:
        print(
            f"\n{a['workload']}: ours and the official way agree on {a['variants']} variants: "
            f"Spearman {a['spearman']:.4f}, largest score difference {a['max_abs_difference']:.2g}"
        )
    payload: dict = {
        "cpu": [r.__dict__ | {"variants_per_s": r.variants_per_s} for r in rows],
        "agreement": agreements,
    }
    if torch.cuda.is_available():
        print("\nOn a GPU, the product's jobs are measured by `make gpu-check` (its product step).")
    write_json(args.json, payload)


if __name__ == "__main__":
    main()
