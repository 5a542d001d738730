"""`make bench-generate`'s engines phase (benchmark/generate_engines.py) without vLLM: the same
prompts as recovery jobs on our engine alone and with the draft, each job's own times read
back, the draft's acceptance recorded, the predictions compared, vLLM's skip named. (vLLM with
and without the draft on the same kind of job: tests/suite/test_vllm.py.)"""

import pytest

from carbon_vep.benchmark.generate import random_prompts
from carbon_vep.benchmark.generate_engines import engines_phase, markdown

pytestmark = pytest.mark.slow


def test_engines_phase_without_vllm(tmp_path):
    prompts = random_prompts(2, 40, 6)
    result = engines_phase(tmp_path, prompts, 12, 3, vllm_exe=tmp_path / "no-vllm")
    ours, drafted = result["jobs"]
    assert (ours["run"], drafted["run"]) == ("ours", "ours, drafted")
    assert ours["output_tokens"] == drafted["output_tokens"] == 2 * 12
    for job in (ours, drafted):
        assert job["rollout_s"] > 0 and job["start_s"] > 0 and job["wall_s"] > job["rollout_s"]
        assert job["tokens_per_s"] == pytest.approx(24 / job["rollout_s"])
    assert ours["acceptance_rate"] is None and 0 <= drafted["acceptance_rate"] <= 1
    # greedy with a draft is lossless: the same continuations as the target alone
    assert ours["identical_to_ours"] and drafted["identical_to_ours"]
    assert "no-vllm" in result["vllm_skipped"] and "vLLM skipped" in markdown(result)
