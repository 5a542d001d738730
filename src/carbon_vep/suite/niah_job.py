"""One Genomic-NIAH job: a cell's rows (or a range of them) scored on the engine the model names
(`engine: transformers`, ours, or `vllm`), with the published context policy: a cell whose
declared context is within the model's positions runs natively, as the official evaluation runs
it (the few tokens its rows need past them recorded); a declared context past them is refused
unless YaRN extends it (`yarn_factor`, as published for Carbon past 32k tokens); vLLM's
max_model_len is what the cell needs. The job's two times (the engine's start, the scoring)
come back as a record (`JobTimes`) the job writes as JSON beside its outputs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from carbon_vep.config.fields import describe, field_named
from carbon_vep.config.stages import ModelSettings, NiahSettings
from carbon_vep.errors import InputError
from carbon_vep.suite.niah_cells import prompt_tokens, read_cell
from carbon_vep.suite.tasks import JobTimes

log = logging.getLogger("carbon_vep")


@dataclass(frozen=True)
class CellJob:
    """What a job scores: the cell's file, its result name, its task, the rows of this job."""

    path: str
    task: str
    cell_task: str | None = None
    rows: slice = field(default_factory=lambda: slice(None))

    @property
    def where(self) -> str:
        return f"{self.path} ({self.task})"


def score_cell(
    job: CellJob, cell: pl.DataFrame, model: ModelSettings, settings: NiahSettings
) -> tuple[pl.DataFrame, dict[str, Any], JobTimes]:
    """The job's rows, the metrics' parameters and the job's times, on the model's engine."""
    score = _on_vllm if model.engine == "vllm" else _on_transformers
    times = JobTimes(model.engine)
    rows, parameters = score(job, cell, model, settings, times)
    times.done(rows.height)
    return rows, parameters, times


def _on_transformers(job: CellJob, cell, model: ModelSettings, settings: NiahSettings, times):
    from carbon_vep.model.job import engine_for, load_job_model
    from carbon_vep.suite.niah import NiahScorer, score_rows

    loaded = load_job_model(model, job.path, yarn(settings), long_context=True)
    if loaded.vocab.k != 6:
        cell = read_cell(job.path, loaded.vocab.k, job.cell_task)[job.rows]
    limit = _positions(loaded.model.config)
    past = check_positions(cell, loaded.vocab.k, limit, settings, job.path)
    scorer = NiahScorer(engine_for(loaded, model), loaded.tokenizer, settings.prefill_chunk)
    times.ready()
    rows = score_rows(cell, scorer, model.batch_size, model.batch_tokens)
    parameters = {
        "engine": "transformers",
        "yarn_factor": settings.yarn_factor,
        "restricted_to_dna_block": scorer.allowed is not None,
        "prefill_chunk": settings.prefill_chunk,
        "attention": loaded.model.config._attn_implementation,
        "tokens_past_positions": past,
    }
    return rows, parameters


def _on_vllm(job: CellJob, cell, model: ModelSettings, settings: NiahSettings, times):
    """The job's rows through one vLLM engine, started once (suite.niah_vllm)."""
    from carbon_vep.model.job import require_model_here
    from carbon_vep.model.loading import load_tokenizer, yarn_overrides
    from carbon_vep.model.tokens import dna_block_ids
    from carbon_vep.model.vllm import VllmEngine
    from carbon_vep.suite.niah_vllm import VllmNiahScorer, engine_length, score_rows_vllm

    require_model_here(model)
    tokenizer, vocab = load_tokenizer(model)
    if vocab.k != 6:
        cell = read_cell(job.path, vocab.k, job.cell_task)[job.rows]
    extension = yarn(settings)
    overrides = yarn_overrides(model, extension) if extension else None
    limit = overrides["max_position_embeddings"] if overrides else _checkpoint_positions(model)
    past = check_positions(cell, vocab.k, limit, settings, job.path)
    needed = prompt_tokens(cell, vocab.k) if cell.height else 0
    length = engine_length(needed, model.vllm.max_model_len, job.where)
    engine = VllmEngine(model, overrides, length, what=job.where)
    times.ready()
    rows = score_rows_vllm(cell, VllmNiahScorer(engine, tokenizer, vocab))
    parameters = {
        "engine": "vllm",
        "vllm": engine.version,
        "yarn_factor": settings.yarn_factor,
        "restricted_to_dna_block": dna_block_ids(tokenizer, vocab) is not None,
        "prefix_caching": model.vllm.prefix_caching,
        "tensor_parallel_size": model.vllm.tensor_parallel_size,
        "max_model_len": length,
        "kv_cache_tokens": engine.capacity_tokens,
        "prefix_cache": engine.cache_stats,
        "tokens_past_positions": past,
    }
    return rows, parameters


def _positions(config) -> int | None:
    return getattr(config, "max_position_embeddings", None)


def _checkpoint_positions(model: ModelSettings) -> int | None:
    from carbon_vep.model.loading import load_config

    return _positions(load_config(model))


def yarn(settings: NiahSettings):
    """The YaRN extension the settings ask for (a model.loading.Yarn), or None."""
    from carbon_vep.model.loading import Yarn

    if not settings.yarn_factor:
        return None
    return Yarn(settings.yarn_factor, settings.yarn_original_positions, settings.yarn_max_positions)


def check_positions(cell, k: int, limit: int | None, settings: NiahSettings, path: str) -> int:
    """The tokens a row needs past the positions the model may use (0: none), as the official
    evaluation runs a cell: a cell whose declared context (`context_length_tokens`) is within
    the model's native positions runs without YaRN, its few tokens past them (prefix + value)
    warned about and returned for the job's parameters; a declared context beyond them is
    refused without YaRN (saying which setting turns it on) and warned about beyond YaRN's
    reach."""
    needed = prompt_tokens(cell, k) if cell.height else 0
    positions = settings.positions if settings.yarn_factor else limit
    past = max(0, needed - positions) if positions is not None else 0
    if not past:
        return 0
    if settings.yarn_factor:
        log.warning(
            "%s: rows need %d tokens, beyond YaRN x%g of %d positions (%d)",
            path,
            needed,
            settings.yarn_factor,
            settings.yarn_original_positions,
            settings.positions,
        )
        return past
    declared = int(cell["context_length_tokens"].max())
    if declared <= positions:
        log.warning(
            "%s: the cell's context (%d tokens) is within the model's %d positions, as published; "
            "its rows need %d tokens with the prefix and the value, %d past them, run natively "
            "as the official evaluation runs them",
            path,
            declared,
            positions,
            needed,
            past,
        )
        return past
    factor = field_named(NiahSettings, "yarn_factor")
    flag = describe(factor, "4", float)
    raise InputError(
        path,
        f"the cell's context is {declared:,} tokens (its rows need {needed:,} with the prefix "
        f"and the value) but the model has {positions:,} positions; extend the context with "
        f"YaRN ({flag}, as published for Carbon past 32k tokens) or score a shorter context",
    )
