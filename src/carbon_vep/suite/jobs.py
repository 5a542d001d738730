"""Each task kind's job (config.tasks declares the kinds): the task table in, a `TaskRun` out;
and its metrics, from the rows its jobs wrote. `carbon-vep <kind's command>` reads the table
and settings and calls its kind's job here; `carbon-vep <kind's merge command>` joins the jobs'
rows and computes their metrics here, with no model (nothing here imports torch until a job
loads its model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from carbon_vep.config.stages import EvaluationSettings, ModelSettings
from carbon_vep.config.tasks import PERTURBATION, SEQUENCE_RECOVERY
from carbon_vep.suite import perturbation, recovery
from carbon_vep.suite.perturbation import perturbation_metrics, perturbation_task
from carbon_vep.suite.recovery import recovery_metrics
from carbon_vep.suite.recovery_job import recovery_task
from carbon_vep.suite.tasks import TaskRun, require_scorable, task_file

# (table, model, the kind's settings, evaluation, the task file for messages) -> TaskRun
TaskJob = Callable[[pl.DataFrame, ModelSettings, Any, EvaluationSettings, str], TaskRun]

TASK_JOBS: dict[str, TaskJob] = {
    SEQUENCE_RECOVERY.name: recovery_task,
    PERTURBATION.name: perturbation_task,
}

# (the rows of every part, the kind's settings, evaluation) -> the task's metrics JSON
TaskMetrics = Callable[[pl.DataFrame, Any, EvaluationSettings], dict]

TASK_METRICS: dict[str, TaskMetrics] = {
    SEQUENCE_RECOVERY.name: recovery_metrics,
    PERTURBATION.name: perturbation_metrics,
}


# the tokens of the models we score (Carbon's, GENERator's): what a refusal before the model
# loads names; it refuses only a table that no k could score (every row unscorable at k = 1)
K_NAMED = 6


def _refused_before_loading(table: pl.DataFrame, reasons: Callable[[int], list[str]]) -> None:
    if all(reasons(1)):  # a row unscorable at k = 1 is unscorable at every k
        require_scorable(task_file(table), reasons(K_NAMED))


def check_task(kind: str, table: pl.DataFrame, settings: Any) -> None:
    """Stop a task none of whose rows can be scored before its model loads (the job checks
    again with the model's k). Recovery's rows are decided here only where they do not hang
    on k: a rollout of score_bp (fixed_bp), or dataset labels."""
    if kind == PERTURBATION.name:
        _refused_before_loading(table, lambda k: perturbation.row_reasons(table, k))
    elif kind == SEQUENCE_RECOVERY.name and (
        settings.accuracy_mode == "fixed_bp" or settings.label_source == "dataset"
    ):
        _refused_before_loading(table, lambda k: recovery.row_reasons(table, k, settings))
