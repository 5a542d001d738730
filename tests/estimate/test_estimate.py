"""The bill before the run (`carbon-vep estimate`, `snakemake -n`): the files to fetch with their
revisions, the jobs per rule, and GPU-hours that are the package's own arithmetic on the GPU
class the profile gives each rule."""

from __future__ import annotations

import math

import polars as pl
import pytest
import yaml
from support.cluster import ROOT, run_snakemake

from carbon_vep.cli import main
from carbon_vep.config.fields import ConfigError
from carbon_vep.config.gpus import (
    CARBON_SHAPES,
    CARBON_VOCAB,
    DEMO_MODEL,
    DEMO_SHAPE,
    body_parameters,
    model_shape,
    niah_row_seconds,
)
from carbon_vep.config.run import RunConfig
from carbon_vep.config.stages import RecoverySettings
from carbon_vep.config.tasks import TASK_KINDS
from carbon_vep.estimate.bill import estimate, is_dry_run, niah_cell_hours, read_profile
from carbon_vep.estimate.costs import TASK_WORK, job_start_seconds, recovery_work
from carbon_vep.estimate.counts import HUB_COUNTS
from carbon_vep.estimate.table import bill_text, render

COMMIT = "f" * 40
EIGHT_B = "HuggingFaceBio/Carbon-8B"


def _run(niah: dict | None = None, **sections) -> RunConfig:
    models = sections.pop("models", None) or {
        "m": {"path": EIGHT_B, "device": "cuda", "revision": COMMIT, "trust_remote_code": True}
    }
    niah = {"cells": {"tasks": ["niah"], "contexts": [32768], **(niah or {})}}
    return RunConfig.from_dict({"models": models, "niah": niah, **sections})


def _niah_line(run: RunConfig, resources: dict):
    (line,) = [g for g in estimate(run, resources).gpu if g.rule == "score_niah"]
    return line


def test_a_niah_cells_gpu_hours_are_its_rows_at_the_row_arithmetic():
    h100 = {"score_niah": {"gpu_model": "h100"}}
    run = _run({"rows": 500})
    expected = 500 * niah_row_seconds(CARBON_SHAPES["Carbon-8B"], 32768, "H100") / 3600
    assert niah_cell_hours(run.niah["cells"], 32768, CARBON_SHAPES["Carbon-8B"], "H100") == (
        pytest.approx(expected)
    )
    assert _niah_line(run, h100).hours == pytest.approx(expected)
    two = _run({"tasks": ["niah", "neardup_d2"], "rows": 500})  # two cells at that context
    assert _niah_line(two, h100).hours == pytest.approx(2 * expected)
    assert _niah_line(two, h100).items == "2 cells x 500 rows"


def test_no_profile_reckons_on_the_default_class_an_h100_profile_on_h100s():
    run = _run()
    default = _niah_line(run, {})
    assert (default.gpu, default.gpu_label) == ("A10", "A10 (default)")
    resources, overrides = read_profile(str(ROOT / "profiles/slurm-h100"))
    assert overrides["batch_tokens"] == 131072  # the profile's `config:` list, typed
    h100 = _niah_line(run, resources)
    assert (h100.gpu, h100.gpu_label) == ("H100", "H100")
    assert default.hours / h100.hours == pytest.approx(800 / 125)  # the classes' bf16 peaks
    cpu = _run(models={"m": {"path": EIGHT_B, "device": "cpu", "revision": COMMIT}})
    assert _niah_line(cpu, resources).hours is None  # a CPU model holds no GPU


