"""The GPU check's product step when a job fails: the step fails, names the rule whose job
failed (from the job's own record) and carries Snakemake's tail with the failed job's log.
(The step succeeding, every rule and output, is tested in the CPU rehearsal:
tests/test_gpu_check_smoke.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from carbon_vep.benchmark import known_answer
from carbon_vep.benchmark.gpu import product, product_setup
from carbon_vep.benchmark.gpu.workload import TOY_SHAPES
from carbon_vep.model.tokens import dna_vocab

pytestmark = [pytest.mark.slow, pytest.mark.workflow]


def test_a_failed_job_fails_the_step_with_its_log(tmp_path):
    """A Genomic-NIAH cell of twice the checkpoint's positions with no YaRN: its score_niah job
    refuses it (the context is truly beyond the positions), as a user's misconfigured run
    would."""
    sizes = product_setup.SMOKE_PRODUCT
    tokenizer = known_answer.make_tokenizer(tmp_path)
    vocab = dna_vocab(tokenizer)
    folder = tmp_path / "product"
    cpu = torch.device("cpu")
    models = {
        key: product_setup.checkpoint(tokenizer, vocab, cpu, shape, TOY_SHAPES, folder / key, sizes)
        for key, shape in (
            (product_setup.TARGET, "Carbon-3B"),
            (product_setup.DRAFT, "Carbon-500M"),
        )
    }
    config_path = product_setup.write_config(
        folder, models, product_setup.write_inputs(folder / "inputs", sizes), cpu, sizes
    )
    config = yaml.safe_load(config_path.read_text())
    for entry in ("datasets", "scans", "tasks"):
        config[entry] = {}
    config["niah"] = {"beyond": dict(config["niah"]["native"], contexts=[2 * sizes.positions])}
    config_path.write_text(yaml.safe_dump(config))

    env = product.job_env(folder, sizes)
    done = product.run_workflow(config_path, folder, env, timeout_s=600)
    assert done["returncode"] != 0
    assert "rule score_niah" in done["tail"]
    assert "1,024 tokens" in done["tail"] and "512 positions" in done["tail"]  # the job's log
    records = product.job_records(folder / "jobs")
    [rule] = product.rule_table(records, TOY_SHAPES["Carbon-3B"], peak=1.0)
    assert rule["rule"] == "score_niah" and rule["jobs"] == rule["failed"] == 1


def test_the_official_niah_cells_run_shortest_context_first(tmp_path):
    """By name 128k sorts before 64k; the official approach must reach the 64k cell first, so a
    comparison cut short by its time still has it (the H200 run of 2026-11-28 lost both)."""
    import polars as pl

    from carbon_vep.benchmark.gpu.product_reference import _context

    cells = []
    for name, tokens in (("niah_neardup_d2_128k", 131_072), ("niah_neardup_d2_64k", 65_536)):
        cells.append(tmp_path / f"{name}.parquet")
        pl.DataFrame({"context_length_tokens": [tokens, tokens]}).write_parquet(cells[-1])
    assert sorted(cells) == cells  # the names alone would put 128k first
    assert [c.stem for c in sorted(cells, key=_context)] == [
        "niah_neardup_d2_64k",
        "niah_neardup_d2_128k",
    ]


def test_compiled_rates_leave_out_the_passes_that_compiled():
    """The compiled_layers rerun's rate without the compile: its jobs' tokens and seconds less
    those of the passes that compiled (their `compile_layers` phase), against the product's
    rate after the load of the same part of the work (a rule; a panel job's dataset; a
    Genomic-NIAH job's cell); a part only one run has, and a job that failed, are left out."""
    from carbon_vep.benchmark.gpu.reruns import compiled_rates

    def record(command, tokens, after, compile_s=0.0, compile_tokens=0, out="/r/scan/x"):
        phases = {"compile_layers": compile_s} if compile_s else {}
        counted = {"compile_layers": compile_tokens} if compile_tokens else {}
        return {
            "command": command,
            "out": out,
            "tokens": tokens,
            "after_load_s": after,
            "phases": phases | {"probe": 0.5},
            "phase_tokens": counted,
        }

    cell = "/r/suite/niah/native/niah_neardup_d2_32k/m/parts/rows_00000.parquet"
    # every job's start-up probe takes 0.5 s of its time after the load (left out of both rates)
    product_jobs = [
        record("scan-chunk", 1000, 10.5),
        record("score-shard", 500, 5.5, out="/r/nexttoken/m/shard_scores/shard_00000.parquet"),
        record("score-shard", 900, 1.5, out="/r/centered/m/shard_scores/shard_00000.parquet"),
        record("score-shard", 900, 2.5, out="/r/centered/m/shard_scores/shard_00001.parquet"),
        record("score-niah", 4000, 2.5, out=cell),
        record("score-niah", 9000, 9.5, out=cell.replace("native", "yarn").replace("32", "64")),
    ]
    compiled = [
        record("scan-chunk", 1000, 38.5, compile_s=30.0, compile_tokens=200),
        record("score-shard", 500, 6.5, 2.0, 300, "/s/nexttoken/m/shard_scores/all.parquet"),
        record("score-shard", 1800, 7.5, 5.0, 900, "/s/centered/m/shard_scores/all.parquet"),
        record("score-niah", 4000, 3.5, 1.0, 2000, cell.replace("/r/", "/s/")),
        record("score-shard", 50, 1.0, out="/s/other/m/shard_scores/all.parquet"),  # not asked
        record("scan-chunk", 7, 90.0) | {"succeeded": False},  # a job that failed
    ]
    rows = compiled_rates(product_jobs, compiled, ["nexttoken", "centered"])
    shard, centered, scan, niah = rows  # MODEL_RULES order, then the order jobs come in
    assert [r["rule"] for r in rows] == [
        "score_shard nexttoken",
        "score_shard centered",
        "scan_chunk",
        "score_niah native/niah_neardup_d2_32k",
    ]
    assert scan["compile_s"] == 30.0
    assert scan["product_tokens_per_s"] == 100.0 and scan["tokens_per_s"] == round(1000 / 38.5, 1)
    assert scan["tokens_per_s_without_compile"] == 100.0  # 800 tokens in 8 s
    assert scan["ratio_without_compile"] == 1.0
    assert shard["product_tokens_per_s"] == 100.0 and shard["tokens_per_s_without_compile"] == 50.0
    # 300 of its 500 tokens compiled: its 200 others carry all the job's work outside the
    # passes, so no ratio (run 12's right-end jobs: 67%); at half (centered, NIAH) there is one
    assert shard["compile_token_share"] == 0.6 and "ratio_without_compile" not in shard
    assert centered["compile_token_share"] == 0.5 and centered["ratio_without_compile"] == 0.75
    # both product shards of the centered recipe (two probes) against the rerun's one (one
    # probe): 1800 tokens in 3 s, 900 in 2
    assert centered["product_tokens_per_s"] == 600.0
    assert centered["tokens_per_s_without_compile"] == 450.0
    # the native cell's job only, not the YaRN entry's 64k one
    assert niah["product_tokens_per_s"] == 2000.0 and niah["tokens_per_s_without_compile"] == 1000.0
    assert "pass_ratio" not in shard  # records without their passes' time (before 2026-11-30)

    # with the passes timed, the rates within them carry none of the work outside the passes:
    # 500 tokens in 2 s of passes against the compiled 200 outside its compile in 0.5 s
    timed = [r | {"pass_s": 2.0, "pass_tokens": 500} for r in product_jobs[1:2]]
    ours = [compiled[1] | {"pass_s": 2.5, "pass_tokens": 500}]  # its compile: 2 s, 300 tokens
    [row] = compiled_rates(timed, ours, ["nexttoken"])
    assert row["product_pass_tokens_per_s"] == 250.0
    assert row["pass_tokens_per_s_without_compile"] == 400.0 and row["pass_ratio"] == 1.6
    assert "ratio_without_compile" not in row  # 60% compiled: the job's rate is not compared


def test_a_rerun_that_failed_still_compares_what_its_finished_jobs_wrote(tmp_path, monkeypatch):
    """A rerun stopped by a failed job or by its limit (Snakemake killed) reports the answers of
    the outputs it did write against the product's, and is marked failed; an output it did not
    write is not compared (the product's nexttoken scores here)."""
    import polars as pl

    from carbon_vep.benchmark.gpu import reruns
    from carbon_vep.workflow.paths import RunPaths

    def write_scores(outdir, dataset, shift):
        path = Path(
            RunPaths(str(outdir)).scores.format(dataset=dataset, model=product_setup.TARGET)
        )
        path.parent.mkdir(parents=True)
        pl.DataFrame(
            {
                "chrom": ["chr1"] * 3,
                "pos": [10, 20, 30],
                "ref": ["A"] * 3,
                "alt": ["G"] * 3,
                "status": ["scored"] * 3,
                "score": [0.5 + shift, -1.0, 2.0],
                "ref_ll": [-3.0, -2.0, -1.0],
                "alt_ll": [-3.5, -1.0 + shift, -3.0],
            }
        ).write_parquet(path)

    product_folder = tmp_path / "product"
    product_folder.mkdir()
    base = {
        "outdir": str(product_folder / "results"),
        "models": {product_setup.TARGET: {"path": "m", "dtype": "bfloat16"}},
        "datasets": {
            name: {"models": [product_setup.TARGET]} for name in ("centered", "nexttoken")
        },
        "scans": {},
        "tasks": {},
    }
    (product_folder / "config.yaml").write_text(yaml.safe_dump(base))
    for dataset in ("centered", "nexttoken"):
        write_scores(base["outdir"], dataset, 0.0)

    def stopped_by_its_limit(config, folder, env, timeout_s, overrides, targets, first):
        write_scores(folder / "results", "centered", 0.25)  # the one job that finished
        return {"returncode": 124, "wall_s": timeout_s, "jobs_done": 1, "tail": "killed"}

    monkeypatch.setattr(reruns, "run_workflow", stopped_by_its_limit)
    shapes = {"Carbon-3B": TOY_SHAPES["Carbon-3B"]}
    result = reruns.rerun(
        "precision", product_folder, {}, 60.0, shapes, 1.0, product_setup.SMOKE_PRODUCT
    )
    assert result["failed"] is True
    [compared] = result["differences"]
    assert compared["output"] == "centered" and compared["rows"] == 3
    assert compared["max_abs_difference"] == 0.25
    assert "**failed**" in reruns.markdown_part(result) and "| centered |" in reruns.markdown_part(
        result
    )


def test_the_compiled_rerun_runs_the_niah_cell_before_the_rest(tmp_path, monkeypatch):
    """compiled_layers' Snakemake run is told to make the native NIAH cell's predictions
    first (--prioritize), its YaRN cells dropped; the other reruns prioritise nothing; the
    option goes before --nolock, which ends its list of targets."""
    from carbon_vep.benchmark.gpu import reruns

    product_folder = tmp_path / "product"
    product_folder.mkdir()
    niah = {"tasks": ["neardup_d2"], "contexts": [32768], "models": [product_setup.TARGET]}
    base = {
        "outdir": str(product_folder / "results"),
        "models": {product_setup.TARGET: {"path": "m", "dtype": "bfloat16"}},
        "datasets": {"centered": {"models": [product_setup.TARGET]}},
        "scans": {},
        "niah": {"native": niah, "yarn": dict(niah, contexts=[65536])},
    }
    (product_folder / "config.yaml").write_text(yaml.safe_dump(base))
    calls = []

    def recorded(config, folder, env, timeout_s, overrides, targets, first):
        calls.append((list(targets), list(first)))
        return {"returncode": 124, "wall_s": timeout_s, "jobs_done": 0, "tail": "killed"}

    monkeypatch.setattr(reruns, "run_workflow", recorded)
    shapes = {"Carbon-3B": TOY_SHAPES["Carbon-3B"]}
    for step in ("compiled_layers", "batch_budgets"):
        reruns.rerun(step, product_folder, {}, 60.0, shapes, 1.0, product_setup.SMOKE_PRODUCT)
    (compiled_targets, compiled_first), (budget_targets, budget_first) = calls
    assert len(compiled_first) == 1 and compiled_first[0] in compiled_targets
    assert "/native/niah_neardup_d2_32k/" in compiled_first[0]
    assert budget_first == [] and not any("niah" in t for t in budget_targets)

    argv = []

    class Stopped:
        def __init__(self, args, **kwargs):
            argv.extend(args)

        def wait(self, timeout):
            return 0

    monkeypatch.setattr(product.subprocess, "Popen", Stopped)
    product.run_workflow(tmp_path / "c.yaml", tmp_path, {}, 1.0, (), ["t1", "t2"], compiled_first)
    at = argv.index("--prioritize")
    assert argv[at + 1 : at + 3] == [compiled_first[0], "--nolock"]
    assert argv[-2:] == ["t1", "t2"]


def test_the_share_in_passes_leaves_out_the_probe_and_old_records():
    """The per-rule table's `in passes`: the jobs' pass seconds over their time after the load
    less their probes (what a host-bound job is short of); none where a record lacks them."""
    from carbon_vep.benchmark.gpu.product import _in_passes

    job = {"after_load_s": 3.0, "phases": {"probe": 0.5}, "pass_s": 2.0, "pass_tokens": 9}
    assert _in_passes([job, job | {"after_load_s": 1.5, "pass_s": 0.5}]) == round(2.5 / 3.5, 3)
    assert _in_passes([job, {"after_load_s": 2.0, "phases": {}}]) is None
