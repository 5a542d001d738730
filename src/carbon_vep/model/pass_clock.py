"""The time a job's model body spends in its passes of more than one token a row (windows,
contexts, tiles, prefills; not decode steps), kept by the job record (model.job_record).

Why: a job's rate after the load also carries its work outside the passes (inputs, windows,
the output layer's normaliser, outputs); two ways of running the same passes (eager and
`compile_layers`, two batch budgets) compare fairly only on the passes' own time
(benchmark/gpu/reruns.py). On a GPU each pass is timed by CUDA events recorded before and after
it on the current stream: the device's span, with no host wait, so the jobs' pipelining is
untouched (the scan's host builds one batch's rows while the device runs the next); the events
are read as they complete and at the job's end. On a CPU, where a pass runs as it is called,
the host's clock. Passes inside a CUDA graph's capture are not timed (an event recorded there
would be captured). No torch is imported here: the clock starts from a model's hooks.
"""

from __future__ import annotations

import sys
import time
from typing import Any

FOLD_EVERY = 256  # events kept before the completed ones are read (memory bounded by a batch)


class PassClock:
    """Seconds and tokens of the timed passes (`start` before a pass, `stop` after it), from
    the model's load or the last `restart` (after the job's start-up probe, whose first passes
    pay the libraries' start, not a pass's work)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """Nothing timed so far (the passes before are not waited for: their events dropped)."""
        self.tokens = 0
        self._seconds = 0.0
        self._open: tuple[Any, int, Any] | None = None
        self._events: list[tuple[Any, Any, int]] = []

    def start(self, ids: Any) -> None:
        """Before a pass over `ids` (batch x length): timed unless it is one token a row."""
        self._open = None
        rows, length = int(ids.shape[0]), int(ids.shape[1])
        if length < 2:
            return
        if ids.device.type == "cuda":
            torch = _torch()
            if torch.cuda.is_current_stream_capturing():
                return
            stream = torch.cuda.current_stream(ids.device)  # the model's device, not device 0
            began = torch.cuda.Event(enable_timing=True)
            began.record(stream)
            self._open = (began, rows * length, stream)
        else:
            self._open = (time.perf_counter(), rows * length, None)

    def stop(self) -> None:
        """After the pass `start` opened (nothing if it timed none, or the pass raised)."""
        if self._open is None:
            return
        began, tokens, stream = self._open
        self._open = None
        if isinstance(began, float):
            self._seconds += time.perf_counter() - began
            self.tokens += tokens
            return
        ended = _torch().cuda.Event(enable_timing=True)
        ended.record(stream)
        self._events.append((began, ended, tokens))
        if len(self._events) >= FOLD_EVERY:
            self._fold(wait=False)

    def seconds(self) -> float:
        """All timed passes' seconds (on a GPU, waits for the last ones to finish; after a
        device error, whose job record is written while that error goes up, the passes read
        so far: the error stays the job's, not this wait's)."""
        try:
            self._fold(wait=True)
        except RuntimeError:
            self._events.clear()
        return self._seconds

    def _fold(self, wait: bool) -> None:
        """Add the finished passes' spans (every one, after a wait, when `wait`)."""
        while self._events:
            began, ended, tokens = self._events[0]
            if wait:
                ended.synchronize()
            elif not ended.query():
                return
            self._seconds += began.elapsed_time(ended) / 1000
            self.tokens += tokens
            self._events.pop(0)


def _torch() -> Any:
    """torch, loaded by the model whose passes are timed (never imported here)."""
    return sys.modules["torch"]
