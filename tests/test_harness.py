"""The benchmarks' harness: a whole process and a step in a fresh Python measured (no timing
asserted), and a time limit that stops the command and everything it started (on a lent GPU a
hung job would otherwise hold the device)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from carbon_vep.benchmark.harness import TIMED_OUT, StepFailed, run_command


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as stopped
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_command_past_its_limit_is_stopped_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    # a shell that starts a long child, records its pid, then waits: both must go
    script = f"sleep 120 & echo $! > {pid_file}; wait"
    began = time.perf_counter()
    done = run_command(["sh", "-c", script], check=False, timeout_s=1)
    assert time.perf_counter() - began < 30
    assert done.returncode == TIMED_OUT
    assert "timed out after 1 s" in done.stderr
    child = int(pid_file.read_text())
    deadline = time.time() + 5
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def test_a_command_within_its_limit_is_measured_as_before():
    done = run_command([sys.executable, "-c", "print('ok')"], timeout_s=60)
    assert (done.returncode, done.stdout.strip()) == (0, "ok")
    assert done.peak_rss_mb > 1


def test_a_command_is_measured_in_cpu_seconds_beside_its_wall_time():
    """CPU seconds are the command's own work, not its wall time: a sleep takes almost none, a
    busy loop of 0.3 CPU seconds at least that much."""
    asleep = run_command(["sleep", "0.5"])
    assert asleep.seconds >= 0.5 and asleep.cpu_seconds < 0.25
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    busy = run_command([sys.executable, "-c", spin])
    assert busy.cpu_seconds >= 0.3 and busy.as_dict()["cpu_s"] == busy.cpu_seconds


def test_a_timed_out_command_fails_the_check():
    with pytest.raises(StepFailed, match="exited 124") as failed:
        run_command(["sleep", "30"], timeout_s=0.5)
    assert failed.value.returncode == TIMED_OUT  # what a caller tells a timeout by


@pytest.mark.slow  # processes that allocate and a fresh Python's imports
def test_the_harness_measures_a_whole_process_and_a_fresh_python_step():
    """run_command: wall time, the child's peak RSS (a process that touches 200 MB shows it),
    the exit code; run_step: a module-level function in a fresh Python, its dict back; Pair:
    the ratios."""
    import os
    import sys
    from pathlib import Path

    from carbon_vep.benchmark.harness import Pair, StepFailed, run_command, run_step

    touch = "x = bytearray(200 * 2**20); x[::4096] = bytes(len(range(0, len(x), 4096)))"
    big = run_command([sys.executable, "-c", touch])
    small = run_command([sys.executable, "-c", "pass"])
    assert big.returncode == 0 and big.peak_rss_mb > small.peak_rss_mb + 150
    assert run_command([sys.executable, "-c", "raise SystemExit(3)"], check=False).returncode == 3
    with pytest.raises(StepFailed, match="exited 3"):
        run_command([sys.executable, "-c", "raise SystemExit(3)"])
    tests = str(Path(__file__).parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    step = run_step("support.bench_steps:allocate", 120, env=env)
    assert step.result == {"mb": 120} and step.peak_rss_mb > small.peak_rss_mb + 100
    assert step.as_dict()["mb"] == 120 and step.as_dict()["s"] == step.seconds
    pair = Pair("x", small, big)
    assert pair.speedup == big.seconds / small.seconds
    assert pair.memory_ratio == big.peak_rss_mb / small.peak_rss_mb
