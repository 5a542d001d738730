"""Proof on a real SLURM: the workflow runs through snakemake-executor-plugin-slurm on the
single-node cluster of scripts/start_local_slurm.sh (.ci/run starts it) and gives the local
run's Parquet; a GPU job lands on the GPU partition and its guard stops it at once, as there is
no CUDA device behind the GRES. Skipped where no SLURM controller answers."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import polars as pl
import pytest
import yaml
from support.cluster import (
    ROOT,
    SCORES,
    copy_run,
    demo_config,
    selected,
    shard_scores,
    start_snakemake,
)
from support.slurm import REASON, START, THROUGH_CPU_PARTITION, slurm_jobs

pytestmark = [pytest.mark.workflow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


def _gpu_site_profile(folder: Path) -> Path:
    """profiles/slurm-local with score_shard given the H100 profile's GPU request on the gpu
    partition (a layer over slurm-h100, as a site would write it)."""
    site = yaml.safe_load((ROOT / "profiles/slurm-local/config.yaml").read_text())
    gpu_rule = yaml.safe_load((ROOT / "profiles/slurm-h100/config.yaml").read_text())
    gpu_rule = gpu_rule["set-resources"]["score_shard"]
    site["set-resources"]["score_shard"] = {
        **gpu_rule,
        "slurm_partition": "gpu",
        "cpus_per_gpu": 1,
        "mem_mb": 2000,
        "runtime": 10,
    }
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(site))
    return folder


@pytest.fixture(scope="module")
def slurm_runs(request, uninterrupted_run, demo_model_dir, tmp_path_factory):
    """The runs of this file's selected tests started at once, each on its own copy of the local
    run: they wait on the scheduler's polling side by side instead of one after the other."""
    root = tmp_path_factory.mktemp("slurm")
    runs = {}
    if selected(request, test_workflow_through_slurm_equals_local_run):
        cpu = copy_run(uninterrupted_run, root / "cpu")
        (cpu / shard_scores(1)).unlink()
        (cpu / SCORES).unlink()
        config = demo_config(cpu, demo_model_dir)
        args = (*THROUGH_CPU_PARTITION, SCORES)
        runs["cpu"] = start_snakemake(cpu, config, *args, timeout=900), cpu
    if selected(request, test_gpu_job_without_cuda_fails_at_once_on_the_gpu_partition):
        gpu = copy_run(uninterrupted_run, root / "gpu")
        (gpu / shard_scores(0)).unlink()
        config = demo_config(gpu, demo_model_dir, device="cuda")
        profiles = ["--profile", str(ROOT / "profiles/slurm-h100")]
        profiles += ["--profile", str(_gpu_site_profile(root / "site"))]
        args = (*profiles, "--workflow-profile", "none", "--retries", "0", shard_scores(0))
        runs["gpu"] = start_snakemake(gpu, config, *args, timeout=600), gpu
    yield runs
    for run, _ in runs.values():
        run.stop()


def test_workflow_through_slurm_equals_local_run(uninterrupted_run, slurm_runs):
    """The local run with one shard's scores and the merged Parquet gone: the model job
    (score_shard, routed to the cpu partition by profiles/slurm-local) and the merge are sbatch
    jobs, and the merged Parquet equals the local run's, frame for frame. (The smallest run that
    crosses the scheduler with both kinds of job: the other stages are the same rules.)"""
    run, workdir = slurm_runs["cpu"]
    result = run.result()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", output)
    assert len(submitted) == 2  # score_shard of shard 1, merge_scores
    assert "rule score_shard" in output and "rule merge_scores" in output
    jobs = slurm_jobs(output)
    assert sorted(job[0] for job in jobs) == sorted(submitted)
    assert {(partition, state) for _, partition, state in jobs} == {("cpu", "COMPLETED")}
    for path in (shard_scores(1), SCORES):
        assert pl.read_parquet(workdir / path).equals(pl.read_parquet(uninterrupted_run / path))


def test_gpu_job_without_cuda_fails_at_once_on_the_gpu_partition(slurm_runs):
    """The H100 profile's GPU request (--gpus=h100:1, gpu partition) is accepted and scheduled by
    a real slurmctld; on this node without CUDA the job's guard stops it with a message naming
    the shard, the node and the SLURM job."""
    run, workdir = slurm_runs["gpu"]
    result = run.result()
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-4000:]
    [(job_id, partition, state)] = slurm_jobs(output)
    assert partition == "gpu" and state == "FAILED"
    log = (workdir / "logs/results/demo_centered/demo/score_shard_00000.log").read_text()
    assert (
        "results/demo_centered/shards/shard_00000.parquet: device 'cuda' requested but no CUDA "
        "device is visible on node"
    ) in log
    assert f"(SLURM job {job_id})" in log and "Traceback" not in log
    assert not (workdir / shard_scores(0)).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason=f"{START} needs root")
def test_start_script_is_idempotent():
    """Running the start script on a cluster that is up restarts nothing and reports it ready."""
    pids = [Path(f"/run/{daemon}.pid") for daemon in ("slurmctld", "slurmd")]
    before = [p.read_text() for p in pids if p.exists()]
    result = subprocess.run(
        ["bash", str(ROOT / START)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "local SLURM ready" in result.stdout
    assert [p.read_text() for p in pids if p.exists()] == before
    assert Path("/etc/slurm/slurm.conf").read_text().count("PartitionName=") == 2
