"""Genomic-NIAH, the suite's long-context task: build-niah (a cell from any genome), score-niah
(a cell, or a range of its rows, on the model) and merge-niah (a cell's row ranges into one
table and its metrics)."""

from __future__ import annotations

import argparse
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from carbon_vep import atomic
from carbon_vep.cli.common import add_result_args, engine_for, load_model, write_task_result
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import EvaluationSettings, ModelSettings, NiahSettings
from carbon_vep.errors import InputError

log = logging.getLogger("carbon_vep")


def add_build_niah(sub) -> None:
    from carbon_vep.config.stages import NIAH_TASKS as TASKS

    p = sub.add_parser("build-niah", help="build a Genomic-NIAH cell from a genome (no model)")
    p.add_argument("--reference", required=True, help="genome FASTA (or GENERator Parquet)")
    p.add_argument("--task", required=True, choices=TASKS)
    p.add_argument("--ctx", type=int, required=True, help="context in tokens (4096 ... 131072)")
    p.add_argument("--rows", type=int, default=500, help="rows of the cell (published: 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--key-bp", type=int, default=24)
    p.add_argument("--value-bp", type=int, default=24)
    p.add_argument("--distractors", type=int, default=8, help="distractor pairs (neardup tasks)")
    p.add_argument(
        "--haystack",
        choices=("auto", "contiguous", "stitched"),
        default="auto",
        help="one stretch of genome, or ACGT runs concatenated (default auto: stitched from "
        "32,768 tokens on, as published)",
    )
    p.add_argument("--out", required=True, help="the cell, Parquet")
    p.set_defaults(func=build_niah)


def build_niah(args: argparse.Namespace) -> None:
    from carbon_vep.suite.niah_build import CellSpec, write_cell

    spec = CellSpec(args.task, args.ctx, args.rows, args.seed, args.key_bp, args.value_bp,
                    args.distractors, haystack=args.haystack)  # fmt: skip
    n = write_cell(spec, args.reference, args.out)
    log.info("%s: %d rows of %s at %d tokens, %s haystacks", args.out, n, args.task, args.ctx,
             spec.haystack_mode)  # fmt: skip


def _add_cell_task(p: argparse.ArgumentParser) -> None:
    from carbon_vep.config.stages import NIAH_TASKS

    p.add_argument(
        "--cell-task",
        choices=NIAH_TASKS,
        help="the rows' task when the cell has no `task` column (default: from the file name, "
        "when it is the cell's config name: niah_4k.parquet, niah_neardup_d2_32k.parquet)",
    )


def _row_range(text: str | None) -> slice:
    if not text:
        return slice(None)
    start, sep, end = text.partition(":")
    if not sep or not start.isdigit() or not end.isdigit() or int(end) <= int(start):
        raise argparse.ArgumentTypeError(f"--row-range {text!r}: START:END, 0-based, END > START")
    return slice(int(start), int(end))