def test_a_gpu_model_the_bill_does_not_know_is_named_not_taken_for_none():
    """A profile asking for L40S GPUs: reckoned on the default class, as the workflow's time
    limits are, but the bill says the profile named one it has no figures for (it used to say
    that the profile named no class)."""
    run = _run()
    resources = {"score_niah": {"gpu_model": "'l40s'"}}
    line = _niah_line(run, resources)
    assert (line.gpu, line.gpu_label) == ("A10", "A10 (default: l40s unknown)")
    assert line.hours == pytest.approx(_niah_line(run, {}).hours)
    text = render(estimate(run, resources))
    assert "the profile names no GPU class" not in text
    assert (
        "GPU 'A10 (default: l40s unknown)': the profile's `gpu_model` names no class the bill "
        "has figures for (A10, A100, H100, H200" in text
    )
    assert "names no class" not in render(estimate(run, {}))


def test_measured_h100_rates_stand_beside_the_arithmetic_only_where_measured():
    three_b = {"m": {"path": "HuggingFaceBio/Carbon-3B", "device": "cuda", "revision": COMMIT}}
    h100 = {"score_niah": {"gpu_model": "h100"}}
    chunked = _run({"contexts": [131072], "rows": 500}, models=three_b)
    assert _niah_line(chunked, h100).measured_h100_hours == pytest.approx(500 * 11.72 / 3600)
    whole = _run({"contexts": [131072], "rows": 500, "prefill_chunk": 0}, models=three_b)
    assert _niah_line(whole, h100).measured_h100_hours == pytest.approx(500 * 8.95 / 3600)
    assert _niah_line(_run(), h100).measured_h100_hours is None  # Carbon-8B at 32k: not measured
    eight_b = _run({"contexts": [131072], "rows": 500})
    assert _niah_line(eight_b, h100).measured_h100_hours == pytest.approx(500 * 17.75 / 3600)


def test_pinned_and_unpinned_revisions_are_shown():
    hub = {"repo_id": "org/data", "filename": "x.parquet", "out": "data/x.parquet"}
    run = _run(
        {"revision": None},
        models={"m": {"path": EIGHT_B, "trust_remote_code": True, "allow_unpinned": True}},
        hub_files={
            "pinned": {**hub, "revision": COMMIT},
            "main": hub,
            "tag": {**hub, "revision": "v1.0"},
        },
    )
    revisions = {f.rule: f.revision for f in estimate(run, {}).fetches}
    assert revisions["fetch_hub_pinned"] == COMMIT
    assert revisions["fetch_hub_main"] == "main (unpinned)"
    assert revisions["fetch_hub_tag"] == "v1.0 (a branch or tag: unpinned)"
    assert revisions["fetch_model m"] == "main (unpinned)"
    assert revisions["fetch_niah_cell cells/niah_32k"] == "main (unpinned)"


def test_score_niah_jobs_are_its_row_ranges():
    run = _run({"rows": 250, "rows_per_job": 100})
    jobs = {j.rule: j.jobs for j in estimate(run, {}).jobs}
    assert jobs["score_niah [cells]"] == len(run.niah["cells"].row_ranges()) == 3
    models = {k: {"path": EIGHT_B, "revision": COMMIT} for k in ("a", "b")}
    wider = _run({"tasks": ["niah", "neardup_d1"], "rows": 250, "rows_per_job": 100}, models=models)
    assert {j.rule: j.jobs for j in estimate(wider, {}).jobs}["score_niah [cells]"] == 2 * 2 * 3


