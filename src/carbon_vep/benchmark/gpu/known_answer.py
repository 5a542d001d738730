"""The GPU check's known_answer step: the AUROC of a model whose right answer is known
(benchmark.known_answer: a tiny Llama trained on a genome with planted motifs) in float32, bf16
and bf16 with the output layer upcast, for the centered and nexttoken recipes. Only the training
is in this process (the model is made here, and saved to disk); each (precision, recipe) is
scored by the product's own jobs, `carbon-vep score` then `carbon-vep metrics`, each a process
of its own, and the AUROC is read from the metrics JSON they write. How far bf16 moves the
product's own answers is the `precision` rerun's (benchmark/gpu/reruns.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from carbon_vep.benchmark import known_answer
from carbon_vep.benchmark.harness import carbon_vep_job, job_env

PRECISIONS = {  # the report's name: (--dtype, the output layer upcast)
    "float32": ("float32", False),
    "bf16": ("bfloat16", False),
    "bf16 + upcast_output_layer": ("bfloat16", True),
}


def known_answer_aurocs(
    device: torch.device,
    work: Path,
    steps: int,
    time_limit_s: float | None = None,
    precisions: tuple[str, ...] = tuple(PRECISIONS),
) -> list[dict]:
    """Per precision (of PRECISIONS' names) and recipe: the AUROC and rows of the product's
    jobs on the trained motif model (an `error`, the job's last stderr line, and a NaN AUROC
    where a job failed), the jobs within `time_limit_s` of the call (one at the limit stopped,
    the rest not started)."""
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    work.mkdir(parents=True, exist_ok=True)
    world = known_answer.build_world(work, steps=steps, device=str(device))
    panel = known_answer.write_panel(world)
    env = job_env()
    rows = []
    for precision in precisions:
        dtype, upcast = PRECISIONS[precision]
        for recipe in ("centered", "nexttoken"):
            out = work / "jobs" / f"{recipe}_{dtype}{'_upcast' if upcast else ''}"
            score = ["score", "--model", world["model"], "--trust-remote-code"]
            score += ["--reference", world["fasta"], "--panel", panel, "--build", "synthetic"]
            score += ["--label-column", "label", "--recipe", recipe]
            score += ["--window-bp", known_answer.WINDOW_BP[recipe], "--dtype", dtype]
            score += ["--device", device, f"--{'' if upcast else 'no-'}upcast-output-layer"]
            score += ["--out", out / "scores.parquet"]
            metrics = ["metrics", "--merged", out / "scores.parquet"]
            metrics += ["--label-column", "label", "--bootstrap", "0", "--task", "known_answer"]
            metrics += ["--model-key", precision, "--out", out / "metrics.json"]
            row = {"recipe": recipe, "precision": precision}
            rows.append(row | _jobs([score, metrics], env, out / "metrics.json", deadline))
    return rows


def _jobs(argvs: list[list], env: dict[str, str], metrics: Path, deadline: float | None) -> dict:
    """The `carbon-vep` jobs (their arguments) run in turn, the first to fail stopping them:
    the AUROC and rows the metrics job wrote, and the score job's wall time and peak RSS."""
    runs = []
    for argv in argvs:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return {"auroc": float("nan"), "n": 0, "error": "not run: the time limit was reached"}
        done = carbon_vep_job(*argv, env=env, check=False, timeout_s=left)
        if done.returncode:
            lines = done.stderr.strip().splitlines()
            error = lines[-1][:300] if lines else f"exit {done.returncode}"
            return {"auroc": float("nan"), "n": 0, "error": error}
        runs.append(done)
    result = json.loads(metrics.read_text())
    return {
        "auroc": result["metrics"]["auroc"],
        "n": result["n_rows"],
        "wall_s": round(runs[0].seconds, 2),
        "peak_rss_mb": round(runs[0].peak_rss_mb, 1),
    }
