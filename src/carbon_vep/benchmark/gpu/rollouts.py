"""The GPU check's `rollouts` step: long greedy rollouts as the product's recovery jobs, on the
product step's checkpoints (a Carbon-3B-shaped target, a Carbon-500M-shaped draft, both random
weights): ours at batch 1, the draft alone, ours with the draft, ours batched, each a
`carbon-vep score-recovery` job (benchmark/generate.py runs and reads them; docs/generation.md
reads the numbers). With random weights the acceptance is that of two unrelated models: the
speed-up at a real draft's acceptance is the arithmetic beside it, from the jobs' step times."""

from __future__ import annotations

from pathlib import Path

from carbon_vep.benchmark import generate
from carbon_vep.benchmark.gpu.workload import Sizes


def rollouts(
    target: Path,
    draft: Path,
    work: Path,
    sizes: Sizes,
    env: dict[str, str],
    device_type: str,
    time_limit_s: float | None = None,
) -> dict:
    """The jobs on `device_type` (cuda: bfloat16, as the checkpoints are; cpu: float32), in
    `env` (product.job_env: `carbon-vep` on PATH, offline), their files under `work`, within
    `time_limit_s` (a job running at the limit is stopped, the rest not started)."""
    prompts = generate.random_prompts(sizes.rollout_batch, sizes.rollout_prompt_tokens)
    return generate.rollout_jobs(
        target,
        draft,
        work,
        prompts,
        sizes.rollout_new_tokens,
        env,
        device=device_type,
        dtype="bfloat16" if device_type == "cuda" else "float32",
        time_limit_s=time_limit_s,
    )


def markdown(result: dict) -> str:
    return generate.markdown(result)