def test_a_local_panel_is_counted_from_its_file_a_hub_one_from_its_documented_count(tmp_path):
    panel = tmp_path / "panel.parquet"
    pl.DataFrame({"chrom": ["1"] * 7, "pos": range(1, 8)}).write_parquet(panel)
    dataset = {"reference": "g.fa", "build": "hg38", "recipe": "nexttoken", "shard_size": 3}
    hub = {
        "repo_id": "HuggingFaceBio/clinvar-vep-final",
        "filename": "coding/clinvar_coding.parquet",
        "out": str(tmp_path / "absent.parquet"),
    }
    run = _run(
        datasets={
            "here": {**dataset, "panel": str(panel)},
            "fetched": {**dataset, "panel": hub["out"]},
        },
        hub_files={"clinvar": hub},
    )
    bill = estimate(run, {})
    jobs = {j.rule: j.jobs for j in bill.jobs}
    assert jobs["score_shard [here]"] == math.ceil(7 / 3)
    documented = HUB_COUNTS[hub["repo_id"], hub["filename"]].rows
    assert jobs["score_shard [fetched]"] == math.ceil(documented / 3)
    items = {g.task: (g.items, g.count_from) for g in bill.gpu}
    assert items["datasets.here (nexttoken)"] == ("7 variants", "the file here")
    assert items["datasets.fetched (nexttoken)"][0] == f"{documented:,} variants"
    # a file the bill cannot read (an empty placeholder, a broken download) never stops it
    panel.write_bytes(b"")
    items = {g.task: g.count_from for g in estimate(run, {}).gpu}
    assert items["datasets.here (nexttoken)"] != "the file here"


def test_a_task_of_every_kind_is_billed_on_its_rule_in_its_unit(tmp_path):
    """Each kind that config.tasks declares has its arithmetic (costs.TASK_WORK): its jobs,
    the GPU its rule gets and its rows' GPU-hours, counted in the kind's unit."""
    assert list(TASK_WORK) == list(TASK_KINDS)
    columns = sorted({c for kind in TASK_KINDS.values() for c in kind.columns})
    table = tmp_path / "task.tsv"
    table.write_text(
        "\t".join(columns) + "\n" + ("\t".join(["ACGTAC" * 20] * len(columns)) + "\n") * 3
    )
    tasks = {name: {"kind": name, "path": str(table)} for name in TASK_KINDS}
    h100 = {kind.rule: {"gpu_model": "h100"} for kind in TASK_KINDS.values()}
    bill = estimate(_run(tasks=tasks), h100)
    jobs, lines = {j.rule: j.jobs for j in bill.jobs}, {g.task: g for g in bill.gpu}
    for name, kind in TASK_KINDS.items():
        line = lines[f"tasks.{name} ({name})"]
        assert jobs[kind.rule] == 1 and (line.rule, line.gpu) == (kind.rule, "H100")
        assert line.items == f"3 {kind.unit}" and line.hours > 0, name


def test_each_sweep_point_is_a_job_a_model_billed_at_its_own_settings(tmp_path):
    """A recovery task sweeping new_tokens and max_prompt_bp: the headline and one job per
    other value and model, each line's work from its own new_tokens / max_prompt_bp."""
    table = tmp_path / "rec.tsv"
    table.write_text("sequence\tlabel\n" + ("ACGTAC" * 200 + "\tACGTAC\n") * 4)
    three_b = {"path": "HuggingFaceBio/Carbon-3B", "device": "cuda", "revision": COMMIT}
    models = {"a": {"path": EIGHT_B, "device": "cuda", "revision": COMMIT}, "b": three_b}
    task = {"kind": "sequence_recovery", "path": str(table)}
    sweep = {**task, "new_tokens": [5, 10, 640], "max_prompt_bp": [6144, 600]}
    run = _run(models=models, tasks={"t": sweep, "plain": {**task, "models": ["a"]}})
    bill = estimate(run, {"score_recovery": {"gpu_model": "h100"}})
    jobs = {j.rule: j for j in bill.jobs}
    assert jobs["score_recovery"].jobs == 2 * (1 + 3) + 1
    assert jobs["score_recovery"].how == "task x model + 6 sweep point x model"
    lines = {(g.task, g.model.split(" ")[0]): g for g in bill.gpu if g.rule == "score_recovery"}
    assert sorted({task for task, _ in lines}) == [
        "tasks.plain (sequence_recovery)",
        "tasks.t (sequence_recovery)",
        "tasks.t (sequence_recovery, max_prompt_bp 600)",
        "tasks.t (sequence_recovery, new_tokens 10)",
        "tasks.t (sequence_recovery, new_tokens 640)",
    ]
    dims = {**CARBON_SHAPES["Carbon-3B"], "vocab_size": CARBON_VOCAB}
    for label, settings in {
        "tasks.t (sequence_recovery)": RecoverySettings(),
        "tasks.t (sequence_recovery, new_tokens 640)": RecoverySettings(new_tokens=640),
        "tasks.t (sequence_recovery, max_prompt_bp 600)": RecoverySettings(max_prompt_bp=600),
    }.items():
        work = recovery_work(
            settings, run.models["b"], dims, 1200
        )  # the longest sequence, 1,200 bp
        line = lines[label, "b"]
        assert line.work == work.what and line.pflop == pytest.approx(4 * work.flops / 1e15)
    assert lines["tasks.t (sequence_recovery, new_tokens 640)", "b"].work.endswith(
        "+ 640 generated, 8 a batch"  # batch_size 8: no batch_tokens, no draft
    )
    assert lines["tasks.t (sequence_recovery, max_prompt_bp 600)", "b"].work.startswith("<= 101-")


