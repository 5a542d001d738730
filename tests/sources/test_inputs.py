"""Verified inputs: sha256 of every input recorded for the provenance, a pinned sha256 that
does not match stops the run naming the file and both hashes, and a file changed in place
reruns what depends on it (Snakemake's mtime trigger), saying why."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import yaml
from support.cluster import DATASET, DEMO, demo_config, run_snakemake

from carbon_vep.cli.common import pairs
from carbon_vep.config.fields import ConfigError
from carbon_vep.config.run import RunConfig
from carbon_vep.errors import InputError
from carbon_vep.sources.inputs import PinMismatchError, hash_files, record_model, sha256_file


def test_sha256_and_pins(tmp_path):
    path = tmp_path / "panel.vcf"
    path.write_bytes(b"x" * (3 << 20) + b"tail")  # several read chunks
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha256_file(path) == actual
    assert hash_files({"panel.vcf": path}, {"panel.vcf": actual}) == {"panel.vcf": actual}
    wrong = "0" * 64
    with pytest.raises(PinMismatchError) as err:
        hash_files({"panel.vcf": path}, {"panel.vcf": wrong})
    assert str(err.value) == (
        f"panel.vcf: sha256 is {actual}, but the config pins {wrong} (top-level `sha256:`): "
        "the file changed (a rerun must not silently use it) or the pin is wrong"
    )


def test_model_record_hashes_weights_and_remote_code(demo_model_dir):
    record = record_model(str(demo_model_dir), None, {})
    assert record["model_commit"] is None  # a local directory has no Hub commit
    hashes = record["inputs_sha256"]
    for name in ("model.safetensors", "tokenization_hybrid_dna.py", "tokenizer_config.json"):
        assert hashes[f"{demo_model_dir}/{name}"] == sha256_file(demo_model_dir / name)
    weights = f"{demo_model_dir}/model.safetensors"
    with pytest.raises(PinMismatchError, match="model.safetensors: sha256 is"):
        record_model(str(demo_model_dir), None, {weights: "f" * 64})


def test_pins_in_the_config_are_checked():
    config = {
        "models": {"m": {"path": "some/model"}},
        "datasets": {"d": {"panel": "p", "reference": "r", "build": "hg19", "recipe": "centered"}},
    }
    assert RunConfig.from_dict(config | {"sha256": {"p": "a" * 64}}).sha256 == {"p": "a" * 64}
    with pytest.raises(ConfigError, match="sha256: p: expected 64 lowercase hex digits"):
        RunConfig.from_dict(config | {"sha256": {"p": "ABC"}})


def test_provenance_records_merge(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"inputs_sha256": {"p": "1"}, "model_commit": None}))
    second.write_text(json.dumps({"inputs_sha256": {"m/w": "2"}, "model_commit": "c"}))
    merged = pairs(["dataset=d", f"@{first}", f"@{second}"])
    assert merged == {"dataset": "d", "inputs_sha256": {"p": "1", "m/w": "2"}, "model_commit": "c"}


@pytest.mark.workflow
def test_changed_input_reruns_and_a_pin_mismatch_stops_the_run(demo_model_dir, tmp_path):
    """The workflow records the panel's hash; the panel changed in place is a reason to rerun
    (named by Snakemake), and with the old hash pinned the run stops naming both hashes."""
    panel = tmp_path / "panel.vcf"
    shutil.copy(DEMO / "demo_panel.vcf", panel)
    before = sha256_file(panel)
    config_path = demo_config(tmp_path, demo_model_dir)
    config = yaml.safe_load(config_path.read_text())
    config["datasets"][DATASET]["panel"] = str(panel)
    config["sha256"] = {str(panel): before}
    config_path.write_text(yaml.safe_dump(config))
    target = f"results/inputs/dataset_{DATASET}.json"
    result = run_snakemake(tmp_path, config_path, "--cores", "1", target)
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / target).read_text())
    assert record["inputs_sha256"][str(panel)] == before
    assert record["inputs_sha256"][str(DEMO / "chr17.hg19.part.fa")] == sha256_file(
        DEMO / "chr17.hg19.part.fa"
    )
    with panel.open("a") as handle:  # the panel edited in place
        handle.write("chr17\t100\t.\tA\tG\t.\t.\tLABEL=1\n")
    after = sha256_file(panel)
    plan = run_snakemake(tmp_path, config_path, "-n", target)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert f"Updated input files: {panel}" in plan.stdout
    result = run_snakemake(tmp_path, config_path, "--cores", "1", target)
    assert result.returncode != 0
    message = f"{panel}: sha256 is {after}, but the config pins {before}"
    assert message in result.stderr


# ---- downloads from a pinned URL (`downloads:`; hg19 for BRCA2 in config/suite.yaml) ---------
def _published(tmp_path, content: bytes = b">chr13\nACGTNNACGT\n"):
    import gzip

    source = tmp_path / "published/chr13.fa.gz"
    source.parent.mkdir()
    source.write_bytes(gzip.compress(content))
    return source, hashlib.sha256(source.read_bytes()).hexdigest()


def test_download_is_kept_only_with_the_pinned_sha256(tmp_path):
    from carbon_vep.sources.download import fetch_url

    source, digest = _published(tmp_path)
    out = tmp_path / "data/genomes/hg19.chr13.fa"
    assert fetch_url(source.as_uri(), out, digest, gunzip=True) == digest
    assert out.read_text() == ">chr13\nACGTNNACGT\n"
    out.unlink()
    wrong = "0" * 64
    with pytest.raises(InputError) as err:
        fetch_url(source.as_uri(), out, wrong, gunzip=True)
    assert str(err.value) == (
        f"{source.as_uri()}: sha256 is {digest}, but the config pins {wrong}: the file at this "
        "URL changed (or the pin is wrong); refusing it"
    )
    with pytest.raises(
        InputError, match=f"no sha256 pinned; the file downloaded has sha256 {digest}"
    ):
        fetch_url(source.as_uri(), out, None)
    assert list(out.parent.iterdir()) == []  # nothing kept, no partial file
    with pytest.raises(InputError, match="download failed"):
        fetch_url((tmp_path / "nope.gz").as_uri(), out, digest)


@pytest.mark.workflow
def test_workflow_fetches_a_pinned_download_before_using_it(tmp_path, demo_model_dir):
    """A dataset's reference from `downloads`: fetched by its head-node rule (a file:// URL
    here), then hashed into the dataset's inputs record."""
    source = tmp_path / "published/chr17.fa"
    source.parent.mkdir()
    shutil.copy(DEMO / "chr17.hg19.part.fa", source)
    digest = sha256_file(source)
    config_path = demo_config(tmp_path, demo_model_dir)
    config = yaml.safe_load(config_path.read_text())
    config["downloads"] = {
        "fragment": {"url": source.as_uri(), "sha256": digest, "out": "data/chr17.fa"}
    }
    config["datasets"][DATASET]["reference"] = "data/chr17.fa"
    config_path.write_text(yaml.safe_dump(config))
    target = f"results/inputs/dataset_{DATASET}.json"
    result = run_snakemake(tmp_path, config_path, "--cores", "1", target)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "fetch_url_fragment" in result.stderr
    assert json.loads((tmp_path / target).read_text())["inputs_sha256"]["data/chr17.fa"] == digest
