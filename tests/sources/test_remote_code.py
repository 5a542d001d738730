"""Remote code only when asked for: trust_remote_code is off by default, a model that needs
remote code stops naming the file and the key to set, and a Hub model's remote code needs a
pinned commit (or allow_unpinned). Models are the demo model laid out locally or as a Hub cache
snapshot (tests/sources/test_hub.py's layout); nothing here downloads or loads torch."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest
from support.cluster import DEMO, demo_config, run_snakemake, workflow_env
from support.hub import COMMIT, REPO_ID, fake_hub_cache

from carbon_vep.config.fields import ConfigError
from carbon_vep.config.run import RunConfig
from carbon_vep.config.stages import ModelSettings
from carbon_vep.sources.hub import (
    RemoteCodeError,
    check_remote_code,
    model_folder,
    remote_code_files,
)


def test_trust_remote_code_is_off_by_default():
    assert ModelSettings("some/model").trust_remote_code is False
    assert ModelSettings("some/model").allow_unpinned is False


def test_local_model_with_remote_code_stops_naming_the_file_and_the_key(demo_model_dir):
    assert remote_code_files(demo_model_dir) == {
        "tokenizer_config.json": ["tokenization_hybrid_dna.HybridDNATokenizer"]
    }
    with pytest.raises(RemoteCodeError) as err:
        check_remote_code(ModelSettings(str(demo_model_dir)), demo_model_dir, from_hub=False)
    message = str(err.value)
    assert message.startswith(f"{demo_model_dir / 'tokenizer_config.json'}: ")
    assert "tokenization_hybrid_dna.HybridDNATokenizer" in message
    assert message.endswith("ask for it with `--trust-remote-code`")  # the CLI's spelling
    # asked for: a local directory needs no pin
    check_remote_code(
        ModelSettings(str(demo_model_dir), trust_remote_code=True), demo_model_dir, False
    )


def test_model_without_remote_code_needs_no_permission(demo_model_dir, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    check_remote_code(ModelSettings(str(plain)), plain, from_hub=False)


def test_cli_job_stops_before_loading_the_model(demo_model_dir, tmp_path):
    """score-shard without --trust-remote-code: exit 2, one line naming the file and the flag,
    before torch is imported (no traceback, no output)."""
    shard = tmp_path / "shard_00000.parquet"
    pl.DataFrame({"chrom": ["chr17"]}).write_parquet(shard)
    code = (
        "import sys; from carbon_vep.cli import main; rc = main(sys.argv[1:]);"
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    cmd = [
        sys.executable,
        "-c",
        code,
        "score-shard",
        "--shard",
        str(shard),
        "--reference",
        str(DEMO / "chr17.hg19.part.fa"),
        "--model",
        str(demo_model_dir),
        "--recipe",
        "centered",
        "--out",
        str(tmp_path / "out.parquet"),
    ]
    result = subprocess.run(cmd, env=workflow_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    message = result.stderr.strip().splitlines()[-1]
    assert "tokenizer_config.json: " in message and "`--trust-remote-code`" in message
    assert "Traceback" not in result.stderr and not (tmp_path / "out.parquet").exists()


def _hub_model(**keys) -> dict:
    return {"models": {"m": {"path": REPO_ID, "device": "cpu", **keys}}}


def _run_config(model: dict) -> dict:
    return model | {
        "datasets": {
            "d": {"panel": "p.vcf", "reference": "r.fa", "build": "hg19", "recipe": "centered"}
        }
    }


@pytest.mark.parametrize("revision", [None, "main", "v1.0", "0123abc"])
def test_unpinned_hub_remote_code_stops_at_parse_time(revision):
    config = _run_config(_hub_model(trust_remote_code=True, revision=revision))
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict(config)
    message = str(err.value)
    assert message.startswith(f"models.m: {REPO_ID} with trust_remote_code: true at revision")
    assert "pin `revision` to a commit" in message and "`allow_unpinned: true`" in message


@pytest.mark.parametrize(
    "keys",
    [
        {"trust_remote_code": True, "revision": COMMIT},
        {"trust_remote_code": True, "allow_unpinned": True},
        {"trust_remote_code": False},  # no remote code asked for: nothing runs unpinned
    ],
)
def test_pinned_or_allowed_hub_models_pass_the_config_check(keys):
    RunConfig.from_dict(_run_config(_hub_model(**keys)))


def test_hub_snapshot_with_remote_code_needs_a_pin(demo_model_dir, tmp_path, monkeypatch):
    """The job-time check on the snapshot itself (a config check can be bypassed by the CLI):
    unpinned remote code from the Hub stops, naming the snapshot's commit to pin."""
    snapshot = fake_hub_cache(tmp_path / "hf", demo_model_dir)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf/hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("carbon_vep.sources.hub.constants.HF_HUB_OFFLINE", True)
    spec = ModelSettings(REPO_ID, trust_remote_code=True)
    folder, from_hub = model_folder(spec)
    assert (folder, from_hub) == (snapshot, True)
    with pytest.raises(RemoteCodeError) as err:
        check_remote_code(spec, folder, from_hub)
    assert f"this snapshot is {COMMIT}" in str(err.value)
    check_remote_code(ModelSettings(REPO_ID, trust_remote_code=True, revision=COMMIT), folder, True)
    allowed = ModelSettings(REPO_ID, trust_remote_code=True, allow_unpinned=True)
    check_remote_code(allowed, folder, True)


@pytest.mark.workflow
def test_workflow_refuses_an_unpinned_remote_code_model(tmp_path):
    """`snakemake -n` with a Hub model allowed remote code at no pinned commit: the workflow
    stops while it parses, with the message and the config key."""
    config = demo_config(tmp_path, REPO_ID, trust_remote_code=True)
    result = run_snakemake(tmp_path, config, "-n")
    assert result.returncode != 0
    output = result.stdout + result.stderr  # snakemake prints parse errors on stdout
    assert f"models.demo: {REPO_ID} with trust_remote_code: true" in output
    assert "allow_unpinned: true" in output
