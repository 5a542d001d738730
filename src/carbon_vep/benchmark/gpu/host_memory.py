"""The GPU check's host-memory step: what a model job's process holds on the host while it
loads its model, against the `mem_mb` the model rules ask the scheduler for
(config.gpus.host_memory_mb: the weights once in the model's dtype, plus a reserve).

Per Carbon shape: a random-weight checkpoint in bf16 is written to disk (safetensors, with the
run's tokenizer), and a fresh Python process loads it the way every model job does
(`model.loading.load_model`: from_pretrained on the host, then `.to(device)`). That process
reports its peak resident set (carbon_vep.rss: its own `VmHWM`, not `ru_maxrss`, which carries
the GPU check's own peak into a child; the interpreter, torch, CUDA's host side, the mapped
file pages and the tensors built from them), its resident set once the model is on the device,
and the load's seconds.
"""

from __future__ import annotations

import gc
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from carbon_vep.benchmark.gpu.device import Budget
from carbon_vep.benchmark.gpu.workload import BF16, random_model
from carbon_vep.config.gpus import host_memory_mb, weight_bytes
from carbon_vep.rss import peak_rss_bytes, status_kb

SMOKE_MODELS = ("Carbon-500M",)


def host_memory(
    tokenizer, vocab, device: torch.device, shapes: dict, work: Path, budget: Budget, smoke: bool
) -> list[dict]:
    """One row per shape, smallest first, while the budget allows (module docstring)."""
    rows = []
    for name in SMOKE_MODELS if smoke else shapes:
        gb = weight_bytes(shapes[name], len(tokenizer)) / 1e9  # write ~1 GB/s, load, import
        if not budget.allows(f"host_memory: {name}", 20 + 3 * gb):
            break
        folder = work / f"checkpoint_{name}"
        try:
            checkpoint_gb = _write_checkpoint(name, shapes[name], tokenizer, vocab, device, folder)
            measured = _load_in_fresh_process(folder, device)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        row = {
            "model": name,
            "checkpoint_gb": checkpoint_gb,
            **measured,
            "mem_mb_asked": host_memory_mb(shapes[name], "bfloat16"),
        }
        rows.append(row)
        print(
            f"[gpu-check] host memory {name}: checkpoint {checkpoint_gb:.2f} GB, peak RSS "
            f"{row['peak_rss_gb']:.2f} GB, after the move {row['rss_after_gb']:.2f} GB, "
            f"asked {row['mem_mb_asked'] / 1000:.0f} GB",
            file=sys.stderr,
        )
    return rows


def _write_checkpoint(name, shape, tokenizer, vocab, device, folder: Path) -> float:
    """The random-weight model saved as a job would find it; its weights' size in GB."""
    model = random_model(name, shape, tokenizer, vocab, device, BF16)
    try:
        model.loaded.model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return sum(f.stat().st_size for f in folder.glob("*.safetensors")) / 1e9


def _load_in_fresh_process(folder: Path, device: torch.device) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", __name__, str(folder), str(device)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"loading {folder} in a fresh process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure_load(folder: str, device: str) -> dict:
    """In the fresh process: import, load as a job does, and the host memory it took."""
    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.model.loading import load_model

    started = time.monotonic()
    spec = ModelSettings(path=folder, dtype="bfloat16", device=device, trust_remote_code=True)
    loaded = load_model(spec)
    if loaded.device.type == "cuda":
        torch.cuda.synchronize(loaded.device)
    gc.collect()
    return {
        "load_s": time.monotonic() - started,
        "peak_rss_gb": peak_rss_bytes() / 1e9,
        "rss_after_gb": (status_kb("VmRSS") or 0) * 1024 / 1e9,
    }


if __name__ == "__main__":
    print(json.dumps(_measure_load(sys.argv[1], sys.argv[2])))
