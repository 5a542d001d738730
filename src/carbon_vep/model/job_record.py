"""What a model job did, as the job itself counts it: its wall time, the model's load, the tokens
through the model's body, the peak device and host memory. Every model command loads its model
through model.job, which starts the count; the CLI ends it (`job_record`), logging one line and,
where the environment names a folder (CARBON_VEP_JOB_RECORDS, as the GPU check and benchmarks
set it for the jobs Snakemake runs), writing the record there as JSON, one file a job. Where
CARBON_VEP_JOB_PROFILE names a folder, the job's work after the load runs under torch's
profiler (model.job_profile: its tables, the device's timeline, the trace) and lands there:
the GPU check's profiles are those of the product's own jobs. A command that loads no model
writes nothing. No torch is imported here before a model is.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from carbon_vep.atomic import write_json
from carbon_vep.model.job_profile import JobProfiler
from carbon_vep.model.pass_clock import PassClock
from carbon_vep.rss import peak_rss_bytes

log = logging.getLogger("carbon_vep")
RECORDS_ENV = "CARBON_VEP_JOB_RECORDS"
PROFILE_ENV = "CARBON_VEP_JOB_PROFILE"


@dataclass
class JobRecord:
    command: str
    out: str | None
    began: float = field(default_factory=time.perf_counter)
    load_s: float | None = None
    device: str | None = None
    dtype: str | None = None
    tokens: int = 0  # through the model's body (prompt, padding and generated tokens alike)
    # query-key pairs a layer's attention computes, causal: what attention FLOPs scale with
    attention_pairs: float = 0.0
    forward_calls: int = 0
    # seconds of named parts of the work (add_phase: the start-up probe, the compile of
    # compile_layers, Genomic-NIAH's prefill, generation and likelihood passes)
    phases: dict[str, float] = field(default_factory=dict)
    # tokens through the body within a phase, where its caller counts them (compile_layers:
    # the passes that compiled, left out with their seconds from a rate without the compile)
    phase_tokens: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the body's own time in its passes of more than one token a row (model.pass_clock),
        # from the load, or from the end of the start-up probe (`passes_timed_from_here`)
        self.passes = PassClock()

    def count(self, module: Any, args: tuple, kwargs: dict) -> None:
        """A forward pre-hook on the model's body: the size of what it is given and of the
        cache it attends to (host-side shapes, no device read); the pass's clock started."""
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        if ids is not None:
            batch, length = int(ids.shape[0]), int(ids.shape[1])
            past = _cached_tokens(kwargs.get("cache", kwargs.get("past_key_values")))
            self.tokens += batch * length
            self.attention_pairs += batch * length * (past + (length + 1) / 2)
            self.forward_calls += 1
            self.passes.start(ids)

    def counted(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        """A forward hook on the model's body: the pass's clock stopped."""
        self.passes.stop()

    def summary(self, succeeded: bool) -> dict[str, Any]:
        wall = time.perf_counter() - self.began
        after_load = wall - (self.load_s or 0.0)
        fields = {k: v for k, v in asdict(self).items() if k != "began"}
        fields["attention_pairs"] = round(self.attention_pairs)
        fields["pass_s"] = round(self.passes.seconds(), 4)
        fields["pass_tokens"] = self.passes.tokens
        return (
            fields
            | {
                "succeeded": succeeded,
                "wall_s": round(wall, 3),  # from the model's load on
                "after_load_s": round(after_load, 3),  # the job's work, what benchmarks time
                "process_s": _process_age_s(),  # from the process's start (imports too)
                "tokens_per_s": round(self.tokens / after_load, 1) if after_load > 0 else None,
                "host_peak_rss_bytes": peak_rss_bytes(),
                "host": socket.gethostname(),
                "pid": os.getpid(),
            }
            | _device_peaks(self.device)
        )


@dataclass
class _Command:
    """The CLI command being run, and the record of the model it loaded (if any)."""

    name: str | None = None
    out: str | None = None
    record: JobRecord | None = None


_RUNNING = _Command()


@contextmanager
def job_record(command: str, out: str | None) -> Iterator[None]:
    """Around a CLI command: a model it loads is counted from its load to the command's end;
    then one log line, and the JSON record where RECORDS_ENV names a folder."""
    _RUNNING.name, _RUNNING.out, _RUNNING.record = command, out, None
    succeeded = False
    try:
        yield
        succeeded = True
    finally:
        record, _RUNNING.record, _RUNNING.name = _RUNNING.record, None, None
        if record is not None:
            finish(record, succeeded)


def started_loading() -> JobRecord | None:
    """The record of the command being run, its clock started at the model's load (None
    outside a CLI command)."""
    if _RUNNING.name is None:
        return None
    _RUNNING.record = JobRecord(_RUNNING.name, _RUNNING.out)
    return _RUNNING.record


def passes_timed_from_here() -> None:
    """The running command's model passes are timed from here on (model.pass_clock): called
    after the start-up probe, whose first passes pay the libraries' start."""
    if _RUNNING.record is not None:
        _RUNNING.record.passes.restart()


def add_phase(name: str, seconds: float, tokens: int = 0) -> None:
    """Add `seconds` (and `tokens` through the body) to the phase `name` of the command's record
    (nothing outside a command or before its model loads)."""
    record = _RUNNING.record
    if record is not None:
        record.phases[name] = round(record.phases.get(name, 0.0) + seconds, 6)
        if tokens:
            record.phase_tokens[name] = record.phase_tokens.get(name, 0) + tokens


def tokens_counted() -> int:
    """Tokens through the model's body so far in the command's record (0 outside one)."""
    record = _RUNNING.record
    return record.tokens if record is not None else 0


def loaded(record: JobRecord | None, model: Any, device: Any, dtype: str) -> None:
    """The model is on its device: the load's time, and the body's tokens counted from here."""
    if record is None:
        return
    record.load_s = round(time.perf_counter() - record.began, 3)
    record.device, record.dtype = str(device), dtype
    body = model.get_decoder() if hasattr(model, "get_decoder") else model
    body.register_forward_pre_hook(record.count, with_kwargs=True)
    body.register_forward_hook(record.counted, with_kwargs=True)
    if record.device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(device)
    if os.environ.get(PROFILE_ENV):
        _PROFILER.start(record.device)


def finish(record: JobRecord, succeeded: bool) -> dict[str, Any]:
    """The job's line in its log, its JSON record where RECORDS_ENV names a folder, its
    profiler table where PROFILE_ENV does."""
    if os.environ.get(PROFILE_ENV):
        _PROFILER.stop(record.command, Path(os.environ[PROFILE_ENV]))
    summary = record.summary(succeeded)
    peak = summary.get("gpu_peak_reserved_bytes")
    log.info(
        "job %s%s: %s tokens through the model in %.1f s after a %.1f s load (%s tokens/s)%s, "
        "host peak %.2f GB",
        record.command,
        "" if succeeded else " (stopped by the error below)",
        f"{record.tokens:,}",
        summary["after_load_s"],
        record.load_s or 0.0,
        summary["tokens_per_s"],
        f", GPU peak {peak / 1e9:.2f} GB reserved" if peak is not None else "",
        summary["host_peak_rss_bytes"] / 1e9,
    )
    folder = os.environ.get(RECORDS_ENV)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        write_json(
            summary, Path(folder) / f"{record.command}-{socket.gethostname()}-{os.getpid()}.json"
        )
    return summary


_PROFILER = JobProfiler()


def _cached_tokens(cache: Any) -> int:
    """Tokens already in a dynamic KV cache (its layers' key lengths: a host-side shape); 0
    for none, or for a cache whose length would need a device read (a static cache)."""
    if cache is None or type(cache).__name__ != "DynamicCache":
        return 0
    return int(cache.get_seq_length())


def _process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc; None elsewhere)."""
    try:
        started = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round(uptime - started / os.sysconf("SC_CLK_TCK"), 2)


def _device_peaks(device: str | None) -> dict[str, int]:
    torch = sys.modules.get("torch")
    if torch is None or not device or not device.startswith("cuda"):
        return {}
    return {
        "gpu_peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
        "gpu_peak_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
    }
