"""The suite's tasks other than variant panels: one command a task kind (config.tasks:
score-recovery, score-perturbation), each running its kind's job (suite.jobs)."""

from __future__ import annotations

import argparse
from functools import partial

from carbon_vep import atomic
from carbon_vep.cli.common import add_result_args, write_task_result
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import EvaluationSettings, ModelSettings
from carbon_vep.config.tasks import TASK_KINDS, TaskKind


def add_task_commands(sub) -> None:
    for kind in TASK_KINDS.values():
        _add_task(sub, kind)


def _add_task(sub, kind: TaskKind) -> None:
    p = sub.add_parser(kind.command, help=kind.settings.__doc__)
    columns = ", ".join(kind.columns + kind.optional_columns)
    p.add_argument("--tasks-file", required=True, help=f"Parquet/TSV/CSV: {columns}")
    add_flags(p, ModelSettings, kind.settings, EvaluationSettings)
    add_result_args(p)
    p.add_argument("--out", required=True, help="per-row predictions Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    if kind.generation:
        p.add_argument("--times", help="JSON of the job's times (engine start, rollouts)")
    p.set_defaults(func=partial(score_task, kind))


def score_task(kind: TaskKind, args: argparse.Namespace) -> None:
    """A task kind's command: its table (refused before a model loads), its job, its outputs."""
    from carbon_vep.suite.jobs import TASK_JOBS
    from carbon_vep.suite.tasks import read_task_table

    model, settings, evaluation = from_args(args, ModelSettings, kind.settings, EvaluationSettings)
    table = read_task_table(args.tasks_file, kind.columns)
    run = TASK_JOBS[kind.name](table, model, settings, evaluation, args.tasks_file)
    atomic.write_parquet(run.rows, args.out)
    write_task_result(run.metrics, args, [kind.headline])
    if kind.generation and args.times:
        atomic.write_json(run.times.record(), args.times)


COMMANDS = (add_task_commands,)
