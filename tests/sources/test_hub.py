"""Offline compute nodes: a Hub model is fetched into the local Hub cache by a head-node rule,
scoring jobs run with HF_HUB_OFFLINE=1 and fail fast, with the fix, when the cache lacks it.
No network: the Hub cache is laid out by hand from the demo model (the layout
huggingface_hub reads: models--ORG--NAME/refs/main and snapshots/COMMIT/)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import polars as pl
import pytest
from support.cluster import (
    DEMO,
    copy_run,
    demo_config,
    run_snakemake,
    shard_scores,
    workflow_env,
)
from support.hub import COMMIT, REPO_ID, fake_hub_cache

from carbon_vep.config.stages import ModelSettings
from carbon_vep.errors import InputError
from carbon_vep.sources.hub import (
    ModelNotCachedError,
    model_folder,
    remote_code_repos,
    require_cached,
)


def test_require_cached_finds_the_snapshot_or_says_how_to_fetch_it(demo_model_dir, tmp_path):
    snapshot = fake_hub_cache(tmp_path / "hf", demo_model_dir)
    cache = tmp_path / "hf/hub"
    assert require_cached(REPO_ID, COMMIT, cache) == snapshot
    assert require_cached(REPO_ID, None, cache) == snapshot  # main -> refs/main
    with pytest.raises(ModelNotCachedError) as err:
        require_cached(REPO_ID, "f" * 40, cache)  # a commit that was never fetched
    message = str(err.value)
    assert message.startswith(f"{REPO_ID}: revision {'f' * 40} is not in the Hugging Face cache")
    assert "fetch_model" in message and f"--revision {'f' * 40}" in message
    with pytest.raises(ModelNotCachedError, match="not in the Hugging Face cache"):
        require_cached("other-org/other-model", None, cache)


def test_a_mistyped_local_model_path_is_named_as_such(tmp_path, monkeypatch):
    """`models/carbon-3b` (a typo of models/carbon_3b/) is a valid Hub id: the error says both."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models/carbon_3b").mkdir(parents=True)
    cache = tmp_path / "hf/hub"
    with pytest.raises(ModelNotCachedError) as err:
        require_cached("models/carbon-3b", None, cache)
    assert "no local folder models/carbon-3b, though models/ exists" in str(err.value)
    with pytest.raises(ModelNotCachedError) as err:  # a real Hub id: no hint
        require_cached("other-org/other-model", None, cache)
    assert "local folder" not in str(err.value)


@pytest.mark.parametrize("path", ["my_finetune", "runs/ft/checkpoint-100"])
@pytest.mark.parametrize("offline", [True, False])
def test_a_model_path_that_is_no_folder_here_and_no_hub_id_is_refused(
    tmp_path, monkeypatch, path, offline
):
    """A folder named relative to another working directory is not looked for on the Hub (a
    download that cannot succeed, or minutes of retries without network): the error says where
    relative paths are read from."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", offline)
    with pytest.raises(InputError) as err:
        model_folder(ModelSettings(path))
    assert str(err.value) == (
        f"{path}: no such model folder (relative paths are read from {tmp_path}), and not a "
        "Hub id (ORG/NAME)"
    )


def test_remote_code_in_other_repositories_is_found(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"auto_map": {"AutoConfig": "code-org/dna-code--configuration_dna.DnaConfig"}})
    )
    tokenizer_map = {"AutoTokenizer": ["tokenization_hybrid_dna.HybridDNATokenizer", None]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"auto_map": tokenizer_map}))
    assert remote_code_repos(tmp_path, REPO_ID) == ["code-org/dna-code"]


def test_offline_job_without_the_model_fails_before_importing_torch(tmp_path):
    """A fake Hub id and an empty HF_HOME: exit 2 with the fix, before torch is even loaded."""
    shard = tmp_path / "shard_00000.parquet"
    pl.DataFrame({"chrom": ["chr17"]}).write_parquet(shard)
    probe = (
        "import sys; from carbon_vep import cli; rc = cli.main(sys.argv[1:]); "
        "print('torch imported:', 'torch' in sys.modules); sys.exit(rc)"
    )
    cmd = [
        sys.executable,
        "-c",
        probe,
        "score-shard",
        "--shard",
        str(shard),
        "--reference",
        str(DEMO / "chr17.hg19.part.fa"),
        "--model",
        "no-such-org/no-such-model",
        "--device",
        "cuda",
        "--recipe",
        "centered",
        "--out",
        str(tmp_path / "out.parquet"),
    ]
    env = workflow_env(HF_HOME=str(tmp_path / "empty_hf_home"))
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "torch imported: False" in result.stdout
    assert "no-such-org/no-such-model: revision main is not in the Hugging Face cache" in (
        result.stderr
    )
    assert str(tmp_path / "empty_hf_home") in result.stderr and "HF_HUB_OFFLINE=1" in result.stderr


def test_fetch_model_without_internet_or_cache_says_so(tmp_path):
    cmd = [sys.executable, "-m", "carbon_vep.cli", "fetch-model", "--model", REPO_ID]
    cmd += ["--out", str(tmp_path / "record.json")]
    env = workflow_env(HF_HOME=str(tmp_path / "empty_hf_home"))
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{REPO_ID}: could not be downloaded" in result.stderr
    assert not (tmp_path / "record.json").exists()


@pytest.mark.workflow
def test_hub_model_is_fetched_on_the_head_node_and_scored_offline(
    uninterrupted_run, demo_model_dir, tmp_path
):
    """The demo run's model as a Hub id: fetch_model (a local rule) records the cached snapshot,
    score_shard loads it offline by its id, with the local directory's scores; once the cache
    is gone, a scoring job fails at once, saying why."""
    hf_home = tmp_path / "hf"
    fake_hub_cache(hf_home, demo_model_dir)
    workdir = copy_run(uninterrupted_run, tmp_path / "wf")  # shards made, scored from the dir
    config = demo_config(workdir, REPO_ID, revision=COMMIT)
    env = workflow_env(HF_HOME=str(hf_home))
    result = run_snakemake(workdir, config, shard_scores(0), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert "localrule fetch_model:" in log and "rule score_shard:" in log
    record = json.loads((workdir / "results/hub/demo.json").read_text())
    assert record["model"] == REPO_ID and record["commit"] == COMMIT
    assert record["snapshot"].startswith(str(hf_home))
    # the commit actually used, and the snapshot's files hashed, for every result's provenance
    inputs = json.loads((workdir / "results/inputs/model_demo.json").read_text())
    assert inputs["model_commit"] == COMMIT
    weights = inputs["inputs_sha256"][f"{REPO_ID}/model.safetensors"]
    expected = hashlib.sha256((demo_model_dir / "model.safetensors").read_bytes())
    assert weights == expected.hexdigest()
    assert f"{REPO_ID}/tokenization_hybrid_dna.py" in inputs["inputs_sha256"]  # the remote code
    from_hub = pl.read_parquet(workdir / shard_scores(0))
    assert from_hub.equals(pl.read_parquet(uninterrupted_run / shard_scores(0)))

    shutil.rmtree(hf_home / "hub")  # the record stays; the cache is gone (cleaned, not shared)
    result = run_snakemake(workdir, config, shard_scores(1), env=env)
    assert result.returncode != 0
    log = (workdir / f"logs/results/demo_centered/demo/score_shard_{1:05d}.log").read_text()
    assert f"{REPO_ID}: revision {COMMIT} is not in the Hugging Face cache" in log
    assert not (workdir / shard_scores(1)).exists()
