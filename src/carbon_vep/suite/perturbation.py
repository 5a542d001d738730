"""Perturbation pairs: CAG expansion, synonymous codons (docs/suite-conventions.md#recipes).

Each row holds a real `original_sequence` and a perturbed `sequence` of the same length. Both
are scored as in the centered recipe: `<dna>` + the sequence cut to whole k-mers from the right,
mean log-probability per token (full-vocabulary normaliser by default; `dna_block` and the
bp-level FNS score are options, recorded in every row). A pair is correct iff
S(original) > S(perturbed), strictly: ties count as wrong and are counted on their own.

The pairs' checks and metrics need no model and import no torch (merge-perturbation computes
the metrics on a CPU); the model is loaded by the job alone (`perturbation_task`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import polars as pl

from carbon_vep.columns import FAILED_ALONE, Status
from carbon_vep.config.stages import EvaluationSettings, ModelSettings, PerturbationSettings
from carbon_vep.config.tasks import PERTURBATION
from carbon_vep.evaluate.metrics import add_mean_interval, task_metrics
from carbon_vep.model.context import positions_needed
from carbon_vep.model.tokens import non_acgt_count
from carbon_vep.suite.tasks import TaskRun, require_scorable, task_file

if TYPE_CHECKING:
    from carbon_vep.model.engine import Engine


def whole_kmers(seq: str, k: int) -> str:
    """`seq` cut to whole k-mers from the right (seq[:len - len % k]), as the recipes do."""
    return seq[: len(seq) - len(seq) % k]


def _problem(
    original: str | None, perturbed: str | None, k: int, positions: int | None = None
) -> str:
    """A pair's reason not to be scored; `positions`: the model's (None: not known yet)."""
    if not original or not perturbed:
        return "missing original_sequence or sequence"
    if len(original) != len(perturbed):
        return f"lengths differ ({len(original)} vs {len(perturbed)} bp)"
    if len(original) < 2 * k:
        return f"shorter than {2 * k} bp: fewer than two {k}-mer tokens"
    needed = positions_needed(len(original), k)
    if positions is not None and needed > positions:
        return f"longer than the model's context: {needed:,} positions, it supports {positions:,}"
    return ""


def row_reasons(table: pl.DataFrame, k: int) -> list[str]:
    """Each pair's reason not to be scored ("" for a pair to score), no model needed."""
    pairs = table.select(pl.col("original_sequence", "sequence").cast(pl.Utf8)).rows()
    return [_problem(original, perturbed, k) for original, perturbed in pairs]


def score_pairs(
    table: pl.DataFrame, engine: Engine, settings: PerturbationSettings
) -> pl.DataFrame:
    """One row per input pair: both scores, margin, correct / tie, status and reason.

    Identical sequences are scored once. Bases other than ACGT reach the model as `<oov>`
    (as in the published script) and are counted in `non_acgt`. A pair longer than the model's
    positions is `invalid`, never scored at positions the model was not trained on.
    """
    k = engine.k
    rows = table.select(
        "row_id",
        "source",
        pl.col("original_sequence").cast(pl.Utf8).str.to_uppercase(),
        pl.col("sequence").cast(pl.Utf8).str.to_uppercase(),
    ).to_dicts()
    positions = getattr(engine.model.config, "max_position_embeddings", None)
    problems = [_problem(r["original_sequence"], r["sequence"], k, positions) for r in rows]
    require_scorable(task_file(table), problems)
    unique = list(
        dict.fromkeys(
            whole_kmers(r[c], k)
            for r, problem in zip(rows, problems, strict=True)
            if not problem
            for c in ("original_sequence", "sequence")
        )
    )
    values = engine.sequence_scores(unique, settings.scoring, settings.resolved_normalization)
    scores = dict(zip(unique, values, strict=True))
    out = [_pair_record(r, p, scores, k) for r, p in zip(rows, problems, strict=True)]
    return pl.DataFrame(out, infer_schema_length=None).with_columns(
        pl.lit(settings.scoring).alias("scoring"),
        pl.lit(settings.resolved_normalization).alias("normalization"),
    )


def _pair_record(row: dict, problem: str, scores: dict, k: int) -> dict:
    """One pair's output row: invalid with its problem, failed, or both scores and the call."""
    record = {
        "row_id": row["row_id"],
        "source": row["source"],
        "status": Status.INVALID.value,
        "reason": problem,
        "length_bp": len(row["original_sequence"] or ""),
        "non_acgt": None,
        "score_original": None,
        "score_perturbed": None,
        "margin": None,
        "correct": None,
        "tie": None,
    }
    if problem:
        return record
    orig = scores[whole_kmers(row["original_sequence"], k)]
    pert = scores[whole_kmers(row["sequence"], k)]
    record["non_acgt"] = sum(map(non_acgt_count, (row["original_sequence"], row["sequence"])))
    if orig is None or pert is None:
        record.update(status=Status.FAILED.value, reason=FAILED_ALONE)
        return record
    s_orig, s_pert = orig.mean, pert.mean
    record.update(
        status=Status.SCORED.value,
        reason="",
        score_original=s_orig,
        score_perturbed=s_pert,
        margin=s_orig - s_pert,
        correct=s_orig > s_pert,
        tie=s_orig == s_pert,
    )
    return record


def perturbation_metrics(
    pairs: pl.DataFrame,
    settings: PerturbationSettings,
    evaluation: EvaluationSettings | None = None,
) -> dict:
    """Accuracy (ties wrong), tie count, interval, counts, parameters and definitions."""
    evaluation = evaluation or EvaluationSettings()
    scored = pairs.filter(pl.col("status") == Status.SCORED)
    correct = scored["correct"].cast(pl.Float64).to_numpy()
    n_ties = int(scored["tie"].sum()) if scored.height else 0
    result = task_metrics(
        PERTURBATION.name,
        pairs,
        scored,
        n_correct=int(correct.sum()),
        n_ties=n_ties,
        metrics={
            "accuracy": float(correct.mean()) if len(correct) else None,
            "mean_margin": float(scored["margin"].mean()) if scored.height else None,
        },
        definitions=PERTURBATION.definitions(settings),
        parameters={**asdict(settings), "normalization": settings.resolved_normalization},
    )
    add_mean_interval(result, "accuracy", correct, evaluation)
    if n_ties:
        result["warnings"].append(f"{n_ties} pairs tie exactly (identical sequences?)")
    if scored.height and int((scored["non_acgt"] > 0).sum()):
        n = int((scored["non_acgt"] > 0).sum())
        result["warnings"].append(f"{n} pairs contain non-ACGT bases (sent as <oov>)")
    return result


def perturbation_task(
    table: pl.DataFrame,
    model: ModelSettings,
    settings: PerturbationSettings,
    evaluation: EvaluationSettings,
    where: str,
) -> TaskRun:
    """A perturbation job: its pairs scored on the model, and their metrics."""
    from carbon_vep.model.job import load_engine

    pairs = score_pairs(table, load_engine(model, where), settings)
    return TaskRun(pairs, perturbation_metrics(pairs, settings, evaluation))
