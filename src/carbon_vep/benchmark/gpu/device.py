"""The GPU check's clock and its device: the time budget, the GPU at hand as the arithmetic sizes
it (the product's jobs count their own tokens and FLOPs: model.job_record)."""

from __future__ import annotations

import sys
import time

import torch

from carbon_vep.config.gpus import (
    GpuClass,
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

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def allows(self, step: str, needs_s: float) -> bool:
        left = self.left()
        if left >= needs_s:
            return True
        self.skipped.append(f"{step} (needs ~{needs_s:.0f} s, {left:.0f} s left)")
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
