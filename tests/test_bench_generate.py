"""`make bench-generate`'s engines phase (benchmark/generate_engines.py): the same prompts as
recovery jobs (`carbon-vep score-recovery`) on our engine alone and with a 1-layer draft, and,
where `.venv-vllm` is installed (CI installs it), on vLLM alone and with the same draft (its
draft-model speculative decoding). 40-token greedy rollouts: every job's predictions equal ours
alone (the draft is lossless on both engines), each job's own times and rows are read back, and
a drafted job records its draft's counters. Without vLLM its two jobs are skipped, naming why."""

import json

import polars as pl
import pytest

from carbon_vep.benchmark.generate import random_prompts
from carbon_vep.benchmark.generate_engines import engines_phase, markdown
from carbon_vep.benchmark.vllm import VLLM_EXE, job_times

pytestmark = pytest.mark.slow

PROMPTS, NEW_TOKENS, SPECULATIVE = 2, 40, 3


def test_engines_phase_gives_the_same_rollouts_on_every_engine(tmp_path):
    prompts = random_prompts(PROMPTS, 40, 6)
    result = engines_phase(tmp_path, prompts, NEW_TOKENS, SPECULATIVE)
    runs = ["ours", "ours, drafted"] + (["vLLM", "vLLM, drafted"] if VLLM_EXE.exists() else [])
    assert [job["run"] for job in result["jobs"]] == runs
    for i, job in enumerate(result["jobs"]):
        assert job["output_tokens"] == PROMPTS * NEW_TOKENS
        assert job["rollout_s"] > 0 and job["start_s"] > 0 and job["wall_s"] > job["rollout_s"]
        assert job["tokens_per_s"] == pytest.approx(PROMPTS * NEW_TOKENS / job["rollout_s"])
        # greedy with a draft is lossless, and vLLM's greedy picks are ours
        assert job["identical_to_ours"], job["run"]
        out = tmp_path / f"rollouts_{i}.parquet"
        assert job_times(out)["engine"] == job["engine"] and job_times(out)["rows"] == PROMPTS
        assert pl.read_parquet(out)["prediction"].str.len_chars().min() > 0
        speculative = json.loads(out.with_suffix(".json").read_text()).get("speculative")
        if job["run"].endswith("drafted"):
            assert speculative["engine"] == job["engine"]
            assert speculative["speculative_tokens"] == SPECULATIVE
            assert 0 <= job["acceptance_rate"] <= 1
            assert job["engine"] != "vllm" or speculative["draft_tokens"] > 0  # vLLM's counter
        else:
            assert speculative is None and job["acceptance_rate"] is None
    if VLLM_EXE.exists():
        assert result["vllm_skipped"] is None
    else:
        assert "make setup-vllm" in result["vllm_skipped"] and "vLLM skipped" in markdown(result)
