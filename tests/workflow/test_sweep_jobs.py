"""A task's sweep points are jobs of its kind's rule: `snakemake -n -p` on a config sweeping both
of sequence recovery's settings plans the headline's job and one job per other value and model,
each with its own settings and outputs of its own; the results table reads the headlines only,
the report and `all` every point. The point reaches the metrics JSON's parameters."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from types import SimpleNamespace as Wildcards

import pytest
import yaml
from support.cluster import ROOT, run_snakemake

from carbon_vep.cli.common import write_task_result
from carbon_vep.config.run import RunConfig
from carbon_vep.workflow.jobs import Jobs
from carbon_vep.workflow.targets import Targets

MODELS = ("a", "b")
NEW_TOKENS, PROMPT_BP = [5, 10, 640], [6144, 1024]
TASK = {
    "kind": "sequence_recovery",
    "path": str(ROOT / "resources/demo/demo_recovery.tsv"),
    "new_tokens": NEW_TOKENS,
    "max_prompt_bp": PROMPT_BP,
    "accuracy_mode": "prediction_length",
}


def _config(outdir: str = "out") -> dict:
    models = {m: {"path": f"org/model-{m}", "device": "cpu"} for m in MODELS}
    plain = {"kind": "sequence_recovery", "path": TASK["path"], "models": ["a"]}
    return {"outdir": outdir, "models": models, "tasks": {"t": TASK, "plain": plain}}


def _expected() -> dict[str, tuple[int, int, dict | None]]:
    """Output folder -> (new_tokens, max_prompt_bp, sweep record) of every job of task t."""
    out = {}
    for model in MODELS:
        out[f"out/suite/t/{model}"] = (5, 6144, None)
        for value in NEW_TOKENS[1:]:
            record = {"setting": "new_tokens", "value": value}
            out[f"out/suite/t/sweep/new_tokens_{value}/{model}"] = (value, 6144, record)
        for value in PROMPT_BP[1:]:
            record = {"setting": "max_prompt_bp", "value": value}
            out[f"out/suite/t/sweep/max_prompt_bp_{value}/{model}"] = (5, value, record)
    return out


def _option(command: str, name: str) -> list[str]:
    words = shlex.split(command.split(";", 1)[1])
    return [words[i + 1] for i, word in enumerate(words) if word == name]


@pytest.mark.workflow
def test_a_dry_run_plans_the_headline_and_one_job_a_point_and_model(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_config()))
    result = run_snakemake(tmp_path, path, "-n", "-p")
    assert result.returncode == 0, result.stderr[-3000:]
    blocks = re.findall(
        r"^rule score_recovery:\n(.*?)^Shell command: (.*?)$", result.stdout, re.M | re.S
    )
    jobs = {}
    for block, command in blocks:
        (metrics,) = re.findall(
            r"output: \S+/parts/predictions_00000\.parquet, (\S+)/parts/metrics_00000\.json", block
        )
        assert _option(command, "--part") == ["0/1"]  # `parts` 1: the whole task, one job
        settings = json.loads(_option(command, "--settings")[0])
        provenance = json.loads(_option(command, "--provenance")[0])
        assert metrics not in jobs and _option(command, "--task") == [metrics.split("/")[2]]
        jobs[metrics] = (settings["new_tokens"], settings["max_prompt_bp"], provenance.get("sweep"))
    assert jobs.pop("out/suite/plain/a") == (5, 6144, None)
    assert jobs == _expected()
    merges = re.findall(
        r"^rule merge_recovery:\n.*?output: (\S+)/predictions\.parquet", result.stdout, re.M | re.S
    )
    assert sorted(merges) == sorted([*_expected(), "out/suite/plain/a"])  # one a job's folder
    # the results table reads the headlines; the report and the run's target every point
    make_table = result.stdout.split("rule make_results_table:")[1].split("Shell command")[0]
    assert "sweep/" not in make_table and "out/suite/t/a/metrics.json" in make_table
    report = result.stdout.split("rule write_run_report:")[1].split("\n\n")[0]
    swept = [f for f in _expected() if "/sweep/" in f]
    assert sorted(_option("x; " + report.split("Shell command: ")[1], "--sweep-metrics")) == sorted(
        f"{folder}/metrics.json" for folder in swept
    )
    target = result.stdout.split("rule all:")[1].split("\n\n")[0]
    assert all(f"{folder}/predictions.parquet" in target for folder in swept)


def test_targets_file_sweep_points_apart_from_the_results():
    targets = Targets(RunConfig.from_dict(_config()), None)
    points = [m.removesuffix("/metrics.json") for m in targets.sweep_metrics()]
    assert sorted(points) == sorted(f for f in _expected() if "/sweep/" in f)
    assert not any("/sweep/" in m for m in targets.run_metrics() + targets.run_rows())
    assert set(targets.sweep_outputs()) <= set(targets.final_outputs())
    pattern = targets.rule_point_pattern("score_recovery")
    for folder in ("", "sweep/new_tokens_640/", "sweep/max_prompt_bp_1024/"):
        assert re.fullmatch(pattern, folder), folder
    assert not re.fullmatch(pattern, "sweep/new_tokens_5/")  # the headline has no folder
    assert re.fullmatch(targets.rule_point_pattern("score_perturbation"), "")


def test_a_points_job_records_its_point_under_the_metrics_parameters(tmp_path):
    """The rule passes the point in the provenance (its command is the headline's); the command
    files it under `parameters.sweep`, and the headline's provenance is as before."""
    jobs = Jobs(RunConfig.from_dict(_config()))
    point = Wildcards(task="t", model="b", point="sweep/new_tokens_640/")
    settings = json.loads(shlex.split(jobs.task_settings(point))[0])
    assert (settings["new_tokens"], settings["max_prompt_bp"]) == (640, 6144)
    headline = Wildcards(task="t", model="b", point="")
    assert "sweep" not in json.loads(shlex.split(jobs.task_provenance(headline))[0])
    with pytest.raises(ValueError, match="no sweep point 'sweep/new_tokens_7/'"):
        jobs.task(Wildcards(task="t", model="b", point="sweep/new_tokens_7/"))
    args = argparse.Namespace(
        task="t",
        model_key="b",
        provenance=shlex.split(jobs.task_provenance(point)),
        metrics_out=tmp_path / "metrics.json",
    )
    write_task_result({"parameters": {"new_tokens": 640}, "warnings": []}, args, ["accuracy"])
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["parameters"] == {
        "new_tokens": 640,
        "sweep": {"setting": "new_tokens", "value": 640},
    }
    assert written["provenance"]["task"] == "t" and "sweep" not in written["provenance"]