def _recovery_bill(tmp_path, model: dict, resources: dict, **settings):
    """The score_recovery lines (by new_tokens) of the Hub's eukaryote file, not fetched yet:
    its documented 30,000 prompts, at most max_prompt_bp (6,144 bp) each."""
    task = {"kind": "sequence_recovery", "path": str(tmp_path / "test.parquet"), **settings}
    run = _run(models={"m": {"revision": COMMIT, "device": "cuda", **model}}, tasks={"t": task})
    bill = estimate(run, resources)
    return {g.work.split(" + ")[1].split(" ")[0]: g for g in bill.gpu if g.rule == "score_recovery"}


def test_a_rollouts_decode_steps_cost_no_less_than_reading_the_weights_and_its_cache(tmp_path):
    """Recovery's arithmetic: the prompt's pass, then new_tokens - 1 one-token steps, each at
    the larger of its FLOPs at 50% of the peak and its reads at the data sheet's bandwidth:
    the weights once a batch (an item's share) and the item's own KV cache. Long rollouts are
    memory-bound, so their hours are the reads', and a smaller batch pays more."""
    three_b = {"path": "HuggingFaceBio/Carbon-3B", "batch_tokens": 131_072}
    h100 = {"score_recovery": {"gpu_model": "h100"}}
    lines = _recovery_bill(tmp_path, three_b, h100, new_tokens=[5, 640])
    dims = {**CARBON_SHAPES["Carbon-3B"], "vocab_size": CARBON_VOCAB}
    prompt, rows = 6144 // 6 + 1, 131_072 // (1025 + 640)  # 1,025 tokens, 78 a batch
    assert lines["640"].work == f"<= {prompt:,}-token prompt + 640 generated, {rows} a batch"
    weights = 2 * (body_parameters(dims) + CARBON_VOCAB * 3072)  # 6.90 GB
    kv = 2 * 2 * 30 * 4 * 96  # bytes a token: 30 layers, 4 KV heads of 96
    steps = 639  # the prompt's pass gives the first new token
    reads = steps * (weights / rows + kv * (prompt + 1 + steps / 2))
    flops = 2 * body_parameters(dims) * prompt + 4 * 32 * 96 * 30 * prompt**2 / 2
    flops += 2 * 3072 * CARBON_VOCAB  # the prompt's one scored position
    prefill = flops / (800e12 * 0.5)
    assert lines["640"].hours == pytest.approx(30_000 * (prefill + reads / 3.35e12) / 3600, 2e-3)
    assert lines["640"].hours > 2 * lines["5"].hours  # the reads, not the FLOPs, decide it
    one_a_batch = _recovery_bill(tmp_path, {**three_b, "batch_tokens": 0, "batch_size": 1}, h100)
    assert one_a_batch["5"].hours > lines["5"].hours  # each step reads all the weights alone
    # a static cache (static, captured) is read whole every step: prompt + 639 slots
    for cache in ("static", "captured"):
        static = _recovery_bill(tmp_path, three_b, h100, new_tokens=[640], decode_cache=cache)
        whole = steps * (weights / rows + kv * (prompt + steps))
        hours = 30_000 * (prefill + whole / 3.35e12) / 3600
        assert static["640"].hours == pytest.approx(hours, 2e-3)


