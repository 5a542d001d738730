"""carbon_vep.workflow: what the Snakefile computes from the config — the files a run produces,
the wildcard patterns, each job's inputs, settings, resources and provenance, and what a scan's
plan decides — checked without Snakemake (the rules name these; tests/workflow runs them)."""

from __future__ import annotations

import json
import os
import shlex
import time
from types import SimpleNamespace as Wildcards

import pytest

from carbon_vep.config.run import RunConfig
from carbon_vep.workflow.jobs import Jobs
from carbon_vep.workflow.scans import ScanInputs, read_plan
from carbon_vep.workflow.targets import NOTHING, Targets


def _run(tmp_path, **extra) -> RunConfig:
    local = tmp_path / "local_model"
    (local / "sub").mkdir(parents=True)
    (local / "__pycache__").mkdir()
    for name in ("config.json", ".hidden", "sub/weights.bin", "__pycache__/x.pyc"):
        (local / name).write_text(name)
    models = {
        "demo": {"path": str(tmp_path / "demo_model"), "build_demo": True, "batch_size": 8},
        "local": {"path": str(local), "batch_tokens": 12_000, "device": "cuda"},
        "hub": {"path": "org/model", "revision": "a" * 40, "trust_remote_code": True},
    }
    dataset = {"panel": "p.vcf", "reference": "r.fa", "build": "hg38"}
    config = {
        "outdir": "out",
        "models": models,
        "datasets": {
            "d1": {
                **dataset,
                "recipe": "centered",
                "models": ["demo", "local"],
                "export_vcf": True,
            },
            "d2": {
                **dataset,
                "recipe": "from_scan",
                "scan": "g",
                "models": ["demo"],
                "export_vcf": False,
            },
        },
        "scans": {
            "g": {
                "reference": "r.fa",
                "build": "hg38",
                "regions": ["chr1", "x y.bed"],
                "models": ["demo"],
                "tracks": True,
            }
        },  # fmt: skip
        "sha256": {"p.vcf": "1" * 64, f"{local}/config.json": "2" * 64, "other": "3" * 64},
        **extra,
    }
    return RunConfig.from_dict(config)


def test_final_outputs_name_every_result_once_and_the_gate_only_with_a_baseline(tmp_path):
    run = _run(tmp_path)
    outputs = Targets(run, baseline=None).final_outputs()
    assert len(outputs) == len(set(outputs))
    panels = [o for o in outputs if o.startswith(("out/d1/", "out/d2/"))]
    assert sorted(panels) == sorted(
        f"out/{d}/{m}/{name}"
        for d, m in (("d1", "demo"), ("d1", "local"), ("d2", "demo"))
        for name in ("scores.parquet", "metrics.json", "report.md", "results.vcf.gz")
        if name != "results.vcf.gz" or d == "d1"
    )
    assert "out/scans/g/demo/summary.json" in outputs
    assert "out/scans/g/demo/tracks/tracks.json" in outputs
    assert {"out/report.html", "out/results_table.md"} <= set(outputs)
    assert "out/baseline_comparison.tsv" not in outputs
    assert Targets(run, "b.yaml").final_outputs()[-1] == "out/baseline_comparison.tsv"


def test_results_and_their_row_files_pair_up_in_order(tmp_path):
    run = _run(tmp_path, niah={"n": {"contexts": [1024], "tasks": ["niah"], "rows": 4}})
    targets = Targets(run, None)
    metrics, rows = targets.run_metrics(), targets.run_rows()
    assert len(metrics) == len(rows) == 3 + 3  # three panel results, one NIAH cell x 3 models
    for metric, row in zip(metrics, rows, strict=True):
        assert os.path.dirname(metric) == os.path.dirname(row)
    assert rows[-1] == "out/suite/niah/n/niah_1k/hub/predictions.parquet"
    assert targets.run_tables()["table"] == "out/results_table.parquet"


