"""The SLURM profiles submit what they say: the exact sbatch line of one score_shard job, checked
with a fake `sbatch` that records its arguments; GPUs only for models that run on CUDA; and the
GPU guard of a scoring job on a node without CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml
from support.cluster import (
    DEMO,
    ROOT,
    demo_config,
    run_snakemake,
    shard_scores,
    workflow_env,
)

from carbon_vep.config.fields import INTERFACE_VARIABLE

pytestmark = pytest.mark.workflow
MODEL_RULES = ("score_shard", "scan_chunk", "score_recovery", "score_perturbation", "score_niah")
# the generation tasks' GPU count comes from the rule (one, or tensor_parallel_size GPUs for a
# model on vLLM), and score_niah's time limit too (the model and the context)
GENERATION_RULES = ("score_recovery", "score_niah")

SITE = {
    "FILL_IN_ACCOUNT": "lab42",
    "FILL_IN_CPU_PARTITION": "short",
    "FILL_IN_GPU_PARTITION": "gpu",
}
FAKE_SBATCH = """#!/bin/sh
# a fake sbatch: record the arguments, one JSON list a line, and refuse the job
{python} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> {record}
echo "sbatch: error: fake sbatch (recorded)" >&2
exit 1
"""
# the plugin validates the account with sacctmgr; every other SLURM client is absent here
FAKE_SACCTMGR = "#!/bin/sh\necho lab42\n"
ABSENT = "#!/bin/sh\necho 'slurm_load_ctl_conf error: fake client' >&2\nexit 1\n"


def test_profiles_are_plain_plugin_profiles():
    """Both GPU profiles use the SLURM executor, leave site values marked, and carry the same
    keys apart from the GPU class; no `gres` next to `gpu` (the plugin would ask twice)."""
    a10, h100 = (
        yaml.safe_load((ROOT / f"profiles/{name}/config.yaml").read_text())
        for name in ("slurm-a10", "slurm-h100")
    )
    for profile in (a10, h100):
        assert profile["executor"] == "slurm" and profile["jobs"] > 0 and profile["retries"] >= 1
        assert profile["rerun-incomplete"] is True
        assert profile["default-resources"]["slurm_account"] == "FILL_IN_ACCOUNT"
        assert profile["set-resources"]["score_shard"]["slurm_partition"] == "FILL_IN_GPU_PARTITION"
        assert "gres" not in profile["set-resources"]["score_shard"]
    assert a10.keys() == h100.keys()
    for profile in (a10, h100):  # every rule that runs a model gets the same GPU job
        gpu_rules = profile["set-resources"]
        assert sorted(gpu_rules) == sorted(MODEL_RULES)
        shard_job = gpu_rules["score_shard"]
        assert all(
            gpu_rules[rule] == shard_job for rule in MODEL_RULES if rule not in GENERATION_RULES
        )
        # the generation rules: no `gpu` (the rule asks), no `runtime` (the rule derives it)
        generation_job = {k: v for k, v in shard_job.items() if k not in ("gpu", "runtime")}
        assert gpu_rules["score_recovery"] == generation_job
        assert gpu_rules["score_niah"] == generation_job
    assert a10["set-resources"]["score_shard"]["gpu_model"] == "a10"
    assert h100["set-resources"]["score_shard"]["gpu_model"] == "h100"
    for name in ("default", "slurm-a10", "slurm-h100", "slurm-local"):
        assert not (ROOT / f"profiles/{name}/profile.yaml").exists()  # never both files


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, demo_model_dir) -> Path:
    """A workdir whose shards and model record exist (the make_shards checkpoint and
    record_model_inputs ran locally), so a single score_shard job can be asked for."""
    workdir = tmp_path_factory.mktemp("profiles")
    config = demo_config(workdir, demo_model_dir)
    result = run_snakemake(workdir, config, "--until", "make_shards", "record_model_inputs")
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def _fake_slurm(bindir: Path, record: Path) -> None:
    bindir.mkdir()
    scripts = {"sbatch": FAKE_SBATCH.format(python=sys.executable, record=record)}
    scripts["sacctmgr"] = FAKE_SACCTMGR
    for name in ("sacct", "squeue", "scontrol", "sinfo", "sshare", "scancel"):
        scripts[name] = ABSENT
    for name, text in scripts.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)


def _site_profile(name: str, dest: Path) -> Path:
    """The shipped profile with the FILL_IN values a user would write."""
    text = (ROOT / f"profiles/{name}/config.yaml").read_text()
    for placeholder, value in SITE.items():
        text = text.replace(placeholder, value)
    dest.mkdir()
    (dest / "config.yaml").write_text(text)
    return dest


def _submit_one_shard(workdir: Path, model: Path, tmp: Path, device: str, *profile_args: str):
    """Ask for shard 0's scores through the profile; return the recorded sbatch argv lists."""
    record = tmp / "sbatch_calls.jsonl"
    _fake_slurm(tmp / "bin", record)
    config = demo_config(tmp, model, device=device)
    env = workflow_env()
    env["PATH"] = f"{tmp / 'bin'}:{env['PATH']}"
    result = run_snakemake(
        workdir,
        config,
        *profile_args,
        "--retries",
        "0",
        "--slurm-init-seconds-before-status-checks",
        "1",
        shard_scores(0),
        env=env,
    )
    calls = (
        [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    )
    return result, calls


def _host_memory_mb(model_dir: Path, dtype: str) -> int:
    """What the rule asks for this model (tested in tests/config: here, that it reaches sbatch)."""
    from carbon_vep.config.gpus import host_memory_mb
    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.estimate.costs import shape_of

    shape = shape_of(ModelSettings(path=str(model_dir))).dims
    assert shape is not None  # the built model's own config.json
    return host_memory_mb(shape, dtype)


def _flag(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


def _gpu_profile_line(argv: list[str]) -> dict:
    """The scheduling flags of one sbatch call (the rest are the plugin's bookkeeping)."""
    assert argv[0] == "--parsable" and argv[-1].startswith("--wrap=")
    return {
        "account": _flag(argv, "-A"),
        "partition": _flag(argv, "-p"),
        "time": _flag(argv, "-t"),
        "mem": _flag(argv, "--mem"),
        "gpus": [a for a in argv if a.startswith(("--gpus", "--gres"))],
        "cpus": [a for a in argv if a.startswith("--cpus-per")],
        "ntasks": [a for a in argv if a.startswith("--ntasks")],
    }


@pytest.mark.parametrize(
    "profile, gpus, time, cpus",
    [
        ("slurm-a10", "--gpus=a10:1", "240", "--cpus-per-gpu=4"),
        ("slurm-h100", "--gpus=h100:1", "120", "--cpus-per-gpu=8"),
    ],
)
def test_gpu_profile_sbatch_line(sharded, demo_model_dir, tmp_path, profile, gpus, time, cpus):
    """The profile's GPU, partition, account and time; host memory the rule's own arithmetic on
    the model's config.json (float32 here), which the profile leaves alone."""
    site = _site_profile(profile, tmp_path / "profile")
    result, calls = _submit_one_shard(
        sharded, demo_model_dir, tmp_path, "cuda", "--workflow-profile", str(site)
    )
    assert result.returncode != 0  # the fake sbatch refuses the job after recording it
    assert len(calls) == 1, result.stderr[-3000:]
    line = _gpu_profile_line(calls[0])
    assert line == {
        "account": "lab42",
        "partition": "gpu",
        "time": time,
        "mem": str(_host_memory_mb(demo_model_dir, "float32")),
        "gpus": [gpus],
        "cpus": [cpus],
        "ntasks": [],
    }
    wrapped = calls[0][-1]
    assert "--target-jobs 'score_shard:dataset=demo_centered,model=demo,shard=00000'" in wrapped
    assert "--attempt 1" in wrapped


def test_cpu_override_routes_the_gpu_rule_to_a_cpu_partition(sharded, demo_model_dir, tmp_path):
    """profiles/slurm-local layered over a GPU profile: no GPU, no account, the cpu partition."""
    profiles = ["--profile", str(ROOT / "profiles/slurm-a10")]
    profiles += ["--profile", str(ROOT / "profiles/slurm-local"), "--workflow-profile", "none"]
    result, calls = _submit_one_shard(sharded, demo_model_dir, tmp_path, "cpu", *profiles)
    assert len(calls) == 1, result.stderr[-3000:]
    argv = calls[0]
    assert _flag(argv, "-p") == "cpu" and _flag(argv, "-t") == "30"
    assert _flag(argv, "--mem") == "4000"
    assert "-A" not in argv and not [a for a in argv if a.startswith(("--gpus", "--gres"))]
    assert "--ntasks=1" in argv and "--cpus-per-task=1" in argv


def test_gpu_profile_refuses_a_cpu_model(sharded, demo_model_dir, tmp_path):
    """A GPU profile with a `device: cpu` model fails while parsing, before any submission."""
    site = _site_profile("slurm-h100", tmp_path / "profile")
    result, calls = _submit_one_shard(
        sharded, demo_model_dir, tmp_path, "cpu", "--workflow-profile", str(site)
    )
    assert result.returncode != 0 and calls == []
    assert "gives score_shard a GPU" in result.stderr and "device 'cpu'" in result.stderr


def test_a_profile_not_yet_filled_in_submits_nothing(sharded, demo_model_dir, tmp_path):
    """The shipped profile as it comes (FILL_IN_ partitions and account): refused while
    parsing, naming the values; it used to submit each job three times (the retries) for
    sbatch to refuse with "Invalid partition name specified". A dry run plans and says so."""
    profile = ["--workflow-profile", str(ROOT / "profiles/slurm-h100")]
    result, calls = _submit_one_shard(sharded, demo_model_dir, tmp_path, "cuda", *profile)
    assert result.returncode != 0 and calls == []
    unfilled = "the profile still holds 3 value(s) to fill in before a job can be submitted"
    assert unfilled in result.stderr
    assert "slurm_account: FILL_IN_ACCOUNT (default-resources)" in result.stderr
    config = demo_config(tmp_path, demo_model_dir, device="cuda")
    dry = run_snakemake(sharded, config, *profile, "-n", shard_scores(0))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert f"Note: {unfilled}" in dry.stderr and "rule score_shard:" in dry.stdout


def test_cpu_model_requests_no_gpu_and_cuda_model_one(sharded, demo_model_dir, tmp_path):
    """The rule's portable default: `gpu` follows the model's device (dry run, no profile)."""
    for device, gpus in (("cpu", "gpu=0"), ("cuda", "gpu=1")):
        config = demo_config(tmp_path, demo_model_dir, device=device)
        result = run_snakemake(sharded, config, "-n", shard_scores(1))
        assert result.returncode == 0, result.stderr[-2000:]
        resources = [ln for ln in result.stdout.splitlines() if "resources:" in ln]
        assert len(resources) == 1 and gpus in resources[0] and "batch_size=4" in resources[0]


def test_gpu_guard_names_the_shard(demo_model_dir, tmp_path):
    """device cuda on a machine without CUDA: the job stops before loading the model, with the
    shard and the node in the message (here no machine has a GPU; skip where one does)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the guard has nothing to refuse")
    shard = tmp_path / "shard_00007.parquet"
    pl.DataFrame({"chrom": ["chr17"]}).write_parquet(shard)
    cmd = [
        sys.executable,
        "-m",
        "carbon_vep.cli",
        "score-shard",
        "--shard",
        str(shard),
        "--reference",
        str(DEMO / "chr17.hg19.part.fa"),
        "--model",
        str(demo_model_dir),
        "--trust-remote-code",
        "--device",
        "cuda",
        "--recipe",
        "centered",
        "--out",
        str(tmp_path / "out.parquet"),
    ]
    fixes = {  # the way out, in the words of who ran it: the workflow's rule, or a user
        "workflow": "check that the profile gives it one (gpu, gpu_model, a GPU partition), or "
        "set the config key `device` (`device: cpu`) to score on CPU",
        "cli": "Run it where a GPU is visible, or with `--device cpu` to score on CPU",
    }
    for interface, fix in fixes.items():
        env = workflow_env(**{INTERFACE_VARIABLE: interface})
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2
        message = result.stderr.strip().splitlines()[-1]
        assert f"{shard}: device 'cuda' requested but no CUDA device is visible" in message
        assert "Traceback" not in result.stderr and not (tmp_path / "out.parquet").exists()
        assert fix in message, message


def test_the_documented_smoke_test_dry_runs_the_demo_under_the_profiles_config(tmp_path):
    """docs/cluster.md's smoke test gives no --configfile: the demo runs, the profiles'
    `config:` entries laid over it (they once made the config non-empty, so the demo was not
    read and the schema refused the profile's keys alone)."""
    profiles = ["--profile", "profiles/slurm-a10", "--profile", "profiles/slurm-local"]
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", *profiles, "--workflow-profile", "none"]
        + ["--directory", str(tmp_path), "--snakefile", str(ROOT / "Snakefile")],
        cwd=ROOT,
        env=workflow_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rule check_panel:" in result.stdout
    assert "wildcards: dataset=demo_centered" in result.stdout
    extended = "config/config.yaml is extended by additional config specified via the command line"
    assert extended in result.stdout + result.stderr
