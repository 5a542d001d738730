"""The rollouts as recovery jobs (benchmark/generate.py): what `make bench-generate` and the GPU
check's `rollouts` step run. How a job's files are read (its times, record, metrics and
predictions: identical or not to ours alone, the draft's acceptance), the table, and the
projection's arithmetic, and the static-cache and captured jobs against their dynamic twins, on
files written here; then `make bench-generate`'s own run at toy sizes with vLLM's two jobs beside
them where `.venv-vllm` is installed (CI installs it). The GPU step's call on toy product
checkpoints (ours' eight jobs: two with the captured loop, two on the static KV cache) is
asserted on the GPU check's rehearsal, which runs it (tests/test_gpu_check_smoke.py). No timing
is asserted."""

import json

import polars as pl
import pytest

from carbon_vep.benchmark import generate
from carbon_vep.benchmark.gpu.rollouts import markdown
from carbon_vep.benchmark.harness import Measured
from carbon_vep.benchmark.vllm import VLLM_EXE, times_path

NEW = 8


def write_job(
    folder, key, predictions, score_s, speculative=None, gpu_bytes=None, steady=None, how=None
):
    """The files a recovery job writes: predictions, metrics, times, its record."""
    out = folder / f"{key}.parquet"
    pl.DataFrame({"prediction": predictions}).write_parquet(out)
    metrics = {"n_rows": len(predictions), "n_scored": len(predictions)}
    out.with_suffix(".json").write_text(json.dumps(metrics | {"speculative": speculative}))
    times = {"rows": len(predictions), "start_s": 2.0, "score_s": score_s, "engine": "x"}
    if steady:
        times["decode_steps"] = {"median_step_ms": 1.0, "steady_tokens_per_s": steady}
        times["decode_steps"] |= {"captured": how} if how else {}
    times_path(out).write_text(json.dumps(times))
    records = folder / "records" / key
    records.mkdir(parents=True)
    record = {"load_s": 1.5} | ({"gpu_peak_reserved_bytes": gpu_bytes} if gpu_bytes else {})
    (records / "score-recovery-host-1.json").write_text(json.dumps(record))
    job = generate.read_job(key, out, records, 9.0, 812.4, NEW)
    return job, pl.read_parquet(out)["prediction"].to_list()


