"""How every benchmark measures, in one place.

- wall time of a stage inside this process (`timed`, the device drained around the clock), or of
  several approaches interleaved (`median_interleaved`: ours, reference, ours, ...);
- a whole process: a command (`run_command`) or one benchmark step run in a fresh Python
  (`run_step`), with its wall time, and its peak RSS and CPU seconds as the kernel counts them
  (`wait4`'s `ru_maxrss`, `ru_utime` + `ru_stime`: the process and the descendants it waited
  for), forked from a small launcher — a child forked from the large driver would start with
  the driver's high-water mark;
- peak RSS above the start of a call in this process (`peak_rss_above_start_mb`, Linux VmHWM
  reset through /proc/self/clear_refs), and the device's measured bf16 matmul peak (what a
  model's FLOP rate is compared with; the jobs record their own device memory);
- two approaches side by side (`Pair`: how many times faster, how many times less memory), and
  how far their variant scores agree (`score_agreement`);
- what a run writes: its JSON (`write_json`) and Markdown tables for docs/benchmarks.md
  (`markdown_section`; tables: carbon_vep.markdown).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep import atomic
from carbon_vep.rss import status_kb

# the project checkout: the benchmarks read its resources/ (demo genome, lambda phage)
PROJECT_ROOT = Path(__file__).resolve().parents[3]
RESULT_MARK = "BENCH_RESULT "  # the line of a step's stdout that carries its result
_STEP = """
import importlib, json, sys
module, function = sys.argv[1].split(":")
result = getattr(importlib.import_module(module), function)(*sys.argv[2:])
print({mark!r} + json.dumps(result if result is not None else {{}}), flush=True)
"""


# ---- whole processes ------------------------------------------------------------------------
@dataclass
class Measured:
    """A process as measured: wall seconds, peak RSS (MB), what its step returned, and its CPU
    seconds (user + system: on a shared machine, what a core of its own would take, near
    enough, where the wall time also counts the waits for a core)."""

    seconds: float
    peak_rss_mb: float
    result: dict = field(default_factory=dict)
    stdout: str = ""
    stderr: str = ""
    returncode: int = 0
    cpu_seconds: float = 0.0

    def as_dict(self) -> dict:
        measured = {"s": self.seconds, "peak_rss_mb": self.peak_rss_mb, "cpu_s": self.cpu_seconds}
        return measured | self.result


class StepFailed(RuntimeError):
    """A measured command exited non-zero (`returncode`; None: a step that printed no result);
    the message ends with its stderr."""

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


# A small launcher between the driver and the measured command: a child forked from a large
# process starts with that process's high-water mark in its ru_maxrss, so the command is forked
# from this ~10 MB Python instead and its own peak (KB) and CPU seconds are read from the
# launcher's wait4.
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}")
sys.exit(os.waitstatus_to_exitcode(status))
"""

# ACGT bases of GRCh38 (the scan scores no N): the genome-wide projections of the benchmarks
HG38_BASES = 2.9e9


