"""Usable as a Snakemake module: a user's own small repository imports this workflow with
`module` (snakedeploy's convention), passes its own config, and every path the workflow needs
(schema, envs, report templates, demo resources, baselines) resolves from the workflow's own
location, not from the user's working directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.cluster import workflow_env

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.workflow

OUTER = """\
configfile: "config/config.yaml"


module carbon:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from carbon
"""


def _user_repo(tmp_path: Path, demo_model_dir: Path) -> Path:
    """The three-line outer Snakefile (docs/reproducibility.md) and the user's config:
    config/ci.yaml as shipped (its resources/demo/ paths and baselines/demo.yaml are the
    workflow's), one override."""
    (tmp_path / "Snakefile").write_text(OUTER.format(snakefile=ROOT / "Snakefile"))
    config = yaml.safe_load((ROOT / "config/ci.yaml").read_text())
    config["models"]["demo"].update(path=str(demo_model_dir), build_demo=False)
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


def _snakemake(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *args],
        cwd=repo,  # the user's repository, not this checkout
        env=workflow_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_workflow_runs_as_a_module_from_another_directory(tmp_path, demo_model_dir):
    repo = _user_repo(tmp_path, demo_model_dir)
    plan = _snakemake(repo, "-n")
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    for rule in ("check_panel", "record_model_inputs", "make_results_table", "compare_baseline"):
        assert f"rule {rule}:" in plan.stdout
    assert f"input: results/results_table.parquet, {ROOT / 'baselines/demo.yaml'}" in plan.stdout
    # a real run of the model-free stages: schema validation, conda paths, demo resources
    targets = ["results/inputs/dataset_demo_centered.json", "results/demo_centered/checked.parquet"]
    result = _snakemake(repo, *targets)
    assert result.returncode == 0, result.stderr[-3000:]
    record = yaml.safe_load((repo / targets[0]).read_text())
    assert str(ROOT / "resources/demo/demo_panel.vcf") in record["inputs_sha256"]
    assert (repo / targets[1]).is_file()