def add_score_niah(sub) -> None:
    p = sub.add_parser("score-niah", help=NiahSettings.__doc__)
    p.add_argument("--tasks-file", required=True, help="a Genomic-NIAH cell (Parquet/TSV/CSV)")
    p.add_argument(
        "--row-range",
        type=_row_range,
        default=slice(None),
        help="score only rows START:END of the cell (0-based; a shard of a job)",
    )
    add_flags(p, ModelSettings, NiahSettings, EvaluationSettings)
    _add_cell_task(p)
    add_result_args(p, defaults="the cell's config name, e.g. niah_neardup_d2_32k")
    p.add_argument("--out", required=True, help="per-row results Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    p.set_defaults(func=score_niah)


@dataclass
class JobClock:
    """A job's two times, logged at its end: the engine's start (the model loaded, vLLM's KV
    cache allocated) and the scoring of its rows; benchmarks read them back from the log."""

    began: float = field(default_factory=time.perf_counter)
    ready_at: float | None = None

    def ready(self) -> None:
        self.ready_at = time.perf_counter()

    def line(self, where: str, rows: int, engine: str) -> str:
        now, ready = time.perf_counter(), self.ready_at or self.began
        return (f"{where}: {rows} rows scored in {now - ready:.2f} s on {engine} after an "
                f"engine start of {ready - self.began:.2f} s")  # fmt: skip


JOB_TIMES = re.compile(
    r"(?P<rows>\d+) rows scored in (?P<score_s>[\d.]+) s on (?P<engine>\w+) after an engine "
    r"start of (?P<start_s>[\d.]+) s"
)


def read_job_times(log_text: str) -> dict | None:
    """The last job-times line of a score-niah log: rows, score_s, start_s, engine."""
    found = list(JOB_TIMES.finditer(log_text))
    if not found:
        return None
    times = found[-1].groupdict()
    return {"rows": int(times["rows"]), "score_s": float(times["score_s"]),
            "start_s": float(times["start_s"]), "engine": times["engine"]}  # fmt: skip


def score_niah(args: argparse.Namespace) -> None:
    from carbon_vep.suite.niah_cells import HEADLINE, niah_metrics, read_cell, result_name

    model, settings, evaluation = from_args(args, ModelSettings, NiahSettings, EvaluationSettings)
    task = args.cell_task
    cell = read_cell(args.tasks_file, task=task)  # refused before a model loads
    args.task = args.task or result_name(cell)
    args.model_key = args.model_key or Path(model.path.rstrip("/")).name
    cell = cell[args.row_range]
    score = _score_on_vllm if model.engine == "vllm" else _score_on_transformers
    clock = JobClock()
    rows, parameters = score(args, model, settings, task, cell, clock)
    log.info(clock.line(args.tasks_file, rows.height, model.engine))
    atomic.write_parquet(rows, args.out)
    write_task_result(niah_metrics(rows, evaluation, parameters), args, list(HEADLINE))


def _score_on_transformers(
    args, model: ModelSettings, settings: NiahSettings, task, cell, clock: JobClock
):
    from carbon_vep.suite.niah import NiahScorer, score_rows
    from carbon_vep.suite.niah_cells import read_cell

    loaded = load_model(model, args.tasks_file, _yarn(settings), long_context=True)
    if loaded.vocab.k != 6:
        cell = read_cell(args.tasks_file, loaded.vocab.k, task)[args.row_range]
    _check_positions(cell, loaded.vocab.k, _model_positions(loaded.model.config), settings,
                     args.tasks_file)  # fmt: skip
    scorer = NiahScorer(engine_for(loaded, model), loaded.tokenizer, settings.prefill_chunk)
    clock.ready()
    rows = score_rows(cell, scorer, model.batch_size, model.batch_tokens)
    parameters = {"engine": "transformers", "yarn_factor": settings.yarn_factor,
                  "restricted_to_dna_block": scorer.allowed is not None,
                  "prefill_chunk": settings.prefill_chunk,
                  "attention": loaded.model.config._attn_implementation}  # fmt: skip
    return rows, parameters


def _score_on_vllm(args, model: ModelSettings, settings: NiahSettings, task, cell, clock):
    """The job's rows through one vLLM engine, started once (suite.niah_vllm)."""
    from carbon_vep.cli.common import require_model_here
    from carbon_vep.model.loading import load_tokenizer, yarn_overrides
    from carbon_vep.model.tokens import dna_block_ids
    from carbon_vep.model.vllm import VllmEngine
    from carbon_vep.suite.niah_cells import prompt_tokens, read_cell
    from carbon_vep.suite.niah_vllm import VllmNiahScorer, engine_length, score_rows_vllm

    require_model_here(model)
    tokenizer, vocab = load_tokenizer(model)
    if vocab.k != 6:
        cell = read_cell(args.tasks_file, vocab.k, task)[args.row_range]
    yarn = _yarn(settings)
    overrides = yarn_overrides(model, yarn) if yarn else None
    positions = overrides["max_position_embeddings"] if overrides else _checkpoint_positions(model)
    _check_positions(cell, vocab.k, positions, settings, args.tasks_file)
    needed = prompt_tokens(cell, vocab.k) if cell.height else 0
    where = f"{args.tasks_file} ({args.task})"
    length = engine_length(needed, model.vllm.max_model_len, where)
    engine = VllmEngine(model, overrides, length, what=where)
    clock.ready()
    rows = score_rows_vllm(cell, VllmNiahScorer(engine, tokenizer, vocab))
    parameters = {"engine": "vllm", "vllm": engine.version, "yarn_factor": settings.yarn_factor,
                  "restricted_to_dna_block": dna_block_ids(tokenizer, vocab) is not None,
                  "prefix_caching": model.vllm.prefix_caching,
                  "tensor_parallel_size": model.vllm.tensor_parallel_size,
                  "max_model_len": length, "kv_cache_tokens": engine.capacity_tokens,
                  "prefix_cache": engine.cache_stats}  # fmt: skip
    return rows, parameters


def _model_positions(config) -> int | None:
    return getattr(config, "max_position_embeddings", None)


def _checkpoint_positions(model: ModelSettings) -> int | None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        model.path, revision=model.revision, trust_remote_code=model.trust_remote_code
    )
    return _model_positions(config)