def run_command(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    check: bool = True,
    timeout_s: float | None = None,
) -> Measured:
    """Run `argv` to the end: its wall time, and the peak RSS and CPU seconds of it and the
    descendants it waited for (the kernel's, taken by a small launcher, so any command can be
    measured).
    Past `timeout_s` the command and everything it started are stopped (`stop_group`) and it
    counts as exit 124, as coreutils' `timeout` has it (on a lent GPU a hung job would
    otherwise hold the device for the rest of the call)."""
    with tempfile.TemporaryDirectory() as tmp:
        usage_file = Path(tmp) / "usage"
        launcher = [sys.executable, "-c", _LAUNCHER, str(usage_file), *map(str, argv)]
        began = time.perf_counter()
        process = subprocess.Popen(
            launcher,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # one process group: stopped together on a timeout
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
            returncode = process.returncode
        except subprocess.TimeoutExpired:
            stop_group(process)
            stdout, stderr = process.communicate()
            stderr += f"\ntimed out after {timeout_s:.0f} s"
            returncode = TIMED_OUT
        seconds = time.perf_counter() - began
        peak_kb, cpu = usage_file.read_text().split() if usage_file.exists() else (0, 0.0)
    if check and returncode:
        command = " ".join(map(str, argv))[:200]
        raise StepFailed(f"{command} exited {returncode}:\n{stderr[-3000:]}", returncode)
    peak = int(peak_kb) / 1024
    return Measured(
        seconds, peak, stdout=stdout, stderr=stderr, returncode=returncode, cpu_seconds=float(cpu)
    )


TIMED_OUT = 124  # a command stopped at its time limit (coreutils' `timeout` code)


def stop_group(process: subprocess.Popen, grace_s: float = 20) -> None:
    """A process started with `start_new_session` and everything it started (one process
    group) stopped: SIGTERM (Snakemake, say, stops its jobs), then, after its exit or
    `grace_s`, SIGKILL for whatever of the group is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)


# the product's command line as this Python runs it (a lent GPU's Python may have no console
# script `carbon-vep`; the package runs from this checkout's src/, job_env)
CARBON_VEP = (sys.executable, "-m", "carbon_vep.cli")


def carbon_vep_job(*args: Any, **options: Any) -> Measured:
    """A `carbon-vep` command (`args`, as strings) in a fresh process, as a workflow job runs
    it; `options` as run_command's (env, check, timeout_s)."""
    return run_command([*CARBON_VEP, *map(str, args)], **options)


def job_env(inherit_path: bool = True, **extra: str) -> dict[str, str]:
    """The environment a `carbon-vep` job runs in here: offline (no job reaches the Hub), no
    tokenizer threads, the package of this checkout first on PYTHONPATH (a lent GPU's Python
    runs it from src/, uninstalled), then this process's PYTHONPATH unless `inherit_path` is
    False (a job of another environment, whose packages it must not shadow); `extra` on top."""
    paths = (str(PROJECT_ROOT / "src"), os.environ.get("PYTHONPATH") if inherit_path else None)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env | {"PYTHONPATH": os.pathsep.join(p for p in paths if p)} | extra


def run_step(
    step: str | Callable[..., Any],
    *args: Any,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> Measured:
    """A benchmark step (a module-level function, or "module:function") called with `args` (as
    strings) in a fresh Python; `result` is the dict it returns. The wall time includes the
    interpreter's start and the imports."""
    target = step if isinstance(step, str) else _importable_name(step)
    code = _STEP.format(mark=RESULT_MARK)
    measured = run_command([sys.executable, "-c", code, target, *map(str, args)], env, cwd)
    lines = [ln for ln in measured.stdout.splitlines() if ln.startswith(RESULT_MARK)]
    if not lines:
        raise StepFailed(f"{target} printed no result:\n{measured.stderr[-3000:]}")
    measured.result = json.loads(lines[-1][len(RESULT_MARK) :])
    return measured


def _importable_name(function: Callable[..., Any]) -> str:
    """ "module:function" of a function, its module's real name when run as `python -m`."""
    module = function.__module__
    if module == "__main__":
        module = sys.modules["__main__"].__spec__.name
    return f"{module}:{function.__name__}"


# ---- stages inside this process ---------------------------------------------------------------
def sync(device: Any) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)


def timed(run: Callable[[], Any], device: Any = None) -> tuple[float, Any]:
    """Wall seconds of `run` and its result, the device drained before and after the clock."""
    sync(device)
    began = time.perf_counter()
    out = run()
    sync(device)
    return time.perf_counter() - began, out


def median_interleaved(
    approaches: Mapping[str, Callable[[], Any]], reps: int, label: str = "", device: Any = None
) -> dict[str, float]:
    """Median seconds of each approach over `reps` rounds, interleaved (ours, reference, ours,
    reference, ...) so that a machine getting slower or faster favours none of them."""
    times: dict[str, list[float]] = {name: [] for name in approaches}
    for _ in range(reps):
        for name, run in approaches.items():
            times[name].append(timed(run, device)[0])
            print(f"  {label} / {name}: {times[name][-1]:.2f} s", file=sys.stderr)
    return {name: statistics.median(values) for name, values in times.items()}


def peak_rss_above_start_mb(run: Callable[[], Any]) -> float:
    """Peak RSS during `run` above the RSS at its start (VmHWM reset first). Call it in a fresh
    process: memory an earlier run freed but the allocator kept would be reused without raising
    RSS, and the peak would read too low."""
    Path("/proc/self/clear_refs").write_text("5")
    before = status_kb("VmRSS") or 0
    run()
    return ((status_kb("VmHWM") or 0) - before) / 1024


def bf16_peak_tflops(device: Any, n: int, iters: int) -> float:
    """Dense bf16 matmul throughput of this device: the median of 3 timed runs of `iters`
    n x n x n matmuls after a warm-up, the device drained around each clock read."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(max(3, iters // 5)):
        torch.matmul(a, b, out=out)
    rates = []
    for _ in range(3):
        seconds, _ = timed(lambda: [torch.matmul(a, b, out=out) for _ in range(iters)], device)
        rates.append(2 * n**3 * iters / seconds / 1e12)
    return statistics.median(rates)


# ---- side by side ------------------------------------------------------------------------------
@dataclass
class Pair:
    """Our approach and the reference one on the same inputs, with the two ratios."""

    what: str
    ours: Measured
    reference: Measured

    @property
    def speedup(self) -> float:
        """How many times faster ours is (reference seconds / our seconds)."""
        return self.reference.seconds / self.ours.seconds

    @property
    def memory_ratio(self) -> float:
        """How many times less peak memory ours needs (reference / ours)."""
        return self.reference.peak_rss_mb / max(self.ours.peak_rss_mb, 1.0)

    def as_dict(self) -> dict:
        return {
            "what": self.what,
            "ours": self.ours.as_dict(),
            "reference": self.reference.as_dict(),
            "speedup": self.speedup,
            "memory_ratio": self.memory_ratio,
        }


# ---- what a run writes ---------------------------------------------------------------------------
def write_json(path: str | Path | None, payload: Any, indent: int = 2) -> None:
    """The run's numbers as JSON (nothing when no path was asked for), replaced whole."""
    if path:
        write_text(path, json.dumps(payload, indent=indent, default=str) + "\n")


def write_text(path: str | Path, text: str) -> None:
    """`text` into `path` through a temporary file beside it: a reader never sees half of it."""
    atomic.write_text(text, path)


def markdown_section(title: str, *parts: str, level: int = 3) -> str:
    """A section for docs/benchmarks.md: a heading, then the parts as paragraphs/tables."""
    return "\n\n".join([f"{'#' * level} {title}", *[p.strip() for p in parts if p]]) + "\n"


VARIANT_COLUMNS = ["chrom", "pos", "ref", "alt"]


def score_agreement(ours: pl.DataFrame, official: pl.DataFrame) -> dict[str, Any]:
    """Our scored rows (a scores.parquet: `status`, `score`) against the official approach's
    answers (`score`), joined on the variant: how many, the Spearman of the scores and their
    largest difference."""
    scored = ours.filter(pl.col("status") == "scored").select(*VARIANT_COLUMNS, "score")
    both = scored.join(official.rename({"score": "official"}), on=VARIANT_COLUMNS)
    spearman = both.select(pl.corr("score", "official", method="spearman")).item()
    return {
        "variants": both.height,
        "spearman": None if spearman is None else float(spearman),
        "max_abs_difference": float((both["score"] - both["official"]).abs().max() or 0.0),
    }