def test_measured_rollouts_pay_each_step_beyond_the_measured_five_tokens(tmp_path):
    """The measured column: the H100's recovery rate (5 new tokens: 4 decode steps in it) for
    the prompts, and each further step at the step measured on the dynamic cache (88.4 ms,
    Carbon-3B) a batch; nothing where the cache or the shape was not measured."""
    three_b = {"path": "HuggingFaceBio/Carbon-3B", "batch_tokens": 131_072}
    h100 = {"score_recovery": {"gpu_model": "h100"}}
    lines = _recovery_bill(tmp_path, three_b, h100, new_tokens=[5, 640])
    rate, step = 47_936, 8192 / 723.7 / 128  # tokens/s at 5 new tokens; s a step at batch 64
    assert lines["5"].measured_h100_hours == pytest.approx(30_000 * 1030 / rate / 3600)
    batches = math.ceil(30_000 / 78)
    expected = 30_000 * 1030 / rate + batches * (639 - 4) * step
    assert lines["640"].measured_h100_hours == pytest.approx(expected / 3600)
    assert 6 < lines["640"].measured_h100_hours < 6.5  # ~16x its arithmetic: host-bound
    static = _recovery_bill(tmp_path, three_b, h100, new_tokens=[5, 640], decode_cache="static")
    assert static["5"].measured_h100_hours == lines["5"].measured_h100_hours
    assert static["640"].measured_h100_hours is None  # not measured on a GPU
    eight_b = _recovery_bill(tmp_path, {**three_b, "path": EIGHT_B}, h100, new_tokens=[5, 640])
    assert eight_b["640"].measured_h100_hours is None


def test_a_recovery_task_in_parts_bills_a_job_a_part_and_a_merge_a_run(tmp_path):
    """`parts: 4` on a task sweeping two points with two models: 4 score_recovery jobs for each
    of its 6 runs (headline and points x models), one merge_recovery job each; each line's
    start-up is 4 jobs', its hours unchanged, a job's share of them a quarter. A perturbation
    task is never cut (refused in parts)."""
    three_b = {"path": "HuggingFaceBio/Carbon-3B", "device": "cuda", "revision": COMMIT}
    models = {"a": three_b, "b": {**three_b, "path": EIGHT_B}}
    task = {"kind": "sequence_recovery", "path": str(tmp_path / "test.parquet")}
    swept = {**task, "new_tokens": [5, 80, 640]}
    whole = estimate(_run(models=models, tasks={"t": swept}), {})
    cut = estimate(_run(models=models, tasks={"t": {**swept, "parts": 4}}), {})
    jobs = {j.rule: j for j in cut.jobs}
    assert jobs["score_recovery"].jobs == 4 * 6 and jobs["merge_recovery"].jobs == 6
    assert jobs["score_recovery"].how.endswith("(x each task's parts)")
    assert {j.rule: j.jobs for j in whole.jobs}["score_recovery"] == 6
    pairs = zip(
        [g for g in whole.gpu if g.rule == "score_recovery"],
        [g for g in cut.gpu if g.rule == "score_recovery"],
        strict=True,
    )
    for one, four in pairs:
        assert (one.jobs, four.jobs) == (1, 4) and four.hours == one.hours
        assert four.startup_hours == pytest.approx(4 * one.startup_hours)
    with pytest.raises(ConfigError, match=r"tasks\.p: parts 2: only a sequence_recovery task"):
        _run(tasks={"p": {"kind": "perturbation", "path": "p.tsv", "parts": 2}})


