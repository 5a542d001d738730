"""The suite's tasks other than variant panels: score-recovery and score-perturbation."""

from __future__ import annotations

import argparse

from carbon_vep import atomic
from carbon_vep.cli.common import add_result_args, load_engine, load_model, write_task_result
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import (
    EvaluationSettings,
    ModelSettings,
    PerturbationSettings,
    RecoverySettings,
)


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
    from carbon_vep.suite.recovery import recover, recovery_metrics
    from carbon_vep.suite.tasks import read_task_table

    model, settings, evaluation = from_args(
        args, ModelSettings, RecoverySettings, EvaluationSettings
    )
    table = read_task_table(args.tasks_file, ["sequence", "label"])
    if model.engine == "vllm":
        predictions = _recover_on_vllm(table, model, settings, args.tasks_file)
    else:
        loaded = load_model(model, args.tasks_file)
        draft = load_draft(model, loaded)
        predictions = recover(table, loaded, settings, model.batch_size, model.batch_tokens,
                              draft)  # fmt: skip
    metrics = recovery_metrics(predictions, settings, evaluation)
    if model.draft_model:
        metrics["speculative"] = {"draft_model": model.draft_model, **draft.record()}
    atomic.write_parquet(predictions, args.out)
    write_task_result(metrics, args, ["accuracy"])


def _recover_on_vllm(table, model: ModelSettings, settings: RecoverySettings, where: str):
    """The task's prompts through one vLLM engine (suite.recovery_vllm)."""
    from carbon_vep.cli.common import require_model_here
    from carbon_vep.model.loading import load_tokenizer
    from carbon_vep.model.vllm import VllmEngine
    from carbon_vep.suite.recovery import recover_with
    from carbon_vep.suite.recovery_vllm import check_decoder, vllm_continuations

    check_decoder(settings, where)
    require_model_here(model)
    tokenizer, vocab = load_tokenizer(model)
    tag = int(settings.species_tags)  # a species tag, <dna>, the prompt, the new tokens
    longest = tag + 1 + settings.max_prompt_bp // vocab.k + settings.new_tokens
    engine = VllmEngine(model, max_model_len=model.vllm.max_model_len or longest, what=where)
    generate = vllm_continuations(engine, tokenizer, vocab, settings)
    return recover_with(table, vocab.k, settings, generate, tokenizer)


def add_score_perturbation(sub) -> None:
    _add_task(sub, "score-perturbation", PerturbationSettings, score_perturbation,
              "original_sequence, sequence")  # fmt: skip


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
