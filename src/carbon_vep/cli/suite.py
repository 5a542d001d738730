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
from carbon_vep.model.job import load_engine, load_job_model


def _add_task(sub, name: str, settings: type, func, columns: str) -> None:
    p = sub.add_parser(name, help=settings.__doc__)
    p.add_argument("--tasks-file", required=True, help=f"Parquet/TSV/CSV: {columns}")
    add_flags(p, ModelSettings, settings, EvaluationSettings)
    add_result_args(p)
    p.add_argument("--out", required=True, help="per-row predictions Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    p.set_defaults(func=func)


def add_score_recovery(sub) -> None:
    _add_task(sub, "score-recovery", RecoverySettings, score_recovery, "sequence, label, type")


def score_recovery(args: argparse.Namespace) -> None:
    from carbon_vep.model.drafting import load_draft
    from carbon_vep.model.job import require_model_here
    from carbon_vep.suite.recovery import recover, recovery_metrics
    from carbon_vep.suite.tasks import read_task_table

    model, settings, evaluation = from_args(
        args, ModelSettings, RecoverySettings, EvaluationSettings
    )
    table = read_task_table(args.tasks_file, ["sequence", "label"])
    if model.engine == "vllm":
        from carbon_vep.suite.recovery_vllm import recover_on_vllm

        require_model_here(model)
        predictions, speculative = recover_on_vllm(table, model, settings, args.tasks_file)
    else:
        loaded = load_job_model(model, args.tasks_file)
        draft = load_draft(model, loaded)
        batches = (model.batch_size, model.batch_tokens)
        predictions = recover(table, loaded, settings, *batches, draft)
        speculative = draft.record() if draft else None
    metrics = recovery_metrics(predictions, settings, evaluation)
    if speculative:
        named = {"draft_model": model.draft_model, "engine": model.engine}
        metrics["speculative"] = {**named, **speculative}
    atomic.write_parquet(predictions, args.out)
    write_task_result(metrics, args, ["accuracy"])


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