def test_jobs_longer_than_the_profiles_time_limit_are_said(tmp_path):
    """A line whose job needs longer than the rule's runtime at the first attempt is listed
    (the measured rate on H100s where measured, else the arithmetic, with its start-up); a
    rule the profile gives no runtime is the workflow's to time, and is not checked."""
    three_b = {"path": "HuggingFaceBio/Carbon-3B", "batch_tokens": 131_072}
    limited = {"score_recovery": {"gpu_model": "h100", "runtime": "120 * attempt"}}
    run_lines = _recovery_bill(tmp_path, three_b, limited, new_tokens=[5, 640])
    task = {"kind": "sequence_recovery", "path": str(tmp_path / "test.parquet")}
    run = _run(
        models={"m": {"revision": COMMIT, "device": "cuda", **three_b}},
        tasks={"t": {**task, "new_tokens": [5, 640]}},
    )
    (long,) = estimate(run, limited).long_jobs
    assert long.line == run_lines["640"] and long.basis == "measured rate"
    assert long.limit_minutes == 120
    startup = run_lines["640"].startup_hours
    assert long.hours == pytest.approx(run_lines["640"].measured_h100_hours + startup)
    text = render(estimate(run, limited))
    assert "### Jobs longer than the profile's time limit (1 line(s))" in text
    assert "| 1 | 6.19 h (measured rate) | 120 min |" in text
    for runtime in ("400", "7h"):  # long enough
        assert not estimate(
            run, {"score_recovery": {"gpu_model": "h100", "runtime": runtime}}
        ).long_jobs
    assert not estimate(run, {"score_recovery": {"gpu_model": "h100"}}).long_jobs
    a10 = estimate(run, {"score_recovery": {"gpu_model": "a10", "runtime": 10}}).long_jobs
    assert [j.basis for j in a10] == ["arithmetic", "arithmetic"]  # no rate measured on A10s


def test_each_lines_jobs_pay_the_measured_start_up_of_their_models_shape(tmp_path):
    """Start-up GPU-hours: a line's jobs (its shards, its NIAH row ranges, one a task) x a
    job's measured start (the weights at the measured load rate, so a larger model pays more);
    not priced on a CPU, nor for vLLM's start; a compile is said, not priced; the total row
    sums the column per GPU class."""
    panel = tmp_path / "panel.parquet"
    pl.DataFrame({"chrom": ["1"] * 7, "pos": range(1, 8)}).write_parquet(panel)
    dataset = {"panel": str(panel), "reference": "g.fa", "build": "hg38", "recipe": "nexttoken"}
    three_b = {"path": "HuggingFaceBio/Carbon-3B", "device": "cuda", "revision": COMMIT}
    models = {
        "small": {**three_b, "path": "HuggingFaceBio/Carbon-500M"},
        "big": {**three_b, "path": EIGHT_B, "engine": "vllm"},
        "cpu": {**three_b, "device": "cpu"},
    }
    h100 = {rule: {"gpu_model": "h100"} for rule in ("score_shard", "score_niah")}
    run = _run(
        {"rows": 250, "rows_per_job": 100},
        models=models,
        datasets={"d": {**dataset, "shard_size": 3}},
    )
    lines = {(g.rule, g.model.split(" ")[0]): g for g in estimate(run, h100).gpu}
    small, big = (
        job_start_seconds({**CARBON_SHAPES[n], "vocab_size": CARBON_VOCAB})
        for n in ("Carbon-500M", "Carbon-8B")
    )
    assert 9 < small < big  # the fixed start, then the weights: 1.0 GB against 15.2 GB
    shard = lines["score_shard", "small"]
    assert shard.jobs == math.ceil(7 / 3) == 3
    assert shard.startup_hours == pytest.approx(3 * small / 3600)
    assert shard.startup == f"3 x {small:.1f} s"
    # the panel's jobs run our engine whatever a model's engine (it is a generation setting)
    assert lines["score_shard", "big"].startup_hours == pytest.approx(3 * big / 3600)
    niah = lines["score_niah", "small"]
    assert niah.jobs == 3 and niah.startup_hours == pytest.approx(3 * small / 3600)
    assert lines["score_niah", "big"].startup_hours is None
    assert lines["score_niah", "big"].startup == "vllm's start: not measured"
    assert lines["score_shard", "cpu"].startup_hours is None  # no GPU-hours on a CPU
    compiled = _run(models={"m": three_b}, datasets={"d": dataset}, compile_layers=True)
    [line] = [g for g in estimate(compiled, h100).gpu if g.rule == "score_shard"]
    assert line.startup.endswith("+ each job's compile (not measured on a GPU)")
    table = render(estimate(run, h100))
    total = next(row for row in table.splitlines() if row.startswith("| **total**"))
    summed = (
        6 * small + 3 * big
    )  # 3 shards a GPU model, 3 row ranges of the small one; vLLM: unknown
    assert total.endswith(f"**{summed / 3600:.3g} H100-hours** (1 line(s) unknown) |")


