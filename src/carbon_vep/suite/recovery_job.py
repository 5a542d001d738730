"""One sequence-recovery job: the task's rows on the engine the model names (`engine:
transformers`, ours, with a draft model when the entry names one; or `vllm`, with vLLM's
draft-model speculative decoding), the draft's record, and the job's times (`JobTimes`: the
engine's start, the rollouts; on ours without a draft also the decode steps' times, the steady
rate apart from one-off costs such as a compile) that benchmarks read. Times stay out of the
metrics JSON, which reruns reproduce (tests/workflow/test_invariance.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import polars as pl

from carbon_vep.config.stages import EvaluationSettings, ModelSettings, RecoverySettings
from carbon_vep.suite.tasks import JobTimes, Part, TaskRun

log = logging.getLogger("carbon_vep")


@dataclass
class RolloutTimes(JobTimes):
    """A recovery job's times, with its decode steps' (suite.rollouts.StepClock.record) when
    timed: the `--times` JSON's `decode_steps`."""

    steps: dict | None = None

    def record(self) -> dict[str, Any]:
        return super().record() | ({"decode_steps": self.steps} if self.steps else {})


def recovery_task(
    table: pl.DataFrame,
    model: ModelSettings,
    settings: RecoverySettings,
    evaluation: EvaluationSettings,
    where: str,
    part: Part | None = None,
) -> TaskRun:
    """A sequence-recovery job (of a `part`'s share of the rows): its predictions, their
    metrics (with the draft's record) and its times."""
    from carbon_vep.suite.recovery import recovery_metrics

    predictions, speculative, times = recover_job(table, model, settings, where, part)
    metrics = recovery_metrics(predictions, settings, evaluation)
    if speculative:
        named = {"draft_model": model.draft_model, "engine": model.engine}
        metrics["speculative"] = {**named, **speculative}
    return TaskRun(predictions, metrics, times)


def recover_job(
    table: pl.DataFrame,
    model: ModelSettings,
    settings: RecoverySettings,
    where: str,
    part: Part | None = None,
) -> tuple[pl.DataFrame, dict | None, RolloutTimes]:
    """The predictions, the draft's record (None without a draft) and the job's times (with
    the decode steps' on ours without a draft)."""
    times = RolloutTimes(model.engine)
    if model.engine == "vllm":
        from carbon_vep.model.job import require_model_here
        from carbon_vep.suite.recovery_vllm import recover_on_vllm

        require_model_here(model)
        if settings.decode_cache != "dynamic":
            log.info(
                "decode_cache %s is ignored on vLLM: vLLM runs its own paged KV cache and "
                "captures its decode steps as CUDA graphs itself",
                settings.decode_cache,
            )
        predictions, speculative = recover_on_vllm(table, model, settings, where, times, part)
    else:
        from carbon_vep.model.drafting import load_draft
        from carbon_vep.model.job import load_job_model
        from carbon_vep.suite.rollouts import StepClock, decode_cache_note, recover

        # LOWER_RIGHT_SDPA: a static cache's decode step reads its keys and values once a
        # step, compiled or not (model.attention)
        loaded = load_job_model(model, where, lower_right=True)
        draft = load_draft(model, loaded)
        log.info(decode_cache_note(settings, loaded.device, draft is not None))
        times.ready()
        batches = (model.batch_size, model.batch_tokens)
        clock = StepClock()
        predictions = recover(table, loaded, settings, *batches, draft, clock, part)
        speculative = draft.record() if draft else None
        for part, how in clock.how.items():  # what the captured loop ran, compiled or not
            log.info("captured decode: %s %s", part, how)
        if (steps := clock.record()) is not None:
            times.steps = {"decode_cache": settings.decode_cache, **steps}
    times.done(predictions.height)
    return predictions, speculative, times