def test_a_job_is_read_from_its_files_and_compared_with_ours_alone(tmp_path):
    a, b, c = "ACGTAC" * NEW, "TTTTTT" * NEW, "GGGGGG" * NEW
    drafted = a[:12] + "C" + a[13:]  # leaves ours at its third token
    speculative = {"acceptance_rate": 0.75, "draft_calls": 8, "target_calls": 2}
    runs = {
        "ours": ([a], 0.8, None, None, 12.0),  # 10 tokens/s; 12 at the steady step
        "draft": ([c], 0.2),  # 40 tokens/s: a draft step costs a quarter of a target's
        "ours_drafted": ([drafted], 0.4, speculative, 3e9),
        "ours_batched": ([a, b], 0.4, None, None, 50.0),
        "ours_static": ([a], 1.6, None, None, 36.0),  # a compile: slower over the rollouts
        "ours_batched_static": ([a, drafted], 0.2, None, None, 100.0),
        "ours_captured": ([a], 1.0, None, None, 120.0, {"forward": "compiled", "step": "graph"}),
        "vllm": ([a, b[:-1] + "A"], 0.2),  # the second prompt's last token differs
    }
    jobs, predictions = {}, {}
    for key, args in runs.items():
        jobs[key], predictions[key] = write_job(tmp_path, key, *args)
    assert jobs["ours"]["output_tokens"] == NEW and jobs["ours_batched"]["output_tokens"] == 2 * NEW
    assert jobs["ours"]["tokens_per_s"] == pytest.approx(10) and jobs["ours"]["load_s"] == 1.5
    assert jobs["ours"]["bp_per_s"] == pytest.approx(60) and jobs["ours"]["peak_rss_mb"] == 812
    assert jobs["ours"]["acceptance_rate"] is None and jobs["ours"]["peak_gpu_gb"] is None
    assert jobs["ours_drafted"]["acceptance_rate"] == 0.75
    assert jobs["ours_drafted"]["peak_gpu_gb"] == pytest.approx(3.0)
    result = generate.compare(jobs, predictions, speculative_tokens=5)
    assert result["drafted_identical"] is False and result["drafted_first_difference_token"] == 2
    assert result["batched_first_identical"] is True and result["acceptance_rate"] == 0.75
    vllm = jobs["vllm"]
    assert vllm["compared_with"] == "ours_batched" and vllm["identical"] is False
    assert vllm["differing_prompts"] == 1 and vllm["first_difference_token"] == NEW - 1
    assert jobs["draft"]["identical"] is None  # another model: compared with nothing
    assert jobs["ours_batched"]["compared_with"] == "ours"
    assert jobs["ours_static"]["compared_with"] == "ours" and jobs["ours_static"]["identical"]
    static = result["static_cache"]
    assert static["ours_static"]["speedup_rollouts"] == pytest.approx(0.5)
    assert static["ours_static"]["speedup_steady"] == pytest.approx(3.0)
    twin = static["ours_batched_static"]  # against ours batched, every prompt
    assert twin["compared_with"] == "ours_batched" and twin["identical"] is False
    assert jobs["ours_batched_static"]["differing_prompts"] == 1
    assert twin["speedup_rollouts"] == pytest.approx(2.0) and twin["speedup_steady"] == 2.0
    captured = static["ours_captured"]  # the captured loop: its steady speed-up, what ran
    assert captured["compared_with"] == "ours" and captured["identical"]
    assert captured["speedup_steady"] == pytest.approx(10.0)
    assert captured["captured"] == {"forward": "compiled", "step": "graph"}
    assert jobs["ours"]["steady_tokens_per_s"] == 12.0 and jobs["draft"]["median_step_ms"] is None
    assert result["speedup_measured"] == pytest.approx(2.0)
    assert result["draft_cost_ratio"] == pytest.approx(0.25)
    # (1 - 0.8^6) / (1 - 0.8) tokens a target step over 5 * 0.25 + 1 steps of cost
    assert result["projected_speedup"]["0.8"] == pytest.approx((1 - 0.8**6) / 0.2 / 2.25)
    for job in jobs.values():
        job |= {"label": job["run"], "batch_size": job["rows"]}
    shown = {"target": "t", "draft": "d", "device": "cpu", "dtype": "float32", "prompts": 2}
    shown |= {"prompt_tokens": 4, "new_tokens": NEW, "speculative_tokens": 5}
    failed = {"static_failed": {"ours_static": "carbon-vep ... exited 1:\nInductorError: boom\n"}}
    text = markdown(shown | result | {"vllm_skipped": "no .venv-vllm"} | failed)
    assert "Static KV cache (`ours_static`) failed: InductorError: boom" in text
    assert "no: 1 prompt(s), the first from token 7 (ours_batched)" in text
    assert "| 0.75 |" in text and "vLLM skipped: no .venv-vllm." in text
    assert "| 36.0 |" in text  # the steady rate's column
    assert (
        "Static KV cache (`ours_static`) against `ours`: predictions identical; speed-up 0.50x "
        "over the rollouts, 3.00x at the steady step." in text
    )
    assert (
        "Captured decode steps (`ours_captured`) against `ours`: predictions identical; "
        "speed-up 0.80x over the rollouts, 10.00x at the steady step. Ran: forward compiled; "
        "step graph." in text
    )


