"""carbon_vep.rss: a process's own peak, not the high-water mark of the process that spawned
it (the GPU check's host-memory figures read the check's own 8 GB before this)."""

import subprocess
import sys

import pytest

from carbon_vep.rss import peak_rss_bytes, status_kb

MB = 1024 * 1024
CHILD = """
import resource, sys
from carbon_vep.rss import peak_rss_bytes
held = bytearray(int(sys.argv[1]) * 1024 * 1024)
held[::4096] = b"x" * len(held[::4096])  # touch every page
print(peak_rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

linux_only = pytest.mark.skipif(status_kb("VmHWM") is None, reason="needs /proc/self/status")


def _child(allocate_mb: int) -> tuple[int, int]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(allocate_mb)], capture_output=True, text=True, check=True
    )
    peak, maxrss = map(int, done.stdout.split())
    return peak, maxrss


@linux_only
def test_a_child_of_a_large_process_reads_its_own_peak():
    parent = bytearray(600 * MB)
    parent[::4096] = b"x" * len(parent[::4096])
    try:
        peak, maxrss = _child(0)
    finally:
        del parent
    assert maxrss >= 600 * MB  # the hazard: ru_maxrss carries the parent's high-water mark
    assert peak < 300 * MB  # the interpreter and carbon_vep.rss, not the parent's 600 MB


@linux_only
def test_a_child_that_holds_memory_reads_it():
    peak, _ = _child(400)
    assert peak >= 400 * MB


def test_the_peak_is_at_least_what_this_process_holds_now():
    now = status_kb("VmRSS")
    assert peak_rss_bytes() >= (now or 1) * 1024
