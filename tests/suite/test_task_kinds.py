"""Every task kind that config.tasks declares is taken where a kind runs: its command, its job,
its Snakemake rule and GPU-profile entries, and a metrics JSON holding the metrics it declares
(the estimate's and the report's tables are checked in tests/estimate and tests/report). A kind
missing from any of them fails here, not in a run."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import polars as pl
import pytest
import yaml

from carbon_vep.cli import build_parser
from carbon_vep.cli.suite import score_task
from carbon_vep.config.stages import PerturbationSettings, RecoverySettings
from carbon_vep.config.tasks import PERTURBATION, SEQUENCE_RECOVERY, TASK_KINDS
from carbon_vep.suite.jobs import TASK_JOBS
from carbon_vep.suite.perturbation import perturbation_metrics
from carbon_vep.suite.recovery import recovery_metrics

ROOT = Path(__file__).resolve().parents[2]
KINDS = list(TASK_KINDS.values())
RULE = re.compile(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", re.MULTILINE | re.DOTALL)


def _commands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_kind_has_its_command(kind):
    """`carbon-vep <command>` runs the kind's job; a generation kind records its times."""
    command = _commands()[kind.command]
    required = ["--tasks-file", "t", "--model", "m", "--out", "o", "--metrics", "j"]
    args = command.parse_args([*required, "--task", "t", "--model-key", "k"])
    assert args.func.func is score_task and args.func.args == (kind,)
    options = {option for action in command._actions for option in action.option_strings}
    assert ("--times" in options) == kind.generation
    assert all(column in command.format_help() for column in kind.columns)


def test_every_kind_has_its_job():
    assert list(TASK_JOBS) == list(TASK_KINDS)


def _rules() -> dict[str, str]:
    return dict(RULE.findall((ROOT / "workflow/rules/suite.smk").read_text()))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_kind_has_its_rule(kind):
    """Its rule, named as declared, takes the kind's tasks and resources under its own name,
    runs the kind's command, and a generation kind's on the engine's carbon-vep; a kind with
    sweeps writes its sweep points' outputs too."""
    body = _rules()[kind.rule]
    folder = "PATHS.task_point_dir" if kind.sweeps else "PATHS.task_dir"
    for call in ("TARGETS.rule_task_pattern", "JOBS.task_resources", "PATHS.job_log"):
        name = kind.rule + (r"(_\{part\})?" if call == "PATHS.job_log" else "")  # a log a part
        assert re.search(rf'{re.escape(call)}\(({folder}, )?"{name}"\)', body), call
    points = f'point=TARGETS.rule_point_pattern("{kind.rule}")'
    assert (points in body) == bool(kind.sweeps)
    launcher = r"\{params\.exe\}" if kind.generation else "carbon-vep"
    assert re.search(rf'"{launcher} {kind.command} --tasks-file', body)
    assert ("JOBS.generation_command" in body) == kind.generation


@pytest.mark.parametrize("profile", ["slurm-a10", "slurm-h100"])
def test_the_gpu_profiles_send_every_kind_to_a_gpu(profile):
    """A kind's rule runs a model: the GPU profiles give it a GPU partition; a generation
    kind's GPU count comes from its rule (vLLM's tensor_parallel_size), not the profile."""
    config = yaml.safe_load((ROOT / f"profiles/{profile}/config.yaml").read_text())
    for kind in KINDS:
        resources = config["set-resources"][kind.rule]
        assert resources["slurm_partition"] == "FILL_IN_GPU_PARTITION", kind.rule
        assert ("gpu" in resources) != kind.generation, kind.rule


RECOVERY_ROWS = pl.DataFrame(
    {
        "status": ["scored"] * 2,
        "accuracy": [0.5, 1.0],
        "type": ["a", "b"],
        "label": ["A" * 30] * 2,
        "prompt_non_acgt": [0, 0],
    }
)
PAIRS = pl.DataFrame(
    {
        "status": ["scored"] * 2,
        "correct": [True, False],
        "tie": [False, False],
        "margin": [0.3, -0.1],
        "non_acgt": [0, 0],
    }
)
# each kind's metrics from a few scored rows
METRICS = {
    SEQUENCE_RECOVERY.name: lambda: recovery_metrics(RECOVERY_ROWS, RecoverySettings()),
    PERTURBATION.name: lambda: perturbation_metrics(PAIRS, PerturbationSettings()),
}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_kinds_metrics_json_holds_and_defines_what_it_declares(kind):
    result = METRICS[kind.name]()
    assert result["kind"] == kind.name
    assert list(result["definitions"]) == [metric.name for metric in kind.metrics]
    for metric in kind.metrics:
        assert metric.name in result or metric.name in result["metrics"], metric.name
    assert result["metrics"][kind.headline] is not None
