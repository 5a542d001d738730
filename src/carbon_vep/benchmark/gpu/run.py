"""The GPU check's run: the steps in order within the time budget, the product's own jobs first."""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from carbon_vep.benchmark import known_answer
from carbon_vep.benchmark.gpu.device import Budget
from carbon_vep.benchmark.gpu.generation import find_vllm_python, generation
from carbon_vep.benchmark.gpu.host_memory import host_memory
from carbon_vep.benchmark.gpu.known_answer import PRECISIONS, known_answer_aurocs
from carbon_vep.benchmark.gpu.product import job_env, product
from carbon_vep.benchmark.gpu.product_setup import (
    DRAFT,
    SMOKE_PRODUCT,
    TARGET,
    ProductSizes,
    checkpoints,
)
from carbon_vep.benchmark.gpu.report import environment, write_report
from carbon_vep.benchmark.gpu.reruns import RERUNS, rerun
from carbon_vep.benchmark.gpu.rollouts import rollouts
from carbon_vep.benchmark.gpu.workload import SMOKE, TOY_SHAPES, Model, Sizes, with_model
from carbon_vep.benchmark.harness import bf16_peak_tflops
from carbon_vep.config.gpus import CARBON_SHAPES
from carbon_vep.model.demo import make_tokenizer
from carbon_vep.model.tokens import dna_vocab

# The steps in the order they run, most valuable first: a run cut short by its budget still
# answers the questions that matter, and `--steps` lets a second run take what a first skipped.
# The product's jobs give every figure they can (the product step, its reruns, the rollouts as
# recovery jobs, the known-answer model's scores); the rest measure what no job gives: our
# engine's NIAH job beside vLLM's on a model saved here (vllm), a fresh process's load
# (host_memory); the known-answer model is trained in this process, then scored by jobs.
STEPS = {
    "product": "the product's own jobs: Snakemake with a GPU config, every model rule, bf16, "
    "beside the official scripts' approach",
    # profiles before compiled_layers (2026-11-29): the centered recipe, the weakest ratio,
    # fell to 0.87x in run 12 with no profile to say why; compiled_layers has measured it
    "profiles": RERUNS["profiles"],
    "compiled_layers": RERUNS["compiled_layers"],
    "batch_budgets": RERUNS["batch_budgets"],
    "precision": RERUNS["precision"],
    "rollouts": "Carbon-3B rollouts as recovery jobs: alone, batched, with a Carbon-500M draft",
    "vllm": "the generation tasks on vLLM against our engine",
    "host_memory": "a model job's peak host memory loading each Carbon shape, against its mem_mb",
    "known_answer": "known-answer AUROC in float32, bf16 and bf16 + upcast",
    "carbon_500m": RERUNS["carbon_500m"],
}
PRODUCT_TIMEOUT_S = {"cuda": 360.0, "cpu": 1800.0}  # the workflow's own limit (its jobs stopped)
# the official scripts' approach beside the product (all paths): its own allowance, not only
# what the workflow left (on the H200, 2026-11-28, 97 s left stopped NIAH at 64k and 128k)
OFFICIAL_TIMEOUT_S = {"cuda": 200.0, "cpu": 900.0}
RERUN_TIMEOUT_S = {"cuda": 150.0, "cpu": 900.0}
ROLLOUTS_TIMEOUT_S = {"cuda": 240.0, "cpu": 1800.0}  # all the rollout jobs (the rest stopped)


def _parse_names(text: str, choices, what: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in choices]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown)}: choose from {', '.join(choices)}"
        )
    repeated = sorted({s for s in names if names.count(s) > 1})
    if repeated:  # it would run twice into the same folder
        raise argparse.ArgumentTypeError(f"{what} named twice: {', '.join(repeated)}")
    return names


def parse_steps(text: str) -> list[str]:
    return _parse_names(text, STEPS, "step(s)")