def test_wildcard_patterns_split_entries_by_kind_and_match_nothing_when_empty(tmp_path):
    targets = Targets(_run(tmp_path), None)
    assert targets.dataset_pattern(lookup=True) == "d2"
    assert targets.dataset_pattern(lookup=False) == "d1"
    assert targets.task_pattern("perturbation") == NOTHING
    assert targets.niah_pattern("hub") == NOTHING


def test_batch_sizes_halve_on_each_retry_and_never_reach_zero(tmp_path):
    jobs = Jobs(_run(tmp_path), "f" * 64)
    demo, local = Wildcards(model="demo"), Wildcards(model="local")
    assert [jobs.attempt_batch_size(demo, a) for a in (1, 2, 3, 4, 5)] == [8, 4, 2, 1, 1]
    assert [jobs.attempt_batch_tokens(local, a) for a in (1, 2)] == [12_000, 6_000]
    assert jobs.attempt_batch_tokens(demo, 3) == 0  # no token budget stays none
    assert (jobs.gpu_count(local), jobs.gpu_count(demo)) == (1, 0)


def test_model_sources_are_the_demo_dir_the_hub_record_or_every_visible_file(tmp_path):
    jobs = Jobs(_run(tmp_path), "f" * 64)
    assert jobs.model_sources(Wildcards(model="demo")) == [str(tmp_path / "demo_model")]
    assert jobs.model_sources(Wildcards(model="hub")) == ["out/hub/hub.json"]
    local = tmp_path / "local_model"
    assert jobs.model_sources(Wildcards(model="local")) == [
        str(local / "config.json"), str(local / "sub/weights.bin")
    ]  # fmt: skip
    assert jobs.model_files(Wildcards(model="hub")) == ["out/inputs/model_hub.json"]
    assert sorted(jobs.hub_models) == ["hub"]


def test_pins_are_the_configs_hashes_of_exactly_these_files(tmp_path):
    jobs = Jobs(_run(tmp_path), "f" * 64)
    assert json.loads(shlex.split(jobs.pins(["p.vcf", "r.fa"]))[0]) == {"p.vcf": "1" * 64}
    model_pins = json.loads(shlex.split(jobs.model_pins(Wildcards(model="local")))[0])
    assert model_pins == {f"{tmp_path}/local_model/config.json": "2" * 64}
    args = shlex.split(jobs.model_source_args(Wildcards(model="hub")))
    assert args == ["--model", "org/model", "--revision", "a" * 40]


def test_settings_leave_the_batch_sizes_to_the_resources_and_provenance_names_the_config(
    tmp_path,
):
    jobs = Jobs(_run(tmp_path), "0123456789abcdef" + "f" * 48)
    wc = Wildcards(dataset="d1", model="local")
    settings = json.loads(shlex.split(jobs.scoring_settings(wc))[0])
    assert settings["path"].endswith("local_model") and settings["recipe"] == "centered"
    assert not {"batch_size", "batch_tokens", "build_demo"} & set(settings)
    provenance = json.loads(shlex.split(jobs.dataset_provenance(wc))[0])
    assert provenance["dataset"] == "d1" and provenance["config_sha256"] == "0123456789abcdef"
    scan = json.loads(shlex.split(jobs.scan_provenance(Wildcards(scan="g", model="demo")))[0])
    assert (scan["scan"], scan["tile_bp"], scan["model"]) == (
        "g",
        49_146,
        str(tmp_path / "demo_model"),
    )
    assert shlex.split(jobs.scan_regions(Wildcards(scan="g"))) == ["chr1", "x y.bed"]
    assert jobs.lookup_scan_dir(Wildcards(dataset="d2", model="demo")) == "out/scans/g/demo"


