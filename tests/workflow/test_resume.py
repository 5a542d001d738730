"""What clusters do to jobs: a scoring job killed mid-shard is redone alone on the next run and
the final Parquet equals an uninterrupted run's; a job that runs out of memory is retried with
half the batch size. A `carbon-vep` shim first on PATH pauses or fails one shard's job and runs
the real command for everything else."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from support.cluster import (
    SCORES,
    copy_run,
    run_snakemake,
    shard_scores,
    snakemake_cmd,
    workflow_env,
)

pytestmark = pytest.mark.workflow

KILLED = 1  # of shards 0, 1, 2

SHIM = '''#!{python}
"""carbon-vep, except for score-shard of the shard named in $SHIM_SHARD (see SHIM_MODE)."""
import json, os, sys, time
from pathlib import Path

from carbon_vep import atomic, cli

argv = sys.argv[1:]
shard = os.environ["SHIM_SHARD"]
if argv[:1] == ["score-shard"] and any(arg.endswith(shard) for arg in argv):
    record = Path(os.environ["SHIM_RECORD"])
    batch_size = int(argv[argv.index("--batch-size") + 1])
    batch_tokens = int(argv[argv.index("--batch-tokens") + 1])
    if os.environ["SHIM_MODE"] == "oom":  # out of memory unless the batch is down to 1
        with record.open("a") as out:
            out.write(json.dumps([batch_size, batch_tokens]) + "\\n")
        if batch_size > 1:
            sys.exit("torch.OutOfMemoryError: CUDA out of memory (simulated)")
    else:  # "pause": the output is written under its temporary name; wait to be killed

        class PausingOs:
            def __getattr__(self, name):
                return getattr(os, name)

            def replace(self, src, dst):
                record.write_text(json.dumps({{"pid": os.getpid(), "tmp": str(src)}}))
                time.sleep(600)

        atomic.os = PausingOs()
sys.exit(cli.main(argv))
'''


def _shim_env(tmp: Path, mode: str, shard: int) -> tuple[dict[str, str], Path]:
    bindir = tmp / "shim"
    bindir.mkdir()
    (bindir / "carbon-vep").write_text(SHIM.format(python=sys.executable))
    (bindir / "carbon-vep").chmod(0o755)
    record = tmp / f"shim_{mode}.json"
    env = workflow_env(
        SHIM_SHARD=f"shard_{shard:05d}.parquet", SHIM_MODE=mode, SHIM_RECORD=str(record)
    )
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return env, record


def _wait_for(condition, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_killed_scoring_job_is_redone_alone(uninterrupted_run, tmp_path):
    """A run whose shard-1 job is SIGKILLed after writing its output under the temporary name
    (the other shards were done): the rerun plans and runs that shard alone, keeps the others,
    and ends with the uninterrupted run's Parquet."""
    workdir = copy_run(uninterrupted_run, tmp_path / "wf")
    config = workdir / "config.yaml"
    (workdir / shard_scores(KILLED)).unlink()
    (workdir / SCORES).unlink()
    others = sorted(set((workdir / shard_scores(0)).parent.glob("shard_*.parquet")))
    assert len(others) >= 2
    env, record = _shim_env(tmp_path, "pause", KILLED)
    run = subprocess.Popen(
        snakemake_cmd(workdir, config, SCORES),
        cwd=workdir,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for(record.exists, "the shard's job to pause before its rename")
        paused = json.loads(record.read_text())
        assert (workdir / paused["tmp"]).stat().st_size > 0  # relative to the workdir
        os.kill(paused["pid"], signal.SIGKILL)
        output, _ = run.communicate(timeout=120)
    finally:  # whatever happened, leave no process of this run behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, FileNotFoundError, ValueError):
            os.kill(json.loads(record.read_text())["pid"], signal.SIGKILL)
    assert run.returncode != 0, output[-3000:]
    assert not (workdir / shard_scores(KILLED)).exists()  # never half-written under its name
    assert not (workdir / SCORES).exists()

    plan = run_snakemake(workdir, config, "-n", SCORES)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert _job_counts(plan.stdout) == {"merge_scores": 1, "score_shard": 1, "total": 2}
    assert f"shard={KILLED:05d}" in plan.stdout

    before = {p: p.stat().st_mtime_ns for p in others}
    rerun = run_snakemake(workdir, config, SCORES)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in others} == before  # the other shards kept
    final = pl.read_parquet(workdir / SCORES)
    assert final.equals(pl.read_parquet(uninterrupted_run / SCORES))
    assert final.height == 56 and final["status"].null_count() == 0


def test_out_of_memory_retries_halve_the_batch(uninterrupted_run, tmp_path):
    """batch_size and batch_tokens are resources scaled by the attempt: 4, then 2, then 1
    (config: 4), and the top-level batch_tokens 3000, then 1500, then 750 (as a profile sets
    it with `config: ["batch_tokens=3000"]`)."""
    workdir = copy_run(uninterrupted_run, tmp_path / "wf")
    (workdir / shard_scores(1)).unlink()
    env, record = _shim_env(tmp_path, "oom", 1)
    config = workdir / "config.yaml"
    result = run_snakemake(
        workdir, config, "--retries", "2", shard_scores(1), "--config", "batch_tokens=3000", env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    attempts = [json.loads(line) for line in record.read_text().splitlines()]
    assert attempts == [[4, 3000], [2, 1500], [1, 750]]
    scored = pl.read_parquet(workdir / shard_scores(1))
    assert scored.equals(pl.read_parquet(uninterrupted_run / shard_scores(1)))


def _job_counts(dry_run_stdout: str) -> dict[str, int]:
    """The `Job stats` table of a dry run."""
    lines = dry_run_stdout.split("Job stats:", 1)[1].splitlines()[3:]
    counts = {}
    for line in lines:
        if not line.strip():
            break
        name, count = line.split()
        counts[name] = int(count)
    return counts
