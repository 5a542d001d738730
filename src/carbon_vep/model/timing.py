"""Time on the device's own timeline, without making the host wait to read a clock.

On a GPU, kernels run after the host has queued them, so a host clock read between two launches
measures the launching, not the work. `DeviceClock.mark()` records a CUDA event in the stream
(no host synchronisation) on a GPU and reads the host clock on a CPU (where work is done when
the call returns); `seconds(a, b)` is the time between two marks once `wait(b)` has returned.
Where a host clock must time the work itself, `drained` waits for the device first.
"""

from __future__ import annotations

import time
from typing import Any

import torch


class DeviceClock:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def wait(self, mark: Any) -> None:
        """Block the host until the device has passed `mark`."""
        if self.cuda:
            mark.synchronize()

    def seconds(self, start: Any, end: Any) -> float:
        if self.cuda:
            return start.elapsed_time(end) / 1000.0
        return end - start


def drained(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for off CUDA): a host clock read after
    it times the work, not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
