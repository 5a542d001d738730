"""The GPU check's run: the steps in order within the time budget, the headline model first."""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from carbon_vep.benchmark import known_answer
from carbon_vep.benchmark.gpu.ablations import ablations
from carbon_vep.benchmark.gpu.device import Budget, profile_table
from carbon_vep.benchmark.gpu.generation import find_vllm_python, generation
from carbon_vep.benchmark.gpu.host_memory import host_memory
from carbon_vep.benchmark.gpu.niah import DEFAULT_CHUNKS, niah_phase
from carbon_vep.benchmark.gpu.paths import measure, model_paths
from carbon_vep.benchmark.gpu.precision import compare_precision, known_answer_aurocs
from carbon_vep.benchmark.gpu.product import product
from carbon_vep.benchmark.gpu.report import environment, write_report
from carbon_vep.benchmark.gpu.rollouts import rollouts
from carbon_vep.benchmark.gpu.workload import (
    SMOKE,
    TOY_SHAPES,
    Inputs,
    Model,
    Sizes,
    make_inputs,
    with_model,
)
from carbon_vep.benchmark.harness import bf16_peak_tflops
from carbon_vep.config.gpus import (
    CARBON_SHAPES,
)
from carbon_vep.genome.reference import open_reference
from carbon_vep.model.demo import make_tokenizer
from carbon_vep.model.tokens import dna_vocab

# The steps in the order they run, most valuable first: a run cut short by its budget still
# answers the questions that matter, and `--steps` lets a second run take what a first skipped.
STEPS = {
    "product": "the product's own jobs: Snakemake with a GPU config, every model rule, bf16",
    "precision": "Carbon-3B bf16 against float32 on every scoring path",
    "centered": "Carbon-3B centered recipe (full_vocab, prefix sharing): tokens/s, % of peak",
    "scan": "Carbon-3B genome scan chunk: SNVs/s, hg38 GPU-hours",
    "niah": "Genomic-NIAH on our engine at 32k/64k/128k, against the published three passes",
    "rollouts": "Carbon-3B long rollouts alone, batched and with a Carbon-500M draft",
    "paths": "the other Carbon-3B paths (recipes, recovery, perturbation)",
    "ablations": "Carbon-3B GPU costs removed, before and after",
    "profiles": "torch-profiler tables of the Carbon-3B centered and scan paths",
    "vllm": "the generation tasks on vLLM against our engine",
    "host_memory": "a model job's peak host memory loading each Carbon shape, against its mem_mb",
    "known_answer": "known-answer AUROC in float32, bf16 and bf16 + upcast",
    "carbon_500m": "every path with Carbon-500M's shape",
}
HEADLINE_STEPS = [
    s for s in STEPS if s not in ("product", "host_memory", "known_answer", "carbon_500m")
]
PRODUCT_TIMEOUT_S = {"cuda": 300.0, "cpu": 1800.0}  # the workflow's own limit (its jobs stopped)


def parse_steps(text: str) -> list[str]:
    steps = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown step(s) {', '.join(unknown)}: choose from {', '.join(STEPS)}"
        )
    return steps


