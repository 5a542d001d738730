"""Genomic-NIAH in the config: cells from the entry, rows cut into jobs, the memory a cell
needs against the profile's GPU (refused when read), the time limit of a job."""

from __future__ import annotations

from pathlib import Path

import pytest

from carbon_vep.config.fields import ConfigError
from carbon_vep.config.gpus import (
    DEMO_SHAPE,
    NIAH_SHAPES,
    kv_bytes_per_token,
    niah_memory_bytes,
    niah_row_seconds,
)
from carbon_vep.config.run import RunConfig
from carbon_vep.config.schema import json_schema
from carbon_vep.config.stages import ModelSettings
from carbon_vep.config.workflow import check_niah_profile, niah_runtime_minutes
from carbon_vep.estimate.bill import load_run

ROOT = Path(__file__).resolve().parents[2]


def _run(
    niah: dict, device: str = "cuda", path: str = "HuggingFaceBio/Carbon-3B", **extra
) -> RunConfig:
    model = {
        "path": path,
        "device": device,
        "revision": "0" * 40,
        "trust_remote_code": True,
        **extra,
    }
    return RunConfig.from_dict({"models": {"m": model}, "niah": {"cells": niah}})


def test_cells_are_the_hub_configs_and_rows_are_cut_into_jobs():
    entry = _run(
        {
            "tasks": ["niah", "neardup_d4"],
            "contexts": [4096, 65536],
            "rows": 250,
            "rows_per_job": 100,
        }
    ).niah["cells"]
    assert [c.name for c in entry.cells()] == [
        "niah_4k",
        "niah_64k",
        "niah_neardup_d4_4k",
        "niah_neardup_d4_64k",
    ]
    assert entry.row_ranges() == [(0, 100), (100, 200), (200, 250)]
    hub = entry.hub_file(entry.cells()[1], "out.parquet")
    # the card's layout, at the release it declares it in (docs/suite-conventions.md#genomic-niah)
    assert (hub.repo_id, hub.filename, hub.revision) == (
        "HuggingFaceBio/genomic-niah",
        "data/niah_64k/test-*.parquet",
        "f286afed98bc4ce34c5250c558ae97439e30cc4e",
    )


@pytest.mark.parametrize(
    ("niah", "message"),
    [
        ({"tasks": ["niah", "neardup_d3"]}, r"unknown task\(s\) \['neardup_d3'\]"),
        ({"source": "build"}, "source build needs `reference`"),
        ({"reference": "g.fa"}, "applies to source build only"),
    ],
)
def test_bad_entries_are_refused(niah, message):
    with pytest.raises(ConfigError, match=message):
        _run(niah)


def test_kv_cache_arithmetic_is_carbon_3bs():
    # 2 (K, V) x 30 layers x 4 KV heads x 96 dims x 2 bytes
    assert kv_bytes_per_token(NIAH_SHAPES["Carbon-3B"]) == 46_080
    memory = niah_memory_bytes(NIAH_SHAPES["Carbon-3B"], 131072, 8192)
    assert memory["kv_cache"] == 46_080 * 131072  # held once: the continuations take turns
    assert memory["chunk_mask"] == 8192 * 131072  # one bool per (query, key) of a chunk
    two = niah_memory_bytes(NIAH_SHAPES["Carbon-3B"], 131072, 8192, rows=2)
    assert two["kv_cache"] == 2 * memory["kv_cache"]


def test_a_cell_that_cannot_fit_the_profiles_gpu_is_refused_with_its_figure():
    run = _run({"contexts": [4096, 131072]})
    with pytest.raises(
        ConfigError,
        match=r"131,072-token cell of model m \(Carbon-8B\) needs ~42\.2 GB .* an A10",
    ):
        check_niah_profile(
            {"gpu": 1, "gpu_model": "'a10'"},
            _run({"contexts": [131072]}, path="HuggingFaceBio/Carbon-8B"),
        )
    check_niah_profile({"gpu": 1, "gpu_model": "a10"}, run)  # Carbon-3B at 128k: 19.5 GB fits
    check_niah_profile({"gpu": 1, "gpu_model": "h100"}, _run({}, path="org/Carbon-8B"))
    check_niah_profile({}, _run({}, path="org/Carbon-8B"))  # no GPU class named: no check
    check_niah_profile({"gpu_model": "a10"}, _run({}, device="cpu", path="org/Carbon-8B"))


def test_a_vllm_cell_is_checked_against_the_kv_cache_left_by_the_weights():
    """Carbon-8B on one A10: ~3.5 GB of KV cache at utilization 0.9, under one 32k prompt
    (2 MB a 16-token page): refused naming tensor_parallel_size; two A10s hold a 128k row."""
    eight_b = "HuggingFaceBio/Carbon-8B"
    one = _run({"contexts": [32768]}, path=eight_b, engine="vllm")
    refusal = (
        r"32,768-token cell .* on vLLM .* 1 A10\(s\) at gpu_memory_utilization 0.9 "
        r"leave 3.5 GB .* tensor_parallel_size"
    )
    with pytest.raises(ConfigError, match=refusal):
        check_niah_profile({"gpu": 1, "gpu_model": "a10"}, one)
    two = _run({"contexts": [131072]}, path=eight_b, engine="vllm", tensor_parallel_size=2)
    check_niah_profile({"gpu": 2, "gpu_model": "a10"}, two)
    # a transformers model keeps our engine's arithmetic (8B at 32k: ~25.1 GB, over an A10)
    with pytest.raises(ConfigError, match=r"needs ~25\.1 GB"):
        check_niah_profile(
            {"gpu": 1, "gpu_model": "a10"}, _run({"contexts": [32768]}, path=eight_b)
        )
    check_niah_profile(
        {"gpu": 1, "gpu_model": "a10"}, _run({"contexts": [131072]}, engine="vllm")
    )  # 3B: one 128k row fits