def test_niah_jobs_cover_every_row_once(tmp_path):
    niah = {"n": {"contexts": [1024], "tasks": ["niah"], "rows": 250, "rows_per_job": 100}}
    jobs = Jobs(_run(tmp_path, niah=niah), "f" * 64, niah_gpu="A10")
    wc = {"niah": "n", "cell": "niah_1k", "model": "local"}
    rows = [jobs.niah_rows(Wildcards(**wc, part=f"{i:05d}")) for i in range(3)]
    assert rows == [f"{a}:{b} --cell-task niah" for a, b in ((0, 100), (100, 200), (200, 250))]
    parts = jobs.niah_parts("rows")(Wildcards(**wc))
    assert parts == [f"out/suite/niah/n/niah_1k/local/parts/rows_{i:05d}.parquet" for i in range(3)]
    assert jobs.niah_runtime(Wildcards(**wc, part="00000")) >= 1


def test_scan_inputs_follow_the_plan_and_a_rewritten_plan_is_read_again(tmp_path):
    plan = {"chunks": [{}, {}, {}], "files": [{"name": "chr1", "chunks": [0, 1]},
                                              {"name": "small+2", "chunks": [2]}]}  # fmt: skip
    scans = ScanInputs(_run(tmp_path))
    wc = Wildcards(scan="g", model="demo", file="small+2")
    assert scans.file_chunks(wc, plan) == ["out/scans/g/demo/chunks/chunk_00002.parquet"]
    assert len(scans.chunk_stats(wc, plan)) == 3
    assert scans.output_files(wc, plan, "tsv") == [
        "out/scans/g/demo/snvs/chr1.tsv.gz", "out/scans/g/demo/snvs/small+2.tsv.gz"
    ]  # fmt: skip
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    assert read_plan(str(path)) == plan
    time.sleep(0.01)
    path.write_text(json.dumps({"chunks": [], "files": []}))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert read_plan(str(path)) == {"chunks": [], "files": []}
    assert "not planned yet" in scans.plan_notes()[0]


@pytest.mark.parametrize("kind", ["parquet", "counts", "tsv"])
def test_every_output_kind_has_one_file_per_plan_file(tmp_path, kind):
    plan = {"chunks": [{}], "files": [{"name": "a", "chunks": [0]}, {"name": "b", "chunks": [0]}]}
    files = ScanInputs(_run(tmp_path)).output_files(Wildcards(scan="g", model="demo"), plan, kind)
    assert len(set(files)) == 2


def test_vllm_jobs_run_in_the_vllm_environment_on_tensor_parallel_gpus(tmp_path):
    models = {
        "v": {"path": "org/m", "revision": "b" * 40, "device": "cuda", "engine": "vllm",
              "tensor_parallel_size": 2},
        "t": {"path": "org/m", "revision": "b" * 40, "device": "cuda"},
    }  # fmt: skip
    niah = {"n": {"contexts": [1024], "tasks": ["niah"], "rows": 2}}
    run = RunConfig.from_dict({"models": models, "niah": niah, "vllm_env": "/opt/venv-vllm"})
    jobs = Jobs(run, "f" * 64, workflow_root="/wf")
    v, t = Wildcards(model="v"), Wildcards(model="t")
    assert jobs.generation_command(v) == "/opt/venv-vllm/bin/carbon-vep"
    assert jobs.generation_command(t) == "carbon-vep"
    assert (jobs.generation_gpu_count(v), jobs.generation_gpu_count(t), jobs.gpu_count(v)) == (
        2, 1, 1
    )  # fmt: skip
    relative = Jobs(RunConfig.from_dict({"models": models, "niah": niah}), "f" * 64, "A10", "/wf")
    assert relative.generation_command(v) == "/wf/.venv-vllm/bin/carbon-vep"
    generation = json.loads(shlex.split(jobs.model_settings(v, generation=True))[0])
    assert generation["engine"] == "vllm" and generation["tensor_parallel_size"] == 2
    assert "vllm_env" not in generation
    scoring = json.loads(shlex.split(jobs.model_settings(v))[0])
    assert not {"engine", "tensor_parallel_size", "prefix_caching"} & set(scoring)
