"""Helpers shared by the tests that run the real Snakefile (workflow, ingest, profiles, resume,
real SLURM, Hub cache, invariance): a one-dataset demo config with short windows, config/ci.yaml
as the workflow tests run it, snakemake run from the repository root in a subprocess, awaited
at once or started in the background, and two runs built once a session."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from support.once import built_once

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources/demo"
DATASET = "demo_centered"
SHARD_DIR = f"results/{DATASET}/shards"
SCORES = f"results/{DATASET}/demo/scores.parquet"


def shard_scores(shard: int) -> str:
    return f"results/{DATASET}/demo/shard_scores/shard_{shard:05d}.parquet"


def absolute_demo_paths(node):
    """A shipped config's repository-relative demo files (resources/demo/...), made absolute, so
    a run in another directory finds them."""
    if isinstance(node, dict):
        return {key: absolute_demo_paths(value) for key, value in node.items()}
    if isinstance(node, list):
        return [absolute_demo_paths(value) for value in node]
    if isinstance(node, str) and node.startswith("resources/demo/"):
        return str(ROOT / node)
    return node


def ci_config(workdir: Path, model_dir: Path, panel: Path = DEMO / "demo_panel.vcf") -> Path:
    """config/ci.yaml (the demo with short windows, gated on baselines/demo.yaml), the model
    at `model_dir`, 28 variants a shard; with `panel` instead of the demo panel."""
    config = absolute_demo_paths(yaml.safe_load((ROOT / "config/ci.yaml").read_text()))
    # two shards a dataset (the metrics must not depend on it; each shard is a model job, and
    # a model job's start, torch and transformers imported, is most of its time here)
    config["shard_size"] = 28
    config["models"]["demo"]["path"] = str(model_dir)
    for ds in config["datasets"].values():
        if panel != DEMO / "demo_panel.vcf":
            ds.update(panel=str(panel))
        if panel.suffix != ".vcf":
            ds.update(format="auto", info_fields=[])
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def demo_config(workdir: Path, model: str | Path, **model_keys) -> Path:
    """The demo's centered dataset alone, 240 bp windows, 20 variants a shard (3 shards), scored
    by `model` (a prebuilt directory or a Hub id: never built by the workflow)."""
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["shard_size"] = 20
    config["models"] = {
        "demo": {
            "path": str(model),
            "trust_remote_code": True,
            "dtype": "float32",
            "device": "cpu",
            "batch_size": 4,
        }
    }
    config["models"]["demo"].update(model_keys)
    dataset = config["datasets"][DATASET]
    dataset.update(
        panel=str(DEMO / "demo_panel.vcf"),
        reference=str(DEMO / "chr17.hg19.part.fa"),
        window_bp=240,
        # the cheapest scoring (these tests are about where and when jobs run, not the recipe)
        normalization="dna_block",
        rc_average=False,
    )
    config["datasets"] = {DATASET: dataset}
    for optional in ("scans", "tasks", "niah"):
        if optional in config:
            config[optional] = {}
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def workflow_env(**extra: str) -> dict[str, str]:
    """This interpreter's bin first on PATH (so rules find `carbon-vep`), offline Hub."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.update(extra)
    return env


def snakemake_cmd(workdir: Path, config: Path, *extra: str) -> list[str]:
    # --configfile takes several values: it comes first, so a target after it stays a target
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--configfile",
        str(config),
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        *extra,
    ]


def run_snakemake(
    workdir: Path, config: Path, *extra: str, env: dict[str, str] | None = None, timeout=600
) -> subprocess.CompletedProcess:
    """snakemake from the repository root (so `profiles/...` resolve), output captured."""
    return subprocess.run(
        snakemake_cmd(workdir, config, *extra),
        cwd=ROOT,
        env=env or workflow_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class StartedRun:
    """A snakemake run started in the background (`start_snakemake`). A run through the SLURM
    plugin spends most of its time waiting on the plugin's polling (a job is seen 11-64 s after
    it ends: docs/testing.md); started early, those waits overlap the work of the tests that run
    meanwhile instead of leaving a core idle. Its output goes to files, not pipes, so a run
    nobody reads yet cannot block on a full pipe."""

    def __init__(self, argv: list[str], env: dict[str, str], logs: Path, timeout: float):
        logs.mkdir(parents=True, exist_ok=True)
        self.argv, self._deadline = argv, time.monotonic() + timeout
        self._stdout, self._stderr = logs / "stdout.txt", logs / "stderr.txt"
        with self._stdout.open("w") as out, self._stderr.open("w") as err:
            self._process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err)

    def result(self) -> subprocess.CompletedProcess:
        """Waits for the run (its timeout counts from the start) and returns what it printed."""
        try:
            code = self._process.wait(timeout=max(0.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        return subprocess.CompletedProcess(
            self.argv, code, self._stdout.read_text(), self._stderr.read_text()
        )

    def stop(self) -> None:
        """Interrupts a run still going (snakemake cancels its SLURM jobs on SIGINT)."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


def selected(request: pytest.FixtureRequest, test: Callable) -> bool:
    """Whether `test` (a test function of the requesting module) is in this session's
    selection: a run started in the background for it is not started for nothing."""
    return any(
        getattr(item, "module", None) is request.module and item.originalname == test.__name__
        for item in request.session.items
    )


def start_snakemake(
    workdir: Path, config: Path, *extra: str, env: dict[str, str] | None = None, timeout=600
) -> StartedRun:
    """`run_snakemake`, started now and awaited with `.result()`; its output lands in
    `workdir`'s sibling `<name>.out/`."""
    logs = workdir.with_name(f"{workdir.name}.out")
    return StartedRun(snakemake_cmd(workdir, config, *extra), env or workflow_env(), logs, timeout)


@pytest.fixture(scope="session")
def uninterrupted_run(tmp_path_factory, demo_model_dir) -> Path:
    """The demo config scored locally in one go: what every interrupted or clustered run of the
    same config must reproduce. Shared by every test through conftest.py: the run happens once a
    session, on whichever worker asks first (support/once.py). Tests copy it (`copy_run`)."""

    def score(workdir: Path) -> None:
        result = run_snakemake(workdir, demo_config(workdir, demo_model_dir), SCORES)
        assert result.returncode == 0, result.stderr[-3000:]

    return built_once(tmp_path_factory, "uninterrupted", score)


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory) -> Path:
    """config/ci.yaml (`ci_config`) run through the Snakefile with `--cores 2`, the demo model
    built by the workflow in the run's folder (resources/demo_model): read by
    tests/workflow/test_workflow.py, and the first of tests/workflow/test_invariance.py's two
    runs. Once a session (support/once.py); what snakemake printed is in `ci_run_log`. Tests
    that change a run copy it (`copy_run`)."""

    def score(workdir: Path) -> None:
        config = ci_config(workdir, workdir / "resources/demo_model")
        result = run_snakemake(workdir, config, "--cores", "2", timeout=900)
        ci_run_log(workdir).write_text(result.stdout + result.stderr)
        assert result.returncode == 0, result.stderr[-3000:]

    return built_once(tmp_path_factory, "ci_run", score)


def ci_run_log(run: Path) -> Path:
    """What snakemake printed for `ci_run` (beside its folder, outside the run)."""
    return run.with_name(f"{run.name}.log")


def copy_run(src: Path, dest: Path) -> Path:
    """A finished run's working directory, outputs and Snakemake metadata (mtimes kept), to
    carry on from without scoring its shards again."""
    shutil.copytree(src, dest, symlinks=True)
    return dest