def test_job_time_grows_with_the_context_and_the_rows():
    three_b = ModelSettings(path="HuggingFaceBio/Carbon-3B")
    short = niah_runtime_minutes(4096, 100, three_b, "H100")
    long = niah_runtime_minutes(131072, 100, three_b, "H100")
    slow = niah_runtime_minutes(131072, 100, three_b, "A10")
    assert 10 <= short < long < slow
    row_s = niah_row_seconds(NIAH_SHAPES["Carbon-3B"], 131072, "H100")  # ~9.9 s: 3.9 PFLOP
    assert long == int(10 + 3 * 100 * row_s / 60) and 9.5 < row_s < 10.5


def test_a_demo_model_is_checked_and_timed_at_its_own_shape_not_carbon_3bs(tmp_path):
    """A model the run builds (build_demo: its name says no Carbon size) on a GPU: the NIAH
    memory check and a job's time limit take the demo model's shape; a Hub id named for no
    size is still taken as Carbon-3B."""
    demo = ModelSettings(path=str(tmp_path / "demo_model"), build_demo=True)
    unnamed = ModelSettings(path=str(tmp_path / "demo_model"))
    rows_s = 1000 * niah_row_seconds(DEMO_SHAPE, 131072, "A10")
    assert niah_runtime_minutes(131072, 1000, demo, "A10") == int(10 + 3 * rows_s / 60)
    assert niah_runtime_minutes(131072, 1000, unnamed, "A10") > 60 * 24  # as Carbon-3B
    a10 = {"gpu": 1, "gpu_model": "a10"}
    built = {"build_demo": True, "revision": None, "trust_remote_code": True}
    demo_run = _run({"contexts": [262144]}, path=str(tmp_path / "demo_model"), **built)
    check_niah_profile(a10, demo_run)  # its 256k-token cache: ~1 GB
    with pytest.raises(ConfigError, match=r"262,144-token cell of model m \(Carbon-3B\)"):
        check_niah_profile(a10, _run({"contexts": [262144]}))


def test_vllm_pages_rows_and_rate_follow_from_memory_and_the_prefill():
    from carbon_vep.config.gpus import VLLM_PAGE_TOKENS, vllm_niah_plan, weight_bytes

    shape = NIAH_SHAPES["Carbon-3B"]
    a10, h100 = vllm_niah_plan(shape, 32768, "A10"), vllm_niah_plan(shape, 32768, "H100")
    assert a10["page_bytes"] == 46_080 * VLLM_PAGE_TOKENS
    budget = 24.1e9 * 0.9 - weight_bytes(shape) - 3e9
    assert a10["kv_cache_gb"] == pytest.approx(budget / 1e9)
    assert a10["rows_at_once"] == budget // a10["page_bytes"] // (32768 // 16 + 1)
    assert (a10["rows_at_once"], h100["rows_at_once"]) == (7, 44)
    assert a10["rows_per_s"] == pytest.approx(1 / niah_row_seconds(shape, 32768, "A10"))
    longer = vllm_niah_plan(shape, 131072, "A10")
    assert longer["rows_at_once"] == 1 and longer["rows_per_s"] < a10["rows_per_s"] / 3
    two = vllm_niah_plan(shape, 131072, "A10", gpus=2)
    assert two["rows_at_once"] > 2 and two["rows_per_s"] == pytest.approx(2 * longer["rows_per_s"])


def test_prefill_chunk_at_the_top_level_is_every_entrys_default_and_an_entry_wins():
    """`prefill_chunk` is a run default (scope run_default): a profile's `config:` list sets it
    at the top level for its GPU class; an entry that sets its own keeps it. The schema fills
    no default into an entry, or the validator would set 8,192 in each and hide the run's."""
    cells = {"tasks": ["niah"], "contexts": [4096]}
    config = {"models": {"m": {"path": "x"}}, "niah": {"a": cells, "b": {**cells}}}
    assert RunConfig.from_dict(config).niah["a"].niah.prefill_chunk == 8192
    config = {**config, "prefill_chunk": 0}
    config["niah"]["b"] = {**cells, "prefill_chunk": 4096}
    run = RunConfig.from_dict(config)
    assert (run.niah["a"].niah.prefill_chunk, run.niah["b"].niah.prefill_chunk) == (0, 4096)
    schema = json_schema()["properties"]
    assert schema["prefill_chunk"]["default"] == 8192
    assert "default" not in schema["niah"]["additionalProperties"]["properties"]["prefill_chunk"]


@pytest.mark.parametrize("profile, chunk", [("slurm-h100", 0), ("slurm-a10", 8192)])
def test_the_h100_profile_prefills_niah_prompts_whole_and_they_fit(profile, chunk):
    """Measured on an H100: the whole prompt 1.3-1.5x faster than chunks at 128k, Carbon-8B's
    peak 51.4 GB (docs/gpu.md): the published suite's cells still fit its class. The A10
    keeps the chunks (its 24 GB needs them)."""
    run, resources = load_run(str(ROOT / "config/suite.yaml"), str(ROOT / "profiles" / profile))
    assert {entry.niah.prefill_chunk for entry in run.niah.values()} == {chunk}
    if chunk == 0:
        check_niah_profile(resources["score_niah"], run)  # refuses a cell that cannot fit
