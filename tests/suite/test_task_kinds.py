"""Every task kind that config.tasks declares is taken where a kind runs: its command, its job,
its Snakemake rule and GPU-profile entries, its merge (rule, command, metrics function: the
metrics and their intervals, on a CPU), and a metrics JSON holding the metrics it declares (the
estimate's and the report's tables are checked in tests/estimate and tests/report). A kind
missing from any of them fails here, not in a run."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from carbon_vep.cli import build_parser
from carbon_vep.cli.suite import merge_task, score_task
from carbon_vep.config.stages import EvaluationSettings, PerturbationSettings, RecoverySettings
from carbon_vep.config.tasks import PERTURBATION, SEQUENCE_RECOVERY, TASK_KINDS
from carbon_vep.suite.jobs import TASK_JOBS, TASK_METRICS
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


def test_every_kind_has_its_job_and_its_metrics():
    assert list(TASK_JOBS) == list(TASK_KINDS) == list(TASK_METRICS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_kind_has_its_merge_command(kind):
    """`carbon-vep <merge command>` runs the kind's merge, with the kind's settings and the
    evaluation's (the intervals are the merge's); a generation kind's reads the parts' metrics
    JSON (the draft's counts)."""
    command = _commands()[kind.merge_command]
    required = ["--tasks-file", "t", "--parts", "p", "--out", "o", "--metrics", "j"]
    args = command.parse_args([*required, "--task", "t", "--model-key", "k", "--bootstrap", "7"])
    assert args.func.func is merge_task and args.func.args == (kind,)
    assert args.bootstrap == 7
    options = {option for action in command._actions for option in action.option_strings}
    assert ("--part-metrics" in options) == kind.generation
    assert "--model" not in options  # no model: a CPU job


def _rules() -> dict[str, str]:
    return dict(RULE.findall((ROOT / "workflow/rules/suite.smk").read_text()))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_kind_has_its_rule(kind):
    """Its rule, named as declared, takes the kind's tasks and resources under its own name,
    runs the kind's command, and a generation kind's on the engine's carbon-vep; a kind with
    sweeps writes its sweep points' outputs too."""
    body = _rules()[kind.rule]
    for call in ("TARGETS.rule_task_pattern", "JOBS.task_resources", "PATHS.job_log"):
        name = kind.rule + (r"_\{part\}" if call == "PATHS.job_log" else "")  # a log a part
        assert re.search(rf'{re.escape(call)}\((PATHS.task_point_dir, )?"{name}"\)', body), call
    # every kind writes through the sweep points' pattern (a kind without sweeps: "" alone)
    assert f'point=TARGETS.rule_point_pattern("{kind.rule}")' in body
    assert "PATHS.task_part_predictions" in body and "PATHS.task_part_metrics" in body
    launcher = r"\{params\.exe\}" if kind.generation else "carbon-vep"
    assert re.search(rf'"{launcher} {kind.command} --tasks-file', body)
    assert ("JOBS.generation_command" in body) == kind.generation
    assert "settings=JOBS.task_settings" in body  # no evaluation settings: JOBS.task_settings


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_kind_has_its_merge_rule(kind):
    """Its merge rule, named as declared, joins the model rule's parts into the task's table and
    metrics, with the task's settings and the evaluation's (JOBS.task_merge_settings), on a CPU
    (no model resources) and with plain carbon-vep (never the vLLM environment's)."""
    body = _rules()[kind.merge_rule]
    assert f'task=TARGETS.rule_task_pattern("{kind.rule}")' in body
    assert f'point=TARGETS.rule_point_pattern("{kind.rule}")' in body
    assert 'parts=JOBS.task_parts("predictions")' in body
    assert "PATHS.task_point_predictions" in body and "PATHS.task_point_metrics" in body
    assert f'PATHS.job_log(PATHS.task_point_dir, "{kind.merge_rule}")' in body
    assert "settings=JOBS.task_merge_settings" in body
    assert "resources:" not in body and "params.exe" not in body
    assert re.search(rf'"carbon-vep {kind.merge_command} --tasks-file', body)
    assert ("--part-metrics" in body) == kind.generation


@pytest.mark.parametrize("profile", ["slurm-a10", "slurm-h100"])
def test_the_gpu_profiles_send_every_kind_to_a_gpu(profile):
    """A kind's rule runs a model: the GPU profiles give it a GPU partition; a generation
    kind's GPU count comes from its rule (vLLM's tensor_parallel_size), not the profile."""
    config = yaml.safe_load((ROOT / f"profiles/{profile}/config.yaml").read_text())
    for kind in KINDS:
        resources = config["set-resources"][kind.rule]
        assert resources["slurm_partition"] == "FILL_IN_GPU_PARTITION", kind.rule
        assert ("gpu" in resources) != kind.generation, kind.rule
        assert kind.merge_rule not in config["set-resources"]  # a CPU job: the defaults


RECOVERY_ROWS = pl.DataFrame(
    {
        "status": ["scored"] * 4,
        "accuracy": [0.5, 1.0, 0.0, 0.25],
        "type": ["a", "b", "a", "b"],
        "label": ["A" * 30] * 4,
        "prompt_non_acgt": [0] * 4,
    }
)
PAIRS = pl.DataFrame(
    {
        "status": ["scored"] * 4,
        "correct": [True, False, True, True],
        "tie": [False] * 4,
        "margin": [0.3, -0.1, 0.2, 0.5],
        "non_acgt": [0] * 4,
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


ROWS = {SEQUENCE_RECOVERY.name: RECOVERY_ROWS, PERTURBATION.name: PAIRS}
# runs a command as `carbon-vep` does, then says which model libraries the process loaded
LIBRARIES_AFTER = (
    "import sys; from carbon_vep.cli import main; rc = main(sys.argv[1:]); "
    "print(sorted({'torch', 'transformers'} & set(sys.modules))); sys.exit(rc)"
)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_kinds_merge_writes_the_rows_in_order_and_their_metrics_with_intervals(kind, tmp_path):
    """`carbon-vep <merge command>` on two parts given out of order: the rows in the task file's
    order, the kind's metrics of them with the bootstrap intervals its --bootstrap asks for (the
    workflow's model jobs write point estimates), in a process that loads no torch."""
    rows = ROWS[kind.name].with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"))
    tasks = tmp_path / "tasks.tsv"
    table = pl.DataFrame({column: ["ACGTAC"] * rows.height for column in kind.columns})
    table.write_csv(tasks, separator="\t")
    parts = [tmp_path / "part_1.parquet", tmp_path / "part_0.parquet"]
    rows[2:].write_parquet(parts[0])
    rows[:2].write_parquet(parts[1])
    out, metrics = tmp_path / "predictions.parquet", tmp_path / "metrics.json"
    argv = [kind.merge_command, "--tasks-file", str(tasks), "--parts", *map(str, parts)]
    argv += ["--task", "t", "--model-key", "m", "--bootstrap", "40", "--seed", "3"]
    argv += ["--out", str(out), "--metrics", str(metrics)]
    done = subprocess.run(
        [sys.executable, "-c", LIBRARIES_AFTER, *argv], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"  # neither torch nor transformers
    assert pl.read_parquet(out).equals(rows)
    written = json.loads(metrics.read_text())
    expected = TASK_METRICS[kind.name](rows, kind.settings(), EvaluationSettings(40, seed=3))
    assert written["metrics"] == expected["metrics"]
    assert written["confidence_intervals"] == expected["confidence_intervals"]
    assert kind.headline in written["confidence_intervals"]
    assert (written["task"], written["model_key"]) == ("t", "m")
