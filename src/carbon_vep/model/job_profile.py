"""A model job under torch's profiler (model.job_record's PROFILE_ENV), from its load to its
end: what the GPU check keeps of it once the lent machine is gone.

- the ten costliest operators (on a GPU by device time, then by the host's own time: a
  host-bound job's costs sit in the second: launches, plans, syncs);
- on a GPU, the device's timeline: the share of the profiled time some kernel ran, and the longest
  stretches with none running, each with the host operators that ran meanwhile (where the
  device waited for the host, and on what);
- the whole trace (Chrome's format, gzip), for reading later in Perfetto or chrome://tracing.

No torch is imported here before the profiler starts.
"""

from __future__ import annotations

import os
import socket
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Interval = tuple[float, float]  # start, end in microseconds
GAP_US = 1_000.0  # a stretch without kernels this long or longer is listed
GAPS_LISTED = 5


def device_timeline(
    kernels: Sequence[Interval],
    host: Sequence[tuple[str, float, float]],
    span: Interval,
    min_gap_us: float = GAP_US,
) -> dict[str, Any]:
    """The device's side of a profiled span: the share of it some kernel ran (their union),
    and the longest stretches of at least `min_gap_us` with none running (the span's start
    and end included), each with the host operators (`host`: name, start, end) that ran in
    it, by the time they overlapped it."""
    begin, end = span
    busy, gaps, cursor = 0.0, [], begin
    for start, stop in sorted((max(s, begin), min(e, end)) for s, e in kernels):
        if stop <= cursor:
            continue
        if start > cursor:
            gaps.append((cursor, start))
        busy += stop - max(start, cursor)
        cursor = stop
    if end > cursor:
        gaps.append((cursor, end))
    gaps = [g for g in gaps if g[1] - g[0] >= min_gap_us]
    idle = sum(stop - start for start, stop in gaps)
    listed = sorted(gaps, key=lambda g: g[0] - g[1])[:GAPS_LISTED]
    total = end - begin
    return {
        "span_s": round(total / 1e6, 4),
        "device_busy_share": round(busy / total, 4) if total > 0 else None,
        "idle_gaps": len(gaps),
        "idle_in_gaps_s": round(idle / 1e6, 4),
        "longest_gaps": [_gap(start, stop, host) for start, stop in listed],
    }


def _gap(start: float, stop: float, host: Sequence[tuple[str, float, float]]) -> dict[str, Any]:
    overlap: Counter[str] = Counter()
    for name, s, e in host:
        if s < stop and e > start:
            overlap[name] += min(e, stop) - max(s, start)
    return {
        "at_s": round(start / 1e6, 4),
        "ms": round((stop - start) / 1e3, 3),
        "host": [[name, round(us / 1e3, 3)] for name, us in overlap.most_common(3)],
    }


def timeline_text(timeline: dict[str, Any]) -> str:
    """The timeline as a few lines under the tables."""
    share = timeline["device_busy_share"]
    lines = [
        f"device timeline: {timeline['span_s']} s profiled, a kernel running "
        f"{'n/a' if share is None else f'{share:.1%}'} of it; {timeline['idle_gaps']} stretches "
        f"of >= {GAP_US / 1e3:g} ms without one, {timeline['idle_in_gaps_s']} s in all"
    ]
    for gap in timeline["longest_gaps"]:
        host = ", ".join(f"{name} {ms} ms" for name, ms in gap["host"]) or "no host operator"
        lines.append(f"  at {gap['at_s']} s: {gap['ms']} ms idle; host: {host}")
    return "\n".join(lines)


class JobProfiler:
    """torch's profiler around a job's work after its load."""

    def __init__(self) -> None:
        self.profiler: Any = None
        self.device = "cpu"

    def start(self, device: str) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if device.startswith("cuda"):
            activities.append(ProfilerActivity.CUDA)
        self.profiler, self.device = profile(activities=activities), device
        self.profiler.__enter__()

    def stop(self, command: str, folder: Path) -> None:
        """The tables, the timeline and the trace of `command` into `folder` (nothing when the
        profiler was not started)."""
        if self.profiler is None:
            return
        profiler, self.profiler = self.profiler, None
        cuda = self.device.startswith("cuda")
        if cuda:
            sys.modules["torch"].cuda.synchronize()
        profiler.__exit__(None, None, None)
        averages = profiler.key_averages()
        orders = ["device_time_total", "self_cpu_time_total"] if cuda else ["cpu_time_total"]
        parts = [
            f"sorted by {order}:\n"
            + averages.table(sort_by=order, row_limit=10, max_name_column_width=60)
            for order in orders
        ]
        if cuda:  # a CPU job has no device timeline
            parts.append(timeline_text(events_timeline(profiler.events())))
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"{command}-{socket.gethostname()}-{os.getpid()}"
        (folder / f"{stem}.txt").write_text("\n".join(parts) + "\n")
        # torch gzips a trace whose name ends in .gz
        profiler.export_chrome_trace(str(folder / f"{stem}.trace.json.gz"))


def events_timeline(events: Any, min_gap_us: float = GAP_US) -> dict[str, Any]:
    """device_timeline of a profiler's events: its kernels (device events) against its
    top-level host operators, over the span of all of them."""
    from torch.autograd import DeviceType

    kernels, host, edges = [], [], []
    for event in events:
        interval = (float(event.time_range.start), float(event.time_range.end))
        edges += interval
        if event.device_type == DeviceType.CUDA:
            kernels.append(interval)
        elif event.cpu_parent is None:
            host.append((event.name, *interval))
    span = (min(edges), max(edges)) if edges else (0.0, 0.0)
    return device_timeline(kernels, host, span, min_gap_us)
