"""The suite's tasks other than variant panels: score-recovery and score-perturbation."""

from __future__ import annotations

import argparse

from carbon_vep import atomic
from carbon_vep.cli.common import add_result_args, write_task_result
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import (
    EvaluationSettings,
    ModelSettings,
    PerturbationSettings,
    RecoverySettings,
)
from carbon_vep.model.job import load_engine


def _add_task(sub, name: str, settings: type, func, columns: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=settings.__doc__)
    p.add_argument("--tasks-file", required=True, help=f"Parquet/TSV/CSV: {columns}")
    add_flags(p, ModelSettings, settings, EvaluationSettings)
    add_result_args(p)
    p.add_argument("--out", required=True, help="per-row predictions Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    p.set_defaults(func=func)
    return p


def add_score_recovery(sub) -> None:
    recovery = _add_task(
        sub, "score-recovery", RecoverySettings, score_recovery, "sequence, label, type"
    )
    recovery.add_argument("--times", help="JSON of the job's times (engine start, rollouts)")


def score_recovery(args: argparse.Namespace) -> None:
    from carbon_vep.suite.recovery import recovery_metrics
    from carbon_vep.suite.recovery_job import recover_job
    from carbon_vep.suite.tasks import read_task_table

    model, settings, evaluation = from_args(
        args, ModelSettings, RecoverySettings, EvaluationSettings
    )
    table = read_task_table(args.tasks_file, ["sequence", "label"])
    predictions, speculative, times = recover_job(table, model, settings, args.tasks_file)
    metrics = recovery_metrics(predictions, settings, evaluation)
    if speculative:
        named = {"draft_model": model.draft_model, "engine": model.engine}
        metrics["speculative"] = {**named, **speculative}
    atomic.write_parquet(predictions, args.out)
    write_task_result(metrics, args, ["accuracy"])
    if args.times:
        atomic.write_json(times.record(), args.times)


def add_score_perturbation(sub) -> None:
    _add_task(
        sub,
        "score-perturbation",
        PerturbationSettings,
        score_perturbation,
        "original_sequence, sequence",
    )


def score_perturbation(args: argparse.Namespace) -> None:
    from carbon_vep.suite.perturbation import perturbation_metrics, score_pairs
    from carbon_vep.suite.tasks import read_task_table

    model, settings, evaluation = from_args(
        args, ModelSettings, PerturbationSettings, EvaluationSettings
    )
    table = read_task_table(args.tasks_file, ["original_sequence", "sequence"])
    pairs = score_pairs(table, load_engine(model, args.tasks_file), settings)
    atomic.write_parquet(pairs, args.out)
    write_task_result(perturbation_metrics(pairs, settings, evaluation), args, ["accuracy"])


COMMANDS = (add_score_recovery, add_score_perturbation)
