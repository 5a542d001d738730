"""Clocks and counters of the GPU check: the time budget, tokens and attention FLOPs through a
model's body, host synchronisations, the bf16 matmul peak, torch-profiler tables."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from carbon_vep.benchmark.harness import sync
from carbon_vep.benchmark.host_reads import HostReads
from carbon_vep.config.gpus import (
    GpuClass,
    attention_flops,
    device_gpu_class,
    gpu_class_named,
)


class Budget:
    """The run's time budget from `start` (the process's start under `make gpu-check`: the
    imports and CUDA's start-up count too)."""

    def __init__(self, seconds: float, start: float) -> None:
        self.seconds, self.start = seconds, start
        self.skipped: list[str] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def allows(self, step: str, needs_s: float) -> bool:
        if self.seconds - self.elapsed() >= needs_s:
            return True
        self.skipped.append(
            f"{step} (needs ~{needs_s:.0f} s, {self.seconds - self.elapsed():.0f} s left)"
        )
        print(f"[gpu-check] skipped, time budget: {step}", file=sys.stderr)
        return False


def device_class(device: torch.device, peak_tflops: float) -> tuple[str, GpuClass] | None:
    """The GPU at hand as the arithmetic sizes it: its label (the GPU_CLASSES class its name
    names, else its own name), its memory as CUDA reports it and the bf16 peak measured in this
    run (config.gpus.device_gpu_class: an unknown GPU is sized, not refused or guessed); None
    on a CPU."""
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    label = gpu_class_named(props.name) or props.name
    return label, device_gpu_class(props.total_memory, peak_tflops)


class BodyCounter:
    """Tokens through the model's body and the attention FLOPs they cost (a forward pre-hook:
    engine and `generate` both call the decoder)."""

    def __init__(self, body: torch.nn.Module, shape: dict[str, int]) -> None:
        self.tokens, self.attention_flops = 0, 0.0
        self.per_pair = attention_flops(shape)
        body.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids")
        if ids is None:
            return
        batch, length = ids.shape
        cache = kwargs.get("cache")
        past = cache.get_seq_length() if cache is not None else 0
        self.tokens += batch * length
        self.attention_flops += self.per_pair * batch * length * (past + (length + 1) / 2)

    def reset(self) -> tuple[int, float]:
        out = (self.tokens, self.attention_flops)
        self.tokens, self.attention_flops = 0, 0.0
        return out


def host_syncs(run: Callable[[], Any], device: torch.device) -> tuple[int, str]:
    """Host synchronisations during `run`: CUDA's sync debug mode on a GPU; on a CPU (nothing
    waits there), the operations that would wait (benchmark/host_reads.py)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught), "CUDA sync debug mode"
    with HostReads() as reads:
        run()
    return reads.total, "host reads counted on CPU"


def profile_table(run: Callable[[], Any], device: torch.device) -> str:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        run()
        sync(device)
    key = "device_time_total" if device.type == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=10, max_name_column_width=60)
