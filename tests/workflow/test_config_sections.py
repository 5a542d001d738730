"""A config holds only what its user wants: each section of the demo config alone (datasets,
scans, tasks or niah) plans its own jobs, with a relative and an absolute `outdir`, every log
under logs/ without a double slash."""

from __future__ import annotations

import re

import pytest
import yaml
from support.cluster import ROOT, absolute_demo_paths, run_snakemake

pytestmark = pytest.mark.workflow
SECTIONS = ("datasets", "scans", "tasks", "niah")


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
@pytest.mark.parametrize("section", SECTIONS)
def test_one_section_alone_plans_its_own_jobs(section, absolute, tmp_path):
    config = absolute_demo_paths(yaml.safe_load((ROOT / "config/config.yaml").read_text()))
    for other in SECTIONS:
        if other != section:
            config[other] = {}
    config.pop("baseline", None)
    outdir = str(tmp_path / "out") if absolute else "out"
    config["outdir"] = outdir
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_snakemake(tmp_path, path, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "double '/'" not in result.stdout + result.stderr
    plan = result.stdout
    logs = re.findall(r"^\s+log: (.*)$", plan, flags=re.M)
    assert logs and all(
        log.startswith(f"logs/{outdir.lstrip('/')}/") or log.startswith("logs/build_demo_model")
        for log in logs
    ), logs[:5]
    rules = set(re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):", plan, flags=re.M))
    own = {
        "datasets": "check_panel",
        "scans": "plan_scan",
        "tasks": "score_perturbation",
        "niah": "merge_niah",
    }
    assert own[section] in rules
    assert not {own[s] for s in SECTIONS if s != section} & rules
    if section in ("tasks", "niah"):  # their metrics come from their own rules, not a panel's
        assert "compute_metrics" not in rules


def test_a_window_longer_than_a_local_models_positions_stops_the_parse(tmp_path, demo_model_dir):
    """Refused while the Snakefile reads the config (scoring.context), before any job: it was
    refused by every score_shard job after its model had loaded (on a cluster, each retried)."""
    from support.cluster import demo_config

    path = demo_config(tmp_path, demo_model_dir)
    config = yaml.safe_load(path.read_text())
    [dataset] = config["datasets"]
    config["datasets"][dataset]["window_bp"] = 49_152  # the demo's 8,192 positions hold 49,146
    path.write_text(yaml.safe_dump(config))
    result = run_snakemake(tmp_path, path, "-n")
    said = result.stdout + result.stderr  # a dry run prints the error on stdout
    assert result.returncode != 0 and "rule score_shard:" not in said
    assert f"datasets.{dataset}: centered windows of 49,152 bp need 8,193 positions" in said
    assert "lower the config key `window_bp` to at most 49,146" in said
