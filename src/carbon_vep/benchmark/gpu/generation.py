"""Phase 6 of the GPU check: the generation tasks on vLLM against our engine (docs/gpu.md#vllm).

The Carbon-3B-shaped random model of the run (bf16; under --smoke a float32 Llama with Carbon-3B's
head dimension, 96, the smallest vLLM's CPU attention takes) is saved with its tokenizer, and a
Genomic-NIAH cell at each context (32k, 64k and 128k tokens, YaRN factor 4 past the native 32k;
--smoke: 512) is scored by `carbon-vep score-niah` once on each engine, each a whole job in its
own process: vLLM's from the vLLM environment (`--vllm-python`, default .venv-vllm/bin/python),
ours from this Python. Per context: both engines' start-up and scoring times (from the job's log)
and rows/s, vLLM's KV cache in tokens and the rows whose prompts fit in it together, the share
of the likelihood requests' prompt tokens read from the prefix cache, the agreement of the two
engines (identical predictions, flags, likelihood differences: bf16 kernels differ, so this is
measured, not assumed), and, on a GPU, the arithmetic's KV cache and rows/s (config/gpus.py:
vllm_niah_plan, on the GPU's own memory and measured peak) beside the measured ones.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import polars as pl
import torch

from carbon_vep.benchmark.gpu.device import Budget, device_class
from carbon_vep.benchmark.gpu.workload import (
    Model,
    haystack_fasta,
    random_model,
    save_checkpoint,
)
from carbon_vep.benchmark.harness import PROJECT_ROOT, job_env, run_command
from carbon_vep.benchmark.vllm import compare_niah, job_times, task_command
from carbon_vep.config.gpus import (
    CARBON_SHAPES,
    niah_row_seconds,
    vllm_niah_plan,
)
from carbon_vep.suite.niah_build import CellSpec, write_cell

CONTEXTS = (32_768, 65_536, 131_072)
ROWS = 8
SMOKE_CONTEXTS = (512,)
SMOKE_ROWS = 4
NATIVE_POSITIONS = 32_768  # Carbon-3B's; past it the published NIAH recipe turns YaRN on
# vLLM's CPU attention has no kernel for the toy shapes' head dimension (12)
SMOKE_SHAPE = dict(
    hidden_size=192,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=96,
)
START_S = {"cuda": 120.0, "cpu": 60.0}  # budget per vLLM start: load, KV cache, graph capture


def find_vllm_python(explicit: str | None) -> str | None:
    """The Python that runs the vLLM jobs: `explicit`, the vLLM environment, or this one."""
    if explicit:
        return None if explicit == "none" else explicit
    venv = PROJECT_ROOT / ".venv-vllm/bin/python"
    if venv.exists():
        return str(venv)
    return sys.executable if importlib.util.find_spec("vllm") else None


def score_command(
    python: str, engine: str, cell: Path, model: Path, out: Path, ctx: int, dtype: str, device: str
) -> list[str]:
    extra = ["--dtype", dtype, "--device", device]
    if ctx > NATIVE_POSITIONS:
        extra += [
            "--yarn-factor",
            "4",
            "--yarn-original-positions",
            str(NATIVE_POSITIONS),
            "--yarn-max-positions",
            str(4 * NATIVE_POSITIONS),
        ]
    launcher = [python, "-m", "carbon_vep.cli"]  # a GPU node's python may have no carbon-vep
    return task_command(launcher, engine, "niah", cell, model, out, *extra)


def _job_env(engine: str) -> dict[str, str]:
    # vLLM's environment has its own transformers: this process's path (a device kit's newer
    # one, say) must not shadow it
    return job_env(engine != "vllm", VLLM_CPU_OMP_THREADS_BIND="nobind")


def run_engine(
    python: str, engine: str, cell: Path, model: Path, work: Path, ctx: int, dtype: str, device: str
) -> tuple[dict, pl.DataFrame | None]:
    out = work / f"{engine}_{ctx}.parquet"
    argv = score_command(python, engine, cell, model, out, ctx, dtype, device)
    done = run_command(argv, env=_job_env(engine), check=False)
    result = {"wall_s": done.seconds, "peak_rss_mb": done.peak_rss_mb}
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        return result | {"error": lines[-1][:300] if lines else f"exit {done.returncode}"}, None
    times = job_times(out)
    result |= {k: times[k] for k in ("start_s", "score_s") if k in times}
    if times.get("score_s"):
        result["rows_per_s"] = times["rows"] / times["score_s"]
    parameters = json.loads(out.with_suffix(".json").read_text())["parameters"]
    result |= {k: parameters[k] for k in ("kv_cache_tokens", "prefix_cache") if k in parameters}
    return result, pl.read_parquet(out)


def generation(
    model: Model,
    work: Path,
    device: torch.device,
    smoke: bool,
    vllm_python: str | None,
    budget: Budget,
    peak_tflops: float,
) -> list[dict]:
    """Per context, the two engines side by side (see the module docstring)."""
    if vllm_python is None:
        budget.skipped.append("vLLM generation (no vLLM: make setup-vllm, or --vllm-python)")
        return []
    if smoke:  # the toy Carbon-3B's head dimension has no vLLM CPU kernel: a head-96 model
        model = random_model(
            "Carbon-3B",
            SMOKE_SHAPE,
            model.loaded.tokenizer,
            model.loaded.vocab,
            device,
            torch.float32,
        )
    contexts, rows = (SMOKE_CONTEXTS, SMOKE_ROWS) if smoke else (CONTEXTS, ROWS)
    checkpoint = save_checkpoint(model, work / "generation_model")
    fasta = haystack_fasta(work, max(contexts) * 8)
    dtype = "float32" if smoke else "bfloat16"
    gpu = device_class(device, peak_tflops)
    results = []
    for ctx in contexts:
        per_row = niah_row_seconds(CARBON_SHAPES["Carbon-3B"], ctx, gpu[1]) if gpu else 0.0
        needs = START_S[device.type] + 30 + 2 * rows * (0 if smoke else per_row)
        if not budget.allows(f"vLLM generation at {ctx:,} tokens", needs):
            break
        cell = work / f"niah_{ctx}.parquet"
        write_cell(CellSpec("neardup_d2", ctx, rows, seed=3), fasta, cell)
        row = {"model": model.name, "context_tokens": ctx, "rows": rows, "dtype": dtype}
        frames = {}
        for engine, python in (("transformers", sys.executable), ("vllm", vllm_python)):
            row[engine], frames[engine] = run_engine(
                python, engine, cell, checkpoint, work, ctx, dtype, device.type
            )
        if all(f is not None for f in frames.values()):
            row["agreement"] = compare_niah(frames["transformers"], frames["vllm"])
        if gpu:
            plan = vllm_niah_plan(CARBON_SHAPES["Carbon-3B"], ctx, gpu[1])
            row["arithmetic"] = {"gpu": gpu[0], **plan}
        results.append(row)
    return results