def main(argv: list[str] | None = None, started: float | None = None) -> dict:
    started = time.monotonic() if started is None else started
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON, Markdown, profiles")
    parser.add_argument("--smoke", action="store_true", help="CPU, toy shapes, seconds")
    parser.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument(
        "--steps",
        type=parse_steps,
        default=list(STEPS),
        help="comma-separated steps to run, in the fixed order: " + ", ".join(STEPS),
    )
    parser.add_argument(
        "--niah-prefill-chunks",
        type=lambda text: tuple(int(v) for v in text.split(",")),
        default=DEFAULT_CHUNKS,
        help="comma-separated prefill chunks the niah step runs ours with (0 = whole prompt)",
    )
    parser.add_argument(
        "--vllm-python",
        help="the Python of the vLLM jobs (default: .venv-vllm/bin/python, else this one if it "
        "has vllm); none: skip the vLLM phase",
    )
    parser.add_argument(
        "--no-vllm-reason",
        default=None,
        help="why there is no vLLM here (recorded with the skipped vllm step)",
    )
    parser.add_argument(
        "--rollout-tokens",
        type=int,
        default=None,
        help="new tokens a prompt in the rollouts step (default 512; --smoke 24)",
    )
    parser.add_argument(
        "--model",
        choices=list(CARBON_SHAPES),
        default="Carbon-3B",
        help="the shape the headline steps (precision .. vllm) run on (default Carbon-3B)",
    )
    parser.add_argument(
        "--niah-contexts",
        type=lambda text: tuple(int(v) for v in text.split(",")),
        default=None,
        help="comma-separated contexts of the niah step (default 32k, 64k, 128k)",
    )
    parser.add_argument(
        "--niah-rows", type=int, default=None, help="rows a context in the niah step"
    )
    parser.add_argument(
        "--product-timeout-s",
        type=float,
        default=None,
        help="the product step's limit on its Snakemake run (default 300 s; --smoke 1800)",
    )
    parser.add_argument(
        "--generation-only",
        action="store_true",
        help="only the vLLM phase (same as --steps vllm)",
    )
    args = parser.parse_args(argv)
    if args.generation_only:
        args.steps = ["vllm"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda" and not args.smoke:
        parser.error("no CUDA device: run with --smoke (toy sizes on the CPU)")
    sizes = SMOKE if args.smoke else Sizes()
    if args.rollout_tokens:
        sizes = dataclasses.replace(sizes, rollout_new_tokens=args.rollout_tokens)
    threads = torch.get_num_threads()
    if args.smoke:  # toy models: one thread is fastest and does not fight other processes
        torch.set_num_threads(1)
    try:
        return _run(args, out, device, sizes, started)
    finally:
        torch.set_num_threads(threads)


@dataclass
class Run:
    """The steps of one model, each written to the report as soon as it is done."""

    report: dict
    out: Path
    budget: Budget
    device: torch.device
    sizes: Sizes
    peak: float
    reference: Any
    inputs: Inputs
    work: Path
    vllm_python: str | None
    steps: list[str]
    no_vllm_reason: str | None = None
    niah_chunks: tuple[int, ...] = DEFAULT_CHUNKS
    niah_contexts: tuple[int, ...] | None = None
    niah_rows: int | None = None

    def save(self) -> None:
        write_report(self.report, self.out, self.budget)

    def wants(self, step: str, needs_s: float) -> bool:
        return step in self.steps and self.budget.allows(f"{step}: {STEPS[step]}", needs_s)

    def headline(self, model: Model) -> None:
        """Carbon-3B: the steps in the order of STEPS."""
        paths = model_paths(model, self.reference, self.inputs, self.work)
        centered, scan = paths[0], paths[6]
        if self.wants("precision", 45):
            self.report["precision"] += compare_precision(model, self.reference, self.inputs)
            self.save()
        for step, path in (("centered", centered), ("scan", scan)):
            if self.wants(step, 15):
                self.measure(model, path)
        if self.wants("niah", 60):
            smoke = self.report["environment"]["smoke"]
            self.report["niah"] += niah_phase(
                model,
                self.work,
                self.device,
                smoke,
                self.budget,
                self.niah_chunks,
                self.niah_contexts,
                self.niah_rows,
            )
            self.save()
        if self.wants("rollouts", 90):
            smoke = self.report["environment"]["smoke"]
            self.report["rollouts"] = rollouts(model, self.device, self.sizes, smoke)
            self.save()
        if "paths" in self.steps:
            for path in paths:
                if path not in (centered, scan) and self.budget.allows(
                    f"paths: {model.name} / {path.name}", 10
                ):
                    self.measure(model, path)
        if self.wants("ablations", 90):
            self.report["ablations"] += ablations(
                model, self.reference, self.inputs, self.work, self.device
            )
            self.save()
        if self.wants("profiles", 15):
            for path, short in ((centered, "centered"), (scan, "scan")):
                self.profile(model, path, short)
        if "vllm" in self.steps:
            self.vllm(model)

    def measure(self, model: Model, path) -> None:
        self.report["paths"].append(measure(model, path, self.device, self.sizes, self.peak))
        self.save()

    def profile(self, model: Model, path, short: str) -> None:
        table = profile_table(path.run, self.device)
        file = f"profile_{model.name}_{short}.txt"
        (self.out / file).write_text(f"{model.name} / {path.name}\n{table}\n")
        self.report["profiles"][file] = table
        print(f"\n{model.name} / {path.name}\n{table}")
        self.save()

    def vllm(self, model: Model) -> None:
        if self.vllm_python is None and self.no_vllm_reason:
            self.budget.skipped.append(f"vllm: {self.no_vllm_reason}")
            return
        if self.budget.allows(f"vllm: {STEPS['vllm']}", 60):
            self.report["generation"] += generation(
                model,
                self.work,
                self.device,
                self.report["environment"]["smoke"],
                self.vllm_python,
                self.budget,
                self.peak,
            )
            self.save()

    def other_paths(self, model: Model) -> None:
        """Carbon-500M: every path, nothing else."""
        for path in model_paths(model, self.reference, self.inputs, self.work):
            if self.budget.allows(f"carbon_500m: {model.name} / {path.name}", 10):
                self.measure(model, path)


def _run(
    args: argparse.Namespace, out: Path, device: torch.device, sizes: Sizes, started: float
) -> dict:
    shapes = TOY_SHAPES if args.smoke else CARBON_SHAPES
    budget = Budget(args.budget_s, started)
    peak_n, peak_iters = (256, 5) if args.smoke else (8192, 50)
    peak = bf16_peak_tflops(device, peak_n, peak_iters)
    report: dict = {
        "environment": environment(device, args.smoke, peak, peak_n),
        "paths": [],
        "ablations": [],
        "precision": [],
        "known_answer": [],
        "niah": [],
        "generation": [],
        "rollouts": {},
        "host_memory": [],
        "product": None,
        "profiles": {},
        "steps": args.steps,
        "skipped": budget.skipped,
    }
    print(
        f"[gpu-check] {report['environment']['device']}: bf16 peak {peak:,.1f} TFLOP/s",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        work = Path(tmp)
        # Carbon's tokenizer (155,776 ids); under --smoke the same layout with a 256-entry text
        # block (4,480 ids), so the full-vocabulary paths run in seconds on a CPU
        tokenizer = known_answer.make_tokenizer(work) if args.smoke else make_tokenizer()
        vocab = dna_vocab(tokenizer)
        report["environment"]["vocabulary"] = len(tokenizer)
        if "product" in args.steps and budget.allows(f"product: {STEPS['product']}", 120):
            limit = args.product_timeout_s or PRODUCT_TIMEOUT_S[device.type]
            limit = min(limit, max(60.0, args.budget_s - budget.elapsed() - 30))
            report["product"] = product(tokenizer, vocab, device, shapes, work, args.smoke, limit)
            shutil.copy(work / "product/snakemake.log", out / "product_snakemake.log")
            write_report(report, out, budget)
        inputs = make_inputs(work, sizes)
        with open_reference(inputs.fasta) as reference:
            run = Run(
                report,
                out,
                budget,
                device,
                sizes,
                peak,
                reference,
                inputs,
                work,
                find_vllm_python(args.vllm_python),
                args.steps,
                args.no_vllm_reason,
                args.niah_prefill_chunks,
                args.niah_contexts,
                args.niah_rows,
            )
            if any(s in args.steps for s in HEADLINE_STEPS) and budget.allows(args.model, 40):
                with_model(tokenizer, vocab, device, args.model, shapes, run.headline)
            if run.wants("host_memory", 30):
                report["host_memory"] = host_memory(
                    tokenizer, vocab, device, shapes, work, budget, args.smoke
                )
                run.save()
            if run.wants("known_answer", 30):
                report["known_answer"] = known_answer_aurocs(
                    device, work / "known_answer", sizes.known_answer_steps
                )
                run.save()
            if run.wants("carbon_500m", 25):
                with_model(tokenizer, vocab, device, "Carbon-500M", shapes, run.other_paths)
    write_report(report, out, budget)
    print((out / "gpu_check.md").read_text())
    return report
