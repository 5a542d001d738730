"""One sequence-recovery job: the task's rows on the engine the model names (`engine:
transformers`, ours, with a draft model when the entry names one; or `vllm`, with vLLM's
draft-model speculative decoding), the draft's record, and the job's times (`JobTimes`: the
engine's start, the rollouts) that benchmarks read."""

from __future__ import annotations

import polars as pl

from carbon_vep.config.stages import EvaluationSettings, ModelSettings, RecoverySettings
from carbon_vep.suite.tasks import JobTimes, TaskRun


def recovery_task(
    table: pl.DataFrame,
    model: ModelSettings,
    settings: RecoverySettings,
    evaluation: EvaluationSettings,
    where: str,
) -> TaskRun:
    """A sequence-recovery job: its predictions, their metrics (with the draft's record) and
    its times."""
    from carbon_vep.suite.recovery import recovery_metrics

    predictions, speculative, times = recover_job(table, model, settings, where)
    metrics = recovery_metrics(predictions, settings, evaluation)
    if speculative:
        named = {"draft_model": model.draft_model, "engine": model.engine}
        metrics["speculative"] = {**named, **speculative}
    return TaskRun(predictions, metrics, times)


def recover_job(
    table: pl.DataFrame, model: ModelSettings, settings: RecoverySettings, where: str
) -> tuple[pl.DataFrame, dict | None, JobTimes]:
    """The predictions, the draft's record (None without a draft) and the job's times."""
    times = JobTimes(model.engine)
    if model.engine == "vllm":
        from carbon_vep.model.job import require_model_here
        from carbon_vep.suite.recovery_vllm import recover_on_vllm

        require_model_here(model)
        predictions, speculative = recover_on_vllm(table, model, settings, where, times)
    else:
        from carbon_vep.model.drafting import load_draft
        from carbon_vep.model.job import load_job_model
        from carbon_vep.suite.recovery import recover

        loaded = load_job_model(model, where)
        draft = load_draft(model, loaded)
        times.ready()
        batches = (model.batch_size, model.batch_tokens)
        predictions = recover(table, loaded, settings, *batches, draft)
        speculative = draft.record() if draft else None
    times.done(predictions.height)
    return predictions, speculative, times
