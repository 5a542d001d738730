"""Every shipped config defines its run alone: `snakemake -n` on it plans jobs for its own
datasets, scans, tasks, models and Hub files only (the demo config is not merged in)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from support.cluster import run_snakemake

from carbon_vep.config.workflow import SHIPPED_RESOURCES

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "config").glob("*.yaml"))
pytestmark = pytest.mark.workflow


def _user_inputs(config: dict) -> list[str]:
    """The files a user brings (relative paths no rule writes and the checkout does not ship)."""
    fetched = {
        entry["out"]
        for section in ("hub_files", "downloads")
        for entry in (config.get(section) or {}).values()
    }
    paths = [
        entry[key]
        for section in ("datasets", "tasks", "scans")
        for entry in (config.get(section) or {}).values()
        for key in ("panel", "reference", "path")
        if key in entry
    ]
    return sorted(
        {p for p in paths if not Path(p).is_absolute() and p not in fetched}
        - {p for p in paths if (ROOT / p).exists() and p.startswith(SHIPPED_RESOURCES)}
    )


def test_every_shipped_config_is_tested():
    assert {p.name for p in CONFIGS} >= {"config.yaml", "ci.yaml", "suite.yaml", "brca2.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_dry_run_plans_only_the_configs_jobs(path, tmp_path):
    config = yaml.safe_load(path.read_text())
    for name in _user_inputs(config):  # placeholders: a dry run only needs them to exist
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    result = run_snakemake(tmp_path, path, "-n")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    plan = result.stdout
    outdir = config.get("outdir", "results")
    own = {
        "dataset": set(config.get("datasets") or {}),
        "model": set(config["models"]),
        "task": set(config.get("tasks") or {}),
        "scan": set(config.get("scans") or {}),
        "niah": set(config.get("niah") or {}),
    }
    # every wildcard value of every planned job is this config's
    for line in re.findall(r"^\s+wildcards: (.*)$", plan, flags=re.M):
        for item in line.split(", "):
            key, value = item.split("=", 1)
            if key in own:
                assert value in own[key], f"{path.name}: planned {key} {value!r}: {line}"
    # every planned output under OUTDIR belongs to one of its datasets, tasks or scans
    outputs = [
        o for line in re.findall(r"^\s+output: (.*)$", plan, flags=re.M) for o in line.split(", ")
    ]
    under = [Path(o).relative_to(outdir).parts for o in outputs if o.startswith(f"{outdir}/")]
    for parts in under:
        if parts[:2] == ("suite", "niah"):  # suite/niah/ENTRY/CELL/MODEL/...
            assert parts[2] in own["niah"] and parts[4] in own["model"], parts
        elif parts[0] == "suite" and parts[2] == "sweep":  # suite/TASK/sweep/POINT/MODEL/...
            assert parts[1] in own["task"] and parts[4] in own["model"], parts
        elif parts[0] == "suite":
            assert parts[1] in own["task"] and parts[2] in own["model"], parts
        elif parts[0] == "niah":  # niah/ENTRY/cells/CELL.parquet
            assert parts[1] in own["niah"] and parts[2] == "cells", parts
        elif parts[0] == "scans":  # scans/SCAN/plan.{json,md} (no model), or scans/SCAN/MODEL/...
            assert parts[1] in own["scan"], parts
            assert parts[2:] in {("plan.json",), ("plan.md",)} or parts[2] in own["model"], parts
        elif parts[0] == "inputs":  # the hashes of a dataset's, task's, cell's or model's inputs
            kind, name = parts[1].removesuffix(".json").split("_", 1)
            if kind == "niah":  # niah_ENTRY.CELL
                name = name.split(".")[0]
            assert name in own[kind], parts
        elif parts[0] == "hub":
            assert parts[1].removesuffix(".json") in own["model"], parts
        elif len(parts) > 1:
            assert parts[0] in own["dataset"], parts
    # ... and every dataset of the config is planned, and only its Hub files are fetched
    assert {parts[0] for parts in under if len(parts) > 1} >= own["dataset"]
    fetched = set(re.findall(r"^(?:local)?rule fetch_hub_(\w+):", plan, flags=re.M))
    assert fetched == set(config.get("hub_files") or {}) - {
        name
        for name, hub in (config.get("hub_files") or {}).items()
        if (tmp_path / hub["out"]).exists()
    }
    downloads = set(re.findall(r"^(?:local)?rule fetch_url_(\w+):", plan, flags=re.M))
    assert downloads == set(config.get("downloads") or {})
    gate = "rule compare_baseline:" in plan
    assert gate == bool(config.get("baseline")), path.name
