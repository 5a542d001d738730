"""This process's resident set, as Linux counts it (/proc/self/status), for the records jobs and
benchmarks write. Only the standard library: stages that load no model read it too.

The peak is `VmHWM`, the high-water mark of the process's own memory map, which starts afresh
at exec. `getrusage`'s `ru_maxrss` does not: Linux carries the parent's high-water mark into
it across fork and exec (a child spawned by an 8 GB process reads at least 8 GB however little
it uses; measured on the H200 on 2026-11-28, where every reference job and the host-memory
step's fresh process read the GPU check's 8.09 GB). Elsewhere, `ru_maxrss` is all there is.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")


def status_kb(field_name: str) -> int | None:
    """A kB field of /proc/self/status (`VmRSS`, `VmHWM`); None where there is none."""
    try:
        lines = _STATUS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    return None


def peak_rss_bytes() -> int:
    """The peak resident set of this process since its exec (module docstring)."""
    peak_kb = status_kb("VmHWM")
    if peak_kb is not None:
        return peak_kb * 1024
    scale = 1 if sys.platform == "darwin" else 1024  # macOS counts bytes, Linux kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
