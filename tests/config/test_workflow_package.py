"""carbon_vep.workflow: what the Snakefile computes from the config — the files a run produces,
the wildcard patterns, each job's inputs, settings, resources and provenance, and what a scan's
plan decides — checked without Snakemake (the rules name these; tests/workflow runs them)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import time
from pathlib import Path
from types import SimpleNamespace as Wildcards

import pytest

from carbon_vep.config.gpus import DEMO_SHAPE
from carbon_vep.config.run import RunConfig
from carbon_vep.workflow.digests import fingerprint, settings_sha256
from carbon_vep.workflow.jobs import Jobs
from carbon_vep.workflow.paths import RunPaths
from carbon_vep.workflow.scans import ScanInputs, read_plan
from carbon_vep.workflow.targets import NOTHING, Targets


def _run(tmp_path, d1: dict | None = None, **extra) -> RunConfig:
    """A run of three models, two datasets (d1 with the keys of `d1` too) and a scan."""
    local = tmp_path / "local_model"
    (local / "sub").mkdir(parents=True, exist_ok=True)
    (local / "__pycache__").mkdir(exist_ok=True)
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
                **(d1 or {}),
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
        },
        "sha256": {"p.vcf": "1" * 64, f"{local}/config.json": "2" * 64},
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
    jobs = Jobs(_run(tmp_path))
    demo, local = Wildcards(model="demo"), Wildcards(model="local")
    assert [jobs.attempt_batch_size(demo, a) for a in (1, 2, 3, 4, 5)] == [8, 4, 2, 1, 1]
    assert [jobs.attempt_batch_tokens(local, a) for a in (1, 2)] == [12_000, 6_000]
    assert jobs.attempt_batch_tokens(demo, 3) == 0  # no token budget stays none
    assert (jobs.gpu_count(local), jobs.gpu_count(demo)) == (1, 0)


def _models_run(models: dict) -> RunConfig:
    """A run of one panel scored by every one of `models`."""
    dataset = {"panel": "p.vcf", "reference": "r.fa", "build": "hg38", "recipe": "centered"}
    dataset["models"] = list(models)
    return RunConfig.from_dict({"models": models, "datasets": {"d": dataset}})


def test_model_jobs_ask_for_host_memory_from_their_weights(tmp_path):
    """A Hub id named for a Carbon size gets that size's arithmetic; a local folder its own
    config.json's shape; the demo model, not built when the plan is made, the demo model's
    shape (its 40 MB of float32 weights and the reserve, as once it is built); every model rule
    gets the same resources, a NIAH job its own time limit."""
    run = _run(tmp_path)
    models = {
        "c8": {
            "path": "org/Carbon-8B",
            "revision": "c" * 40,
            "device": "cuda",
            "dtype": "bfloat16",
        },
        "c3": {
            "path": "org/Carbon-3B",
            "revision": "c" * 40,
            "device": "cuda",
            "dtype": "bfloat16",
        },
        "demo": {"path": str(tmp_path / "demo_model"), "build_demo": True},
    }
    jobs = Jobs(_models_run(models))
    memory = {key: jobs.host_memory_mb(Wildcards(model=key)) for key in models}
    assert memory == {"c8": 20_000, "c3": 11_000, "demo": 5_000}
    local = tmp_path / "carbon_like"
    local.mkdir()
    (local / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 3072,
                "intermediate_size": 8448,
                "num_hidden_layers": 30,
                "num_attention_heads": 32,
                "num_key_value_heads": 4,
                "head_dim": 96,
                "vocab_size": 155_776,
            }
        )
    )
    run = _models_run({"l": {"path": str(local), "dtype": "bfloat16"}})
    assert Jobs(run).host_memory_mb(Wildcards(model="l")) == 11_000
    scoring = jobs.model_resources()
    assert scoring["mem_mb"] == jobs.host_memory_mb and scoring["runtime"] == 120
    assert scoring["gpu"] == jobs.gpu_count
    niah = jobs.model_resources(generation=True, runtime=jobs.niah_runtime)
    assert niah["gpu"] == jobs.generation_gpu_count and niah["runtime"] == jobs.niah_runtime


def test_model_sources_are_the_demo_dir_the_hub_record_or_every_visible_file(tmp_path):
    jobs = Jobs(_run(tmp_path))
    assert jobs.model_sources(Wildcards(model="demo")) == [str(tmp_path / "demo_model")]
    assert jobs.model_sources(Wildcards(model="hub")) == ["out/hub/hub.json"]
    local = tmp_path / "local_model"
    assert jobs.model_sources(Wildcards(model="local")) == [
        str(local / "config.json"),
        str(local / "sub/weights.bin"),
    ]
    assert jobs.model_files(Wildcards(model="hub")) == ["out/inputs/model_hub.json"]
    assert sorted(jobs.hub_models) == ["hub"]


def test_pins_are_the_configs_hashes_of_exactly_these_files(tmp_path):
    jobs = Jobs(_run(tmp_path))
    assert json.loads(shlex.split(jobs.pins(["p.vcf", "r.fa"]))[0]) == {"p.vcf": "1" * 64}
    model_pins = json.loads(shlex.split(jobs.model_pins(Wildcards(model="local")))[0])
    assert model_pins == {f"{tmp_path}/local_model/config.json": "2" * 64}
    args = shlex.split(jobs.model_source_args(Wildcards(model="hub")))
    assert args == ["--model", "org/model", "--revision", "a" * 40]


def test_settings_leave_the_batch_sizes_to_the_resources_and_provenance_names_the_settings(
    tmp_path,
):
    jobs = Jobs(_run(tmp_path))
    wc = Wildcards(dataset="d1", model="local")
    settings = json.loads(shlex.split(jobs.scoring_settings(wc))[0])
    assert settings["path"].endswith("local_model") and settings["recipe"] == "centered"
    assert not {"batch_size", "batch_tokens", "build_demo"} & set(settings)
    provenance = json.loads(shlex.split(jobs.dataset_provenance(wc))[0])
    assert provenance["dataset"] == "d1" and "config_sha256" not in provenance
    # the hash of the job's own settings: it changes with them and with nothing else
    digest = hashlib.sha256(shlex.split(jobs.scoring_settings(wc))[0].encode()).hexdigest()
    assert provenance["settings_sha256"] == digest[:16]
    scan = json.loads(shlex.split(jobs.scan_provenance(Wildcards(scan="g", model="demo")))[0])
    assert (scan["scan"], scan["tile_bp"], scan["model"]) == (
        "g",
        49_146,
        str(tmp_path / "demo_model"),
    )
    assert shlex.split(jobs.scan_regions(Wildcards(scan="g"))) == ["chr1", "x y.bed"]
    assert jobs.lookup_scan_dir(Wildcards(dataset="d2", model="demo")) == "out/scans/g/demo"


def test_metric_settings_reach_the_merges_and_metrics_never_a_model_job(tmp_path):
    """What decides only the metrics (the bootstrap, a panel's headline metrics, breakdowns and
    Spearman column) is in no model job's settings or provenance, the params Snakemake reruns a
    job for: score_shard, score_recovery, score_perturbation and score_niah get the same
    strings whatever their values, their own metrics point estimates (bootstrap 0). The merges
    and compute_metrics get them."""
    tasks = {
        "r": {"kind": "sequence_recovery", "path": "r.tsv", "models": ["local"]},
        "p": {"kind": "perturbation", "path": "p.tsv", "models": ["local"]},
    }
    niah = {"n": {"contexts": [1024], "tasks": ["niah"], "rows": 4, "rows_per_job": 2}}
    metric_only = {
        "headline_metrics": ["auroc", "average_precision"],
        "breakdown_columns": ["region"],
        "spearman_column": "functional_score",
    }
    before, after = (
        Jobs(_run(tmp_path, d1=d1, tasks=tasks, niah=niah, bootstrap=bootstrap))
        for bootstrap, d1 in ((1000, {}), (7, metric_only))
    )
    task_jobs = [Wildcards(task=task, model="local", point="") for task in tasks]
    niah_job = Wildcards(niah="n", cell="niah_1k", model="local")
    panel = Wildcards(dataset="d1", model="local")
    model_jobs = [(Jobs.task_settings, wc) for wc in task_jobs]
    model_jobs += [(Jobs.task_provenance, wc) for wc in task_jobs]
    model_jobs += [(Jobs.niah_settings, niah_job), (Jobs.niah_provenance, niah_job)]
    model_jobs += [(Jobs.scoring_settings, panel), (Jobs.dataset_provenance, panel)]
    for method, wc in model_jobs:
        assert method(before, wc) == method(after, wc), method.__name__
    for wc in [*task_jobs, niah_job]:
        settings = after.niah_settings(wc) if wc is niah_job else after.task_settings(wc)
        assert json.loads(shlex.split(settings)[0])["bootstrap"] == 0  # point estimates
    for wc in task_jobs:
        merges = [json.loads(shlex.split(j.task_merge_settings(wc))[0]) for j in (before, after)]
        assert [merge["bootstrap"] for merge in merges] == [1000, 7]
    metrics = [j.dataset_settings("labels", "metrics")(panel) for j in (before, after)]
    assert [json.loads(shlex.split(m)[0])["bootstrap"] for m in metrics] == [1000, 7]
    assert json.loads(shlex.split(metrics[1])[0])["breakdown_columns"] == ["region"]


def test_niah_jobs_cover_every_row_once(tmp_path):
    niah = {"n": {"contexts": [1024], "tasks": ["niah"], "rows": 250, "rows_per_job": 100}}
    jobs = Jobs(_run(tmp_path, niah=niah), niah_gpu="A10")
    wc = {"niah": "n", "cell": "niah_1k", "model": "local"}
    rows = [jobs.niah_rows(Wildcards(**wc, part=f"{i:05d}")) for i in range(3)]
    assert rows == [f"{a}:{b} --cell-task niah" for a, b in ((0, 100), (100, 200), (200, 250))]
    parts = jobs.niah_parts(Wildcards(**wc))
    assert parts == [f"out/suite/niah/n/niah_1k/local/parts/rows_{i:05d}.parquet" for i in range(3)]
    assert jobs.niah_runtime(Wildcards(**wc, part="00000")) >= 1


def test_scan_inputs_follow_the_plan_and_a_rewritten_plan_is_read_again(tmp_path):
    plan = {
        "chunks": [{}, {}, {}],
        "files": [{"name": "chr1", "chunks": [0, 1]}, {"name": "small+2", "chunks": [2]}],
    }
    scans = ScanInputs(_run(tmp_path))
    wc = Wildcards(scan="g", model="demo", file="small+2")
    assert scans.file_chunks(wc, plan) == ["out/scans/g/demo/chunks/chunk_00002.parquet"]
    assert len(scans.chunk_stats(wc, plan)) == 3
    assert scans.output_files(wc, plan, "tsv") == [
        "out/scans/g/demo/snvs/chr1.tsv.gz",
        "out/scans/g/demo/snvs/small+2.tsv.gz",
    ]
    # the index the plan names (summarize_scan asks for it); a plan from before it: a .tbi
    plan["files"][0]["index"] = "csi"
    assert scans.output_files(wc, plan, "index") == [
        "out/scans/g/demo/snvs/chr1.tsv.gz.csi",
        "out/scans/g/demo/snvs/small+2.tsv.gz.tbi",
    ]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    assert read_plan(str(path)) == plan
    time.sleep(0.01)
    path.write_text(json.dumps({"chunks": [], "files": []}))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert read_plan(str(path)) == {"chunks": [], "files": []}
    assert "not planned yet" in scans.plan_notes()[0]


def test_the_digests_keep_the_values_finished_runs_record():
    """Both digests are in params (rerun triggers) and settings_sha256 in results' provenance:
    the values the code gave before the two helpers shared one home, pinned, so a change of
    either text form (separators, key order, length) fails here, not as a rescan."""
    # a --settings as spec_json writes it: sorted keys, json's default separators, shell-quoted
    text = '{"dtype": "float32", "min_context": 24000, "path": "models/a b", "tile_bp": 49146}'
    assert settings_sha256(shlex.quote(text)) == "1a5d50cf1517d784"
    entry = {"name": "small+2", "contigs": ["chrUn_1", "chrUn_2"], "scored_bp": 600, "chunks": [2]}
    assert fingerprint(entry) == "8c7093245d9e85e0"
    assert fingerprint(dict(reversed(entry.items()))) == "8c7093245d9e85e0"  # canonical: any order
    chunk = {"tile_bp": 49_146, "min_context": 24_000, "pieces": [["chr1", 0, 1000]]}
    assert fingerprint(chunk) == "2882ee0090ffe7d8"


@pytest.mark.parametrize("kind", ["parquet", "counts", "tsv", "index"])
def test_every_output_kind_has_one_file_per_plan_file(tmp_path, kind):
    plan = {"chunks": [{}], "files": [{"name": "a", "chunks": [0]}, {"name": "b", "chunks": [0]}]}
    files = ScanInputs(_run(tmp_path)).output_files(Wildcards(scan="g", model="demo"), plan, kind)
    assert len(set(files)) == 2


def test_vllm_jobs_run_in_the_vllm_environment_on_tensor_parallel_gpus(tmp_path):
    models = {
        "v": {
            "path": "org/m",
            "revision": "b" * 40,
            "device": "cuda",
            "engine": "vllm",
            "tensor_parallel_size": 2,
        },
        "t": {"path": "org/m", "revision": "b" * 40, "device": "cuda"},
    }
    niah = {"n": {"contexts": [1024], "tasks": ["niah"], "rows": 2}}
    run = RunConfig.from_dict({"models": models, "niah": niah, "vllm_env": "/opt/venv-vllm"})
    jobs = Jobs(run, workflow_root="/wf")
    v, t = Wildcards(model="v"), Wildcards(model="t")
    assert jobs.generation_command(v) == "/opt/venv-vllm/bin/carbon-vep"
    assert jobs.generation_command(t) == "carbon-vep"
    assert (jobs.generation_gpu_count(v), jobs.generation_gpu_count(t), jobs.gpu_count(v)) == (
        2,
        1,
        1,
    )
    relative = Jobs(RunConfig.from_dict({"models": models, "niah": niah}), "A10", "/wf")
    assert relative.generation_command(v) == "/wf/.venv-vllm/bin/carbon-vep"
    generation = json.loads(shlex.split(jobs.model_settings(v, generation=True))[0])
    assert generation["engine"] == "vllm" and generation["tensor_parallel_size"] == 2
    assert "vllm_env" not in generation
    scoring = json.loads(shlex.split(jobs.model_settings(v))[0])
    assert not {"engine", "tensor_parallel_size", "prefix_caching"} & set(scoring)


RULES = Path(__file__).resolve().parents[2] / "workflow" / "rules"


def test_every_path_a_rule_names_is_one_distinct_run_paths_pattern():
    """The rules name no output or log path of their own (no f-string under the outdir or
    logs/), and the RunPaths patterns they name are distinct."""
    sources = {rule.name: rule.read_text() for rule in RULES.glob("*.smk")}
    for name, text in sources.items():
        assert not re.search(r"OUTDIR|LOG_DIR|[\"']logs/", text), name
    named = set(re.findall(r"PATHS\.(\w+)", "\n".join(sources.values())))
    named -= {"job_log", "log", "outdir"}
    assert {"shard_scores", "scan_chunk", "niah_part_rows", "task_part_predictions"} <= named
    paths = RunPaths("out")
    patterns = []
    for name in sorted(named):
        value = getattr(paths, name)
        patterns += value if isinstance(value, list) else [value]
    assert len(patterns) == len(set(patterns))


def test_run_paths_format_to_the_paths_the_rules_always_wrote():
    paths = RunPaths("out")
    shard = {"dataset": "d", "model": "m", "shard": "00001"}
    assert paths.shard_scores.format(**shard) == "out/d/m/shard_scores/shard_00001.parquet"
    assert paths.shard.format(**shard) == "out/d/shards/shard_00001.parquet"
    score_log = paths.job_log(paths.dataset_model_dir, "score_shard_{shard}")
    assert score_log.format(**shard) == "logs/out/d/m/score_shard_00001.log"
    absolute = RunPaths("/abs/out")
    assert (
        absolute.job_log(absolute.dataset_model_dir, "score_shard_{shard}").format(**shard)
        == "logs/abs/out/d/m/score_shard_00001.log"
    )
    assert paths.job_log(paths.outdir, "compare_baseline") == "logs/out/compare_baseline.log"
    assert paths.job_log("", "fetch_hub_x") == "logs/fetch_hub_x.log"
    assert paths.job_log(paths.hub_dir, "{model}.json") == "logs/out/hub/{model}.json.log"
    assert paths.job_log(paths.inputs_dir, "niah_{niah}.{cell}") == (
        "logs/out/inputs/niah_{niah}.{cell}.log"
    )
    assert paths.vcf_export == "out/{dataset}/{model}/results.vcf.gz"  # index: .tbi or .csi
    assert paths.scan_snvs.format(scan="g", model="m", file="chr1") == (
        "out/scans/g/m/snvs/chr1.tsv.gz"
    )
    assert paths.scan_calibration_counts.format(scan="g", model="m", file="chr1") == (
        "out/scans/g/m/calibration/counts/chr1.parquet"
    )
    assert paths.task_predictions == "out/suite/{task}/{model}/predictions.parquet"
    assert paths.niah_part_rows.format(niah="n", cell="c", model="m", part="00000") == (
        "out/suite/niah/n/c/m/parts/rows_00000.parquet"
    )
    assert (paths.results_table_tsv, paths.run_report, paths.baseline_junit) == (
        "out/results_table.tsv",
        "out/report.html",
        "out/baseline_comparison.junit.xml",
    )


def test_scan_inputs_name_the_files_the_scan_rules_write(tmp_path):
    """ScanInputs builds the chunk and output file names of a plan, Jobs a NIAH cell's parts:
    those of RunPaths."""
    plan = {"chunks": [{}], "files": [{"name": "chr1", "chunks": [0], "index": "csi"}]}
    niah = {"n": {"contexts": [1024], "tasks": ["niah"], "rows": 4, "rows_per_job": 2}}
    run, paths = _run(tmp_path, niah=niah), RunPaths("out")
    scans = ScanInputs(run)
    wc = Wildcards(scan="g", model="demo", file="chr1")
    names = {"scan": "g", "model": "demo", "file": "chr1", "chunk": "00000", "index_kind": "csi"}
    assert scans.file_chunks(wc, plan) == [paths.scan_chunk.format(**names)]
    assert scans.chunk_stats(wc, plan) == [paths.scan_chunk_stats.format(**names)]
    for kind, pattern in (
        ("parquet", paths.scan_positions),
        ("tsv", paths.scan_snvs),
        ("index", paths.scan_snvs_index),
        ("counts", paths.scan_calibration_counts),
    ):
        assert scans.output_files(wc, plan, kind) == [pattern.format(**names)]
    jobs = Jobs(run)
    cell = Wildcards(niah="n", cell="niah_1k", model="demo")
    assert jobs.niah_parts(cell) == [
        paths.niah_part_rows.format(niah="n", cell="niah_1k", model="demo", part=part)
        for part in ("00000", "00001")
    ]


def test_a_recovery_jobs_time_limit_follows_its_rollouts(tmp_path):
    """score_recovery's runtime: twice the job's prompts and rollouts (each decode step at no
    less than the host-bound step an H100 measured) plus 10 minutes to load, on the profile's
    class for the rule: a 640-token sweep point of the Hub's 30,000 prompts gets hours where
    the headline gets minutes; a model of unknown shape gets the default two hours, the demo
    model before it is built its own shape's."""
    from carbon_vep.config.workflow import profile_runtime_minutes

    models = {
        "m": {"path": "HuggingFaceBio/Carbon-3B", "revision": "a" * 40, "device": "cuda"},
        "demo": {"path": str(tmp_path / "demo_model"), "build_demo": True},
        "odd": {"path": str(tmp_path / "odd_model")},  # a config.json of no Llama shape
        "built": {"path": str(tmp_path / "built")},  # the demo model once built
    }
    for folder, config in (("odd_model", {"model_type": "odd"}), ("built", DEMO_SHAPE)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config.json").write_text(json.dumps(config))
    tasks = {"t": {"kind": "sequence_recovery", "path": str(tmp_path / "test.parquet")}}
    tasks["t"]["new_tokens"] = [5, 640]
    run = RunConfig.from_dict(
        {"models": {**models, "m": {**models["m"], "batch_tokens": 131_072}}, "tasks": tasks}
    )
    jobs = Jobs(run, recovery_gpu="H100")
    headline = jobs.recovery_runtime(Wildcards(task="t", model="m", point=""))
    (point,) = [p for p in run.sweep_points("t")]
    folder = jobs.paths.sweep_point(point)
    long = jobs.recovery_runtime(Wildcards(task="t", model="m", point=folder))
    batches, steps, step = -(-30_000 // 78), 639, 8192 / 723.7 / 128  # 78 prompts a batch
    assert long >= 10 + 2 * batches * steps * step / 60  # >= 13.3 h
    assert 10 < headline < 60 < 12 * 60 < long
    assert jobs.task_resources("score_recovery")["runtime"] == jobs.recovery_runtime
    assert jobs.task_resources("score_perturbation")["runtime"] == 120
    assert jobs.recovery_runtime(Wildcards(task="t", model="odd", point="")) == 120
    # the demo model, not built yet, at the shape it will have (not two hours, not Carbon-3B's)
    demo = jobs.recovery_runtime(Wildcards(task="t", model="demo", point=""))
    assert demo == jobs.recovery_runtime(Wildcards(task="t", model="built", point="")) != 120
    # the profiles' runtime as the bill reads it: minutes at the first attempt
    for raw, minutes in ((90, 90), ("120 * attempt", 120), ("attempt*30", 30), ("1h30m", 90)):
        assert profile_runtime_minutes({"runtime": raw}) == minutes
    assert profile_runtime_minutes({"runtime": "lambda wc: 3"}) is None
    assert profile_runtime_minutes({}) is None
