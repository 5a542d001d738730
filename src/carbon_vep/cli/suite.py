"""The suite's tasks other than variant panels: two commands a task kind (config.tasks): its
model job (score-recovery, score-perturbation), running its kind's job (suite.jobs; a
generation kind's job may score a part of the rows, `--part`), and its merge (merge-recovery,
merge-perturbation), joining the jobs' rows into the task's table and metrics, with no model."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from carbon_vep import atomic
from carbon_vep.cli.common import add_result_args, fill_result_names, write_task_result
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
    add_result_args(p, defaults="the tasks file's name, extensions left out")
    p.add_argument("--out", required=True, help="per-row predictions Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    if kind.generation:
        p.add_argument("--times", help="JSON of the job's times (engine start, rollouts)")
        p.add_argument(
            "--part",
            type=_part,
            help="I/N: generate only the I-th (0-based) of N equal shares of the rows (a "
            "task entry's `parts`; merge-recovery joins them)",
        )
    p.set_defaults(func=partial(score_task, kind))


def _part(text: str):
    from carbon_vep.suite.tasks import Part

    try:
        return Part.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def score_task(kind: TaskKind, args: argparse.Namespace) -> None:
    """A task kind's command: its table (refused before a model loads), its job, its outputs."""
    from carbon_vep.suite.jobs import TASK_JOBS, check_task
    from carbon_vep.suite.tasks import read_task_table

    model, settings, evaluation = from_args(args, ModelSettings, kind.settings, EvaluationSettings)
    table = read_task_table(args.tasks_file, kind.columns)
    check_task(kind.name, table, settings)  # no row to score: refused before the model loads
    fill_result_names(args, _file_stem(args.tasks_file), model.path)
    part = {"part": args.part} if kind.generation else {}
    run = TASK_JOBS[kind.name](table, model, settings, evaluation, args.tasks_file, **part)
    atomic.write_parquet(run.rows, args.out)
    write_task_result(run.metrics, args, [kind.headline])
    if kind.generation and args.times:
        atomic.write_json(run.times.record(), args.times)


def _file_stem(path: str) -> str:
    """eukaryote_test.tsv.gz -> eukaryote_test"""
    return Path(path).name.split(".")[0]


def add_merge_commands(sub) -> None:
    for kind in TASK_KINDS.values():
        _add_merge(sub, kind)


def _add_merge(sub, kind: TaskKind) -> None:
    p = sub.add_parser(
        kind.merge_command,
        help=f"a {kind.title} task's parts into one table + its metrics (no model)",
    )
    p.add_argument("--tasks-file", required=True, help="the task file the parts were scored from")
    p.add_argument("--parts", nargs="+", required=True, help=f"{kind.command} outputs (Parquet)")
    if kind.generation:
        p.add_argument(
            "--part-metrics", nargs="+", default=[], help="their metrics JSON (the draft's counts)"
        )
    add_flags(p, kind.settings, EvaluationSettings)
    add_result_args(p)
    p.add_argument("--out", required=True, help="per-row predictions Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    p.set_defaults(func=partial(merge_task, kind))


def merge_task(kind: TaskKind, args: argparse.Namespace) -> None:
    """A kind's merge: the parts' rows, checked to cover the task file once, in its order; the
    metrics of the whole with the evaluation's intervals (a draft's counts summed over the
    parts). Reads no model: the workflow's model jobs leave the intervals to it. Of the task
    file only its rows are counted (count_task_rows): the prompts are never read, so memory
    does not grow with them."""
    import json

    import polars as pl

    from carbon_vep.suite.jobs import TASK_METRICS
    from carbon_vep.suite.recovery import merged_speculative
    from carbon_vep.suite.tasks import count_task_rows, merged_parts

    settings, evaluation = from_args(args, kind.settings, EvaluationSettings)
    height = count_task_rows(args.tasks_file, kind.columns)
    rows = merged_parts(args.tasks_file, height, [pl.read_parquet(p) for p in args.parts])
    metrics = TASK_METRICS[kind.name](rows, settings, evaluation)
    part_metrics = getattr(args, "part_metrics", [])
    drafts = [json.loads(Path(m).read_text()).get("speculative") for m in part_metrics]
    if drafts and all(drafts):
        metrics["speculative"] = merged_speculative(drafts)
    atomic.write_parquet(rows, args.out)
    write_task_result(metrics, args, [kind.headline])


COMMANDS = (add_task_commands, add_merge_commands)