def test_projected_speedup_arithmetic():
    # at acceptance 1 a step yields K + 1 tokens; at 0, one token for the whole step's cost
    assert generate.projected_speedup(1.0, 5, 0.2) == pytest.approx(6 / 2)
    assert generate.projected_speedup(0.0, 5, 0.2) == pytest.approx(1 / 2)
    assert generate.projected_speedup(0.5, 1, 0.0) == pytest.approx(1.5)
    assert generate.first_difference("ACGTACTTTTTT", "ACGTACTTTTTA", 6) == 1
    assert generate.first_difference("ACGTAC", "ACGTAC", 6) is None
    assert generate.first_difference(None, "ACGTAC", 6) == 0


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_EXE.exists(), reason="no .venv-vllm (make setup-vllm; CI has it)")
def test_bench_generate_runs_vllms_jobs_beside_ours():
    """`make bench-generate` at toy sizes with vLLM's two jobs and the three of ours they are
    compared with (the rest run on the GPU check's rehearsal): vLLM's greedy picks are ours,
    with the draft too, and its draft's counters are read."""
    jobs = ["ours", "ours_batched", "ours_drafted", "vllm", "vllm_drafted"]
    sizes = ["--prompt-tokens", "20", "--new-tokens", "12", "--prompts", "2"]
    result = generate.main([*sizes, "--jobs", *reversed(jobs)])
    runs = [j["run"] for j in result["jobs"]]
    assert runs == jobs and result["vllm_skipped"] is None
    vllm = {j["run"]: j for j in result["jobs"] if j["engine"] == "vllm"}
    for job in vllm.values():
        assert job["identical"] and job["compared_with"] == "ours_batched"
        assert job["output_tokens"] == 24 and job["tokens_per_s"] > 0
    assert vllm["vllm_drafted"]["speculative"]["draft_tokens"] > 0  # vLLM's counter
    assert 0 <= vllm["vllm_drafted"]["acceptance_rate"] <= 1 and result["drafted_identical"]


def test_the_time_limit_stops_a_job_and_skips_the_rest_keeping_what_ran(tmp_path, monkeypatch):
    """The GPU check's budget: the job running at the limit is stopped (the harness's exit 124),
    the jobs after it are not started, and the jobs before it keep their figures."""
    a = "ACGTAC" * NEW
    started, stopped_at = [], generate.OURS_JOBS[1]

    def fake_run_command(argv, env=None, timeout_s=None, **_):
        key = next(p for p in map(str, argv) if p.endswith(".parquet")).split("/")[-1][:-8]
        started.append((key, timeout_s))
        if key == stopped_at:
            log = "x" * 2000 + "\n12:00:01 INFO compiling the decode step\ntimed out after 9 s"
            raise generate.StepFailed(f"carbon-vep exited 124:\n{log}", generate.TIMED_OUT)
        write_job(tmp_path / "w", key, [a], 0.8)  # what the job writes, read back by rollout_jobs
        return Measured(1.0, 100.0)

    monkeypatch.setattr(generate, "run_command", fake_run_command)
    prompts = generate.random_prompts(2, 4)
    result = generate.rollout_jobs(
        tmp_path / "t", tmp_path / "d", tmp_path / "w", prompts, NEW, {}, time_limit_s=600
    )
    assert [key for key, _ in started] == ["ours", stopped_at]
    assert all(0 < limit <= 600 for _, limit in started)
    assert [j["run"] for j in result["jobs"]] == ["ours"]
    assert result["stopped"][stopped_at].startswith("stopped at the time limit")
    # its log's end is kept, to say where its time went; the jobs never started have none
    kept = result["stopped_logs"][stopped_at]
    assert kept.endswith("compiling the decode step\ntimed out after 9 s")
    assert len(kept) == generate.STOPPED_LOG_CHARS and list(result["stopped_logs"]) == [stopped_at]
    later = generate.OURS_JOBS[2:]
    assert all(result["stopped"][k] == "not started: the time limit was reached" for k in later)
    assert result["speedup_measured"] is None and result["draft_cost_ratio"] is None
    assert result["projected_speedup"] == {} and result["drafted_identical"] is None
    text = markdown(result)
    assert (
        f"`{stopped_at}`: stopped at the time limit" in text
        and "Measured speed-up with the draft: –x" in text
    )


def test_without_a_limit_a_failing_job_still_fails_the_bench(tmp_path, monkeypatch):
    def failing(argv, env=None, timeout_s=None, **_):
        assert timeout_s is None
        raise generate.StepFailed("carbon-vep ... timed out", generate.TIMED_OUT)

    monkeypatch.setattr(generate, "run_command", failing)
    with pytest.raises(generate.StepFailed):
        generate.rollout_jobs(tmp_path / "t", tmp_path / "d", tmp_path / "w", ["ACGTAC"], NEW, {})
