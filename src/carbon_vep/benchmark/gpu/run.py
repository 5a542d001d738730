"""The GPU check's run: the steps in order within the time budget, the headline model first."""

from __future__ import annotations

import argparse
import gc
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
from carbon_vep.benchmark.gpu.paths import measure, model_paths
from carbon_vep.benchmark.gpu.precision import compare_precision, known_answer_aurocs
from carbon_vep.benchmark.gpu.report import environment, write_report
from carbon_vep.benchmark.gpu.workload import (
    BF16,
    SMOKE,
    TOY_SHAPES,
    Inputs,
    Model,
    Sizes,
    make_inputs,
    random_model,
)
from carbon_vep.benchmark.harness import bf16_peak_tflops
from carbon_vep.config.gpus import (
    CARBON_SHAPES,
)
from carbon_vep.genome.reference import open_reference
from carbon_vep.model.demo import make_tokenizer
from carbon_vep.model.tokens import dna_vocab


def main(argv: list[str] | None = None, started: float | None = None) -> dict:
    started = time.monotonic() if started is None else started
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON, Markdown, profiles")
    parser.add_argument("--smoke", action="store_true", help="CPU, toy shapes, seconds")
    parser.add_argument("--device", default=None, help="default: cuda if present, else cpu")
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument(
        "--vllm-python",
        help="the Python of the vLLM jobs (default: .venv-vllm/bin/python, else this one if it "
        "has vllm); none: skip the vLLM phase",
    )
    parser.add_argument(
        "--generation-only",
        action="store_true",
        help="only the vLLM phase (the generation tasks on both engines), in its own budget",
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type != "cuda" and not args.smoke:
        parser.error("no CUDA device: run with --smoke (toy sizes on the CPU)")
    sizes = SMOKE if args.smoke else Sizes()
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

    def save(self) -> None:
        write_report(self.report, self.out, self.budget)

    def check_model(self, model: Model, headline: bool, only_generation: bool) -> None:
        if not only_generation:
            self.check_paths(model, headline)
        if headline and self.budget.allows("vLLM generation", 60):
            self.report["generation"] += generation(
                model, self.work, self.device, self.report["environment"]["smoke"],
                self.vllm_python, self.budget,
            )  # fmt: skip
            self.save()

    def check_paths(self, model: Model, headline: bool) -> None:
        paths = model_paths(model, self.reference, self.inputs, self.work)
        for path in paths:
            if self.budget.allows(f"{model.name} / {path.name}", 10):
                self.report["paths"].append(
                    measure(model, path, self.device, self.sizes, self.peak)
                )
                self.save()
        if not headline:
            return
        if self.budget.allows(f"{model.name} ablations", 90):
            self.report["ablations"] += ablations(
                model, self.reference, self.inputs, self.work, self.device
            )
            self.save()
        for path, short in ((paths[0], "centered"), (paths[6], "scan")):  # published, scan
            if self.budget.allows(f"profile of {model.name} / {path.name}", 15):
                table = profile_table(path.run, self.device)
                file = f"profile_{model.name}_{short}.txt"
                (self.out / file).write_text(f"{model.name} / {path.name}\n{table}\n")
                self.report["profiles"][file] = table
                print(f"\n{model.name} / {path.name}\n{table}")
                self.save()
        if self.budget.allows(f"{model.name} bf16 against float32", 45):
            self.report["precision"] += compare_precision(model, self.reference, self.inputs)
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
        "paths": [],
        "ablations": [],
        "precision": [],
        "known_answer": [],
        "generation": [],
        "profiles": {},
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
        inputs = make_inputs(work, sizes)
        with open_reference(inputs.fasta) as reference:
            run = Run(report, out, budget, device, sizes, peak, reference, inputs, work,
                      find_vllm_python(args.vllm_python))  # fmt: skip
            names = ("Carbon-3B",) if args.generation_only else ("Carbon-3B", "Carbon-500M")
            for name in names:  # the headline model first
                if budget.allows(f"{name} paths", 40 if name == "Carbon-3B" else 25):
                    model = random_model(name, shapes[name], tokenizer, vocab, device, BF16)
                    run.check_model(model, name == "Carbon-3B", args.generation_only)
                    del model
                    gc.collect()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                if args.generation_only:
                    continue
                if name == "Carbon-3B" and budget.allows("known-answer AUROC", 30):
                    report["known_answer"] = known_answer_aurocs(
                        device, work / "known_answer", sizes.known_answer_steps
                    )
                    write_report(report, out, budget)
    write_report(report, out, budget)
    print((out / "gpu_check.md").read_text())
    return report