def _yarn(settings: NiahSettings):
    from carbon_vep.model.loading import Yarn

    if not settings.yarn_factor:
        return None
    return Yarn(settings.yarn_factor, settings.yarn_original_positions,
                settings.yarn_max_positions)  # fmt: skip


def _check_positions(cell, k: int, limit: int | None, settings: NiahSettings, path: str) -> None:
    """A context beyond the model's positions is refused without YaRN (saying which setting
    turns it on) and warned about beyond YaRN's reach."""
    import dataclasses

    from carbon_vep.config.fields import describe
    from carbon_vep.suite.niah_cells import prompt_tokens

    needed = prompt_tokens(cell, k) if cell.height else 0
    if settings.yarn_factor:
        if needed > settings.positions:
            log.warning("%s: rows need %d tokens, beyond YaRN x%g of %d positions (%d)", path,
                        needed, settings.yarn_factor, settings.yarn_original_positions,
                        settings.positions)  # fmt: skip
        return
    if limit is not None and needed > limit:
        field = next(f for f in dataclasses.fields(NiahSettings) if f.name == "yarn_factor")
        flag = describe(field, "4", float)
        raise InputError(
            path, f"rows need {needed:,} tokens (prefix + prompt + value) but the model has "
            f"{limit:,} positions; extend the context with YaRN ({flag}, as published for "
            "Carbon past 32k tokens) or score a shorter context"
        )  # fmt: skip


def add_merge_niah(sub) -> None:
    p = sub.add_parser("merge-niah", help="a cell's scored row ranges into one table + metrics")
    p.add_argument("--cell", required=True, help="the cell the parts were scored from")
    p.add_argument("--parts", nargs="+", required=True, help="score-niah outputs (Parquet)")
    add_flags(p, EvaluationSettings)
    _add_cell_task(p)
    add_result_args(p)
    p.add_argument("--parameters", default="{}", help="JSON: the scoring parameters to record")
    p.add_argument("--out", required=True, help="per-row results Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    p.set_defaults(func=merge_niah)


def merge_niah(args: argparse.Namespace) -> None:
    import json

    import polars as pl

    from carbon_vep.suite.niah_cells import HEADLINE, niah_metrics, read_cell

    (evaluation,) = from_args(args, EvaluationSettings)
    uids = read_cell(args.cell, task=args.cell_task)["uid"]
    rows = pl.concat([pl.read_parquet(p) for p in args.parts], how="vertical")
    if sorted(rows["uid"].to_list()) != sorted(uids.to_list()):
        missing = sorted(set(uids.to_list()) - set(rows["uid"].to_list()))[:3]
        problem = f"the parts hold {rows.height} rows for the cell's {uids.len()} uids"
        cover = "the row ranges must cover the cell once (a niah entry's `rows`)"
        raise InputError(args.cell, f"{problem} (missing e.g. {missing}; or duplicated): {cover}")
    rows = uids.to_frame().join(rows, on="uid", how="left", maintain_order="left")
    atomic.write_parquet(rows, args.out)
    metrics = niah_metrics(rows, evaluation, json.loads(args.parameters))
    write_task_result(metrics, args, list(HEADLINE))


COMMANDS = (add_build_niah, add_score_niah, add_merge_niah)
