"""The single-node SLURM of scripts/start_local_slurm.sh, as the real-SLURM tests use it: why
it cannot be used here (or None), the profiles that send every job to its CPU partition, and the
jobs a run submitted."""

from __future__ import annotations

import re
import shutil
import subprocess

from support.cluster import ROOT

START = "scripts/start_local_slurm.sh"


# what an installed SLURM without an answering controller also costs the other workflow tests
NO_CONTROLLER_COST = (
    "until one answers, each snakemake the tests start also waits ~9 s: the SLURM plugin, "
    "imported with snakemake, asks `scontrol show config` (docs/testing.md)"
)


def slurm_unavailable() -> str | None:
    """Why the real-SLURM tests cannot run here, or None."""
    missing = [cmd for cmd in ("sbatch", "squeue", "sinfo", "slurmctld") if not shutil.which(cmd)]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing); as root, run {START}"
    try:
        result = subprocess.run(
            ["sinfo", "--noheader", "--format=%R %T"], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        return f"sinfo timed out: no SLURM controller answers; run {START}; {NO_CONTROLLER_COST}"
    states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
    if result.returncode != 0 or not {"cpu", "gpu"} <= states.keys():
        problem = result.stderr.strip() or f"partitions: {sorted(states)}"
        reason = f"no local SLURM cluster with partitions cpu and gpu ({problem}); run {START}"
        return f"{reason}; {NO_CONTROLLER_COST}" if result.returncode != 0 else reason
    if not all(state.rstrip("*") in ("idle", "mixed", "allocated") for state in states.values()):
        return f"the local SLURM node is not up ({states}); run {START}"
    return None


REASON = slurm_unavailable()

THROUGH_CPU_PARTITION = [
    "--profile",
    str(ROOT / "profiles/slurm-a10"),
    "--profile",
    str(ROOT / "profiles/slurm-local"),
    "--workflow-profile",
    "none",
]


def slurm_jobs(output: str) -> list[tuple[str, str, str]]:
    """(job id, partition, state) of every SLURM job of the run, from squeue by the run's ID
    (MinJobAge keeps finished jobs listed)."""
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    result = subprocess.run(
        ["squeue", "--states=all", "--noheader", "--name", run_id, "--format=%i %P %T"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return [tuple(line.split()) for line in result.stdout.splitlines()]