def test_carbon_8b_has_its_own_shape():
    assert model_shape(EIGHT_B, False) == "Carbon-8B"
    assert model_shape("org/Carbon-500M", False) == "Carbon-500M"
    assert model_shape("GenerTeam/GENERator-v2-eukaryote-3b-base", False) == "Carbon-3B"
    assert round(body_parameters(CARBON_SHAPES["Carbon-8B"]) / 1e9, 3) == 6.979


def test_a_demo_model_is_billed_at_the_demo_shape_a_hub_id_at_its_carbon_size(tmp_path):
    """A model the run builds (build_demo; not built yet, and its name says no Carbon size)
    is priced at the shape model.demo builds, not as Carbon-3B; a Hub id beside it keeps the
    Carbon size its name says. Both lines' hours are the row arithmetic on that shape."""
    models = {
        "demo": {"path": str(tmp_path / "demo_model"), "build_demo": True, "device": "cuda"},
        "big": {"path": EIGHT_B, "device": "cuda", "revision": COMMIT},
    }
    run = _run({"contexts": [4096], "rows": 500}, models=models)
    h100 = {"score_niah": {"gpu_model": "h100"}}
    lines = {g.model: g for g in estimate(run, h100).gpu if g.rule == "score_niah"}
    assert set(lines) == {f"demo ({DEMO_MODEL})", "big (Carbon-8B)"}
    for line, dims in (
        (lines[f"demo ({DEMO_MODEL})"], DEMO_SHAPE),
        (lines["big (Carbon-8B)"], CARBON_SHAPES["Carbon-8B"]),
    ):
        assert line.hours == pytest.approx(500 * niah_row_seconds(dims, 4096, "H100") / 3600)
    start = job_start_seconds({**DEMO_SHAPE, "vocab_size": CARBON_VOCAB})
    assert lines[f"demo ({DEMO_MODEL})"].startup == f"5 x {start:.1f} s"  # 100 rows a job


