"""Each task kind's job (config.tasks declares the kinds): the task table in, a `TaskRun` out.
`carbon-vep <kind's command>` reads the table and settings and calls its kind's job here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from carbon_vep.config.stages import EvaluationSettings, ModelSettings
from carbon_vep.config.tasks import PERTURBATION, SEQUENCE_RECOVERY
from carbon_vep.suite.perturbation import perturbation_task
from carbon_vep.suite.recovery_job import recovery_task
from carbon_vep.suite.tasks import TaskRun

# (table, model, the kind's settings, evaluation, the task file for messages) -> TaskRun
TaskJob = Callable[[pl.DataFrame, ModelSettings, Any, EvaluationSettings, str], TaskRun]

TASK_JOBS: dict[str, TaskJob] = {
    SEQUENCE_RECOVERY.name: recovery_task,
    PERTURBATION.name: perturbation_task,
}