def parse_precisions(text: str) -> list[str]:
    return _parse_names(text, PRECISIONS, "precision(s)")


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
        help="the shape of the model the vllm step saves and scores (default Carbon-3B)",
    )
    parser.add_argument(
        "--product-timeout-s",
        type=float,
        default=None,
        help="the product step's limit on its Snakemake run (default 360 s; --smoke 1800); "
        "its reruns get half",
    )
    parser.add_argument(
        "--known-answer-precisions",
        type=parse_precisions,
        default=list(PRECISIONS),
        help="comma-separated precisions of the known_answer step (default all: "
        + ", ".join(PRECISIONS)
        + "); the CI rehearsal runs bf16 alone",
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
    """The steps, each written to the report as soon as it is done."""

    report: dict
    out: Path
    budget: Budget
    device: torch.device
    sizes: Sizes
    peak: float
    work: Path
    steps: list[str]
    shapes: dict
    vllm_python: str | None = None
    no_vllm_reason: str | None = None
    product_timeout_s: float | None = None
    checkpoints_alone: bool = False  # the product's checkpoints built without its workflow

    def save(self) -> None:
        write_report(self.report, self.out, self.budget)

    def wants(self, step: str, needs_s: float) -> bool:
        return step in self.steps and self.budget.allows(f"{step}: {STEPS[step]}", needs_s)

    def limit(self, default: dict[str, float], share: float = 1.0) -> float:
        """A workflow's limit: the asked (or default) seconds, within what the budget has left."""
        asked = share * (self.product_timeout_s or 0) or default[self.device.type]
        return min(asked, max(60.0, self.budget.left() - 30))

    def official_limit(self) -> float:
        """The official approach's seconds: its allowance, within what the budget has left."""
        return min(OFFICIAL_TIMEOUT_S[self.device.type], max(30.0, self.budget.left() - 30))

    def product(self, tokenizer, vocab, smoke: bool) -> None:
        limit = self.limit(PRODUCT_TIMEOUT_S)
        self.report["product"] = product(
            tokenizer,
            vocab,
            self.device,
            self.shapes,
            self.work,
            smoke,
            limit,
            self.peak,
            official_limit=self.official_limit,
        )
        shutil.copy(self.work / "product/snakemake.log", self.out / "product_snakemake.log")
        self.save()

    def build_checkpoints(self, tokenizer, vocab, smoke: bool) -> None:
        """The product step's checkpoints without its workflow, for a call that runs the
        rollouts without the product (a second device call: they need its models only)."""
        sizes = SMOKE_PRODUCT if smoke else ProductSizes()
        checkpoints(tokenizer, vocab, self.device, self.shapes, self.work / "product", sizes)
        self.checkpoints_alone = True

    def on_the_product(self, steps: list[str], smoke: bool) -> None:
        """Steps that run the product's jobs again on its checkpoints and inputs: its workflow
        with one change a step (benchmark/gpu/reruns.py), the rollouts as recovery jobs
        (rollouts.py); only after a product run whose jobs all succeeded (the rollouts also on
        checkpoints built without the product: `build_checkpoints`)."""
        done = self.report.get("product")
        passed = bool(done) and not done["failed"]
        sizes = SMOKE_PRODUCT if smoke else ProductSizes()
        folder = self.work / "product"
        env = job_env(folder, sizes) if passed or self.checkpoints_alone else {}
        for step in (s for s in steps if s in self.steps):
            if not (passed or (step == "rollouts" and self.checkpoints_alone)):
                self.budget.skipped.append(f"{step}: runs on the product step, which did not pass")
                continue
            if not self.wants(step, 90 if step == "rollouts" else 60):
                continue
            if step == "rollouts":
                models = folder / TARGET, folder / DRAFT
                work = self.work / "rollouts"
                limit = self.limit(ROLLOUTS_TIMEOUT_S)
                self.report["rollouts"] = rollouts(
                    *models, work, self.sizes, env, self.device.type, limit
                )
            else:
                limit = self.limit(RERUN_TIMEOUT_S, 0.5)
                result = rerun(step, folder, env, limit, self.shapes, self.peak, sizes)
                self.report["reruns"][step] = result
                if step == "profiles":
                    self.write_profiles(result.get("profiles", {}), result.get("traces", []))
            self.save()

    def write_profiles(self, tables: dict[str, str], traces: list[str]) -> None:
        """profiles.txt, and the jobs' traces as one file (at most 8 come back from the lent
        machine)."""
        text = "\n\n".join(f"{job}\n{table}" for job, table in tables.items())
        (self.out / "profiles.txt").write_text(text + "\n")
        print(text, file=sys.stderr)
        if traces:
            with tarfile.open(self.out / "profile_traces.tar", "w") as bundle:
                for trace in traces:
                    bundle.add(trace, arcname=Path(trace).name)

    def vllm(self, tokenizer, vocab, name: str) -> None:
        """The vllm step on a random-weight model of the shape `name` (--model), built here and
        freed after (generation saves it for both engines' jobs)."""
        if self.vllm_python is None and self.no_vllm_reason:
            self.budget.skipped.append(f"vllm: {self.no_vllm_reason}")
            return
        if self.budget.allows(f"vllm: {STEPS['vllm']}", 60):
            with_model(tokenizer, vocab, self.device, name, self.shapes, self._generation)

    def _generation(self, model: Model) -> None:
        smoke = self.report["environment"]["smoke"]
        self.report["generation"] += generation(
            model, self.work, self.device, smoke, self.vllm_python, self.budget, self.peak
        )
        self.save()


def _run(
    args: argparse.Namespace, out: Path, device: torch.device, sizes: Sizes, started: float
) -> dict:
    shapes = TOY_SHAPES if args.smoke else CARBON_SHAPES
    budget = Budget(args.budget_s, started)
    peak_n, peak_iters = (256, 5) if args.smoke else (8192, 50)
    peak = bf16_peak_tflops(device, peak_n, peak_iters)
    report: dict = {
        "environment": environment(device, args.smoke, peak, peak_n),
        "product": None,
        "reruns": {},
        "known_answer": [],
        "generation": [],
        "rollouts": {},
        "host_memory": [],
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
        run = Run(
            report,
            out,
            budget,
            device,
            sizes,
            peak,
            work,
            args.steps,
            shapes,
            find_vllm_python(args.vllm_python),
            args.no_vllm_reason,
            args.product_timeout_s,
        )
        if run.wants("product", 120):
            run.product(tokenizer, vocab, args.smoke)
        elif "product" not in args.steps and "rollouts" in args.steps:
            run.build_checkpoints(tokenizer, vocab, args.smoke)
        run.on_the_product(
            ["profiles", "compiled_layers", "batch_budgets", "precision", "rollouts"], args.smoke
        )
        if "vllm" in args.steps:
            run.vllm(tokenizer, vocab, args.model)
        if run.wants("host_memory", 30):
            report["host_memory"] = host_memory(
                tokenizer, vocab, device, shapes, work, budget, args.smoke
            )
            run.save()
        # up to 12 jobs (score, then metrics: 2 a precision and recipe), each loading torch
        if run.wants("known_answer", 90):
            left = budget.left() - 10  # the report still to write
            report["known_answer"] = known_answer_aurocs(
                device,
                work / "known_answer",
                sizes.known_answer_steps,
                left,
                tuple(args.known_answer_precisions),
            )
            run.save()
        run.on_the_product(["carbon_500m"], args.smoke)
    write_report(report, out, budget)
    print((out / "gpu_check.md").read_text())
    return report