@pytest.mark.parametrize("profile", [None, "profiles/slurm-h100"])
@pytest.mark.parametrize("config", sorted((ROOT / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_is_estimated(config, profile, monkeypatch):
    monkeypatch.chdir(ROOT)  # the configs' relative paths are the repository's
    text = bill_text(str(config), profile)
    assert "### GPU time per task and model" in text and "| **total** |" in text


def test_what_snakemake_would_refuse_under_the_profile_is_said(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"models: {{m: {{path: {EIGHT_B}, device: cuda, revision: '{COMMIT}'}}}}\n"
        "niah: {cells: {tasks: [niah], contexts: [32768]}}\n"
    )
    refused = "**Snakemake refuses this config under this profile**: niah.cells: a 32,768-token"
    assert refused in bill_text(str(config), str(ROOT / "profiles/slurm-a10"))
    assert "refuses" not in bill_text(str(config), str(ROOT / "profiles/slurm-h100"))


def test_the_cli_prints_the_table(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"models: {{m: {{path: {EIGHT_B}, device: cuda, revision: '{COMMIT}'}}}}\n"
        "niah: {cells: {tasks: [niah], contexts: [131072]}}\n"
    )
    assert (
        main(["estimate", "--config", str(config), "--profile", str(ROOT / "profiles/slurm-h100")])
        == 0
    )
    out = capsys.readouterr().out
    assert "## The bill before the run" in out
    assert "| niah.cells 131,072 tokens | m (Carbon-8B) | score_niah: H100 |" in out
    assert "H100-hours**" in out


@pytest.mark.parametrize(
    ("argv", "dry"),
    [
        (["-n"], True),
        (["-np", "--cores", "2"], True),
        (["--dry-run"], True),
        (["--dryrun"], True),
        (["--configfile", "c.yaml", "-nF"], True),
        (["--cores", "2", "-p"], False),
        (["--notemp"], False),
        (["all"], False),
    ],
)
def test_a_dry_run_is_read_from_the_command_line(argv, dry):
    assert is_dry_run(["snakemake", *argv]) is dry


@pytest.mark.workflow
def test_a_dry_run_prints_the_bill_before_its_plan(tmp_path):
    config = ROOT / "config/ci.yaml"
    result = run_snakemake(tmp_path, config, "-n")
    assert result.returncode == 0, result.stderr[-2000:]
    entry = RunConfig.from_dict(yaml.safe_load(config.read_text())).niah["demo_niah"]
    jobs = len(entry.cells()) * len(entry.row_ranges())  # one model
    assert "## The bill before the run" in result.stderr
    assert f"| `score_niah [demo_niah]` | {jobs} |" in result.stderr
    assert "The bill before the run" not in result.stdout  # the plan stays as it was


def test_the_cli_reads_the_config_as_the_workflow_does(tmp_path, caplog):
    config = tmp_path / "c.yaml"
    dataset = (
        f"{{panel: {tmp_path}/nope.tsv, reference: {ROOT}/resources/demo/chr17.hg19.part.fa, "
        "build: hg19, recipe: centered, window_bp: 240}"
    )
    config.write_text(f"models: {{m: {{path: {EIGHT_B}, revision: '{COMMIT}'}}}}\n")
    config.write_text(config.read_text() + f"datasets: {{d: {dataset}}}\n")
    text = bill_text(str(config), None)  # a bill may come before the data: said, not refused
    assert "**Snakemake refuses this config until these inputs are here**" in text
    assert f"- datasets.d.panel: {tmp_path}/nope.tsv\n" in text
    config.write_text(config.read_text().replace("window_bp: 240", "window_bp: '240bp'"))
    assert main(["estimate", "--config", str(config)]) == 2
    assert f"config {config}: datasets.d.window_bp: '240bp' is not of type" in caplog.text
    assert main(["estimate", "--config", str(ROOT / "README.md")]) == 2
    assert "README.md: not YAML at line" in caplog.text


def test_vcf_rows_count_each_alt(tmp_path):
    """A multi-allelic record is one row per ALT in the run, so the bill counts its ALTs (the
    demo panel: 44 records, 56 rows), and a missing ALT is still one row."""
    from carbon_vep.estimate.counts import local_rows

    vcf = tmp_path / "p.vcf"
    vcf.write_text(
        "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
        "1\t10\t.\tA\tC\t.\t.\t.\n1\t20\t.\tA\tC,G,T\t.\t.\t.\n1\t30\t.\tA\t.\t.\t.\t.\n"
    )
    assert local_rows(str(vcf)) == 5
    assert local_rows(str(ROOT / "resources/demo/demo_panel.vcf")) == 56
