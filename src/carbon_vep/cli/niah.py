"""Genomic-NIAH, the suite's long-context task: build-niah (a cell from any genome), score-niah
(a cell, or a range of its rows, on the model) and merge-niah (a cell's row ranges into one
table and its metrics)."""

from __future__ import annotations

import argparse
import logging

from carbon_vep import atomic
from carbon_vep.cli.common import add_result_args, fill_result_names, write_task_result
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import EvaluationSettings, ModelSettings, NiahSettings

log = logging.getLogger("carbon_vep")


def add_build_niah(sub) -> None:
    from carbon_vep.config.niah_grid import NIAH_TASKS as TASKS

    p = sub.add_parser("build-niah", help="build a Genomic-NIAH cell from a genome (no model)")
    p.add_argument("--reference", required=True, help="genome FASTA (or GENERator Parquet)")
    p.add_argument("--task", required=True, choices=TASKS)
    p.add_argument(
        "--ctx",
        type=int,
        required=True,
        help="context in tokens (published cells: 4096 ... 131072; any whose haystack fits)",
    )
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

    spec = CellSpec(
        args.task,
        args.ctx,
        args.rows,
        args.seed,
        args.key_bp,
        args.value_bp,
        args.distractors,
        haystack=args.haystack,
    )
    spec.check()  # a flag the cell cannot have, refused before the genome is read
    n = write_cell(spec, args.reference, args.out)
    log.info(
        "%s: %d rows of %s at %d tokens, %s haystacks",
        args.out,
        n,
        args.task,
        args.ctx,
        spec.haystack_mode,
    )


def _add_cell_task(p: argparse.ArgumentParser) -> None:
    from carbon_vep.config.niah_grid import NIAH_TASKS

    p.add_argument(
        "--cell-task",
        choices=NIAH_TASKS,
        help="the rows' task when the cell has no `task` column (default: from the file name, "
        "when it is the cell's config name: niah_4k.parquet, niah_neardup_d2_32k.parquet); "
        "a cell with the column must hold this task",
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
    p.add_argument("--times", help="JSON of the job's times (engine start, scoring)")
    p.set_defaults(func=score_niah)


def score_niah(args: argparse.Namespace) -> None:
    from carbon_vep.suite.niah_cells import (
        HEADLINE,
        check_row_range,
        niah_metrics,
        read_cell,
        result_name,
    )
    from carbon_vep.suite.niah_job import CellJob, score_cell

    model, settings, evaluation = from_args(args, ModelSettings, NiahSettings, EvaluationSettings)
    cell = read_cell(args.tasks_file, task=args.cell_task)  # refused before a model loads
    check_row_range(cell, args.row_range, args.tasks_file)
    fill_result_names(args, result_name(cell), model.path)
    job = CellJob(args.tasks_file, args.task, args.cell_task, args.row_range)
    rows, parameters, times = score_cell(job, cell[args.row_range], model, settings)
    log.info(times.line(args.tasks_file))
    atomic.write_parquet(rows, args.out)
    if args.times:
        atomic.write_json(times.record(), args.times)
    write_task_result(niah_metrics(rows, evaluation, parameters), args, list(HEADLINE))


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
    from carbon_vep.suite.tasks import require_each_once

    (evaluation,) = from_args(args, EvaluationSettings)
    uids = read_cell(args.cell, task=args.cell_task)["uid"]
    rows = pl.concat([pl.read_parquet(p) for p in args.parts], how="vertical")
    require_each_once(
        args.cell,
        uids.to_list(),
        rows["uid"].to_list(),
        f"the cell's {uids.len()} uids",
        "the row ranges must cover the cell once (a niah entry's `rows`)",
    )
    rows = uids.to_frame().join(rows, on="uid", how="left", maintain_order="left")
    atomic.write_parquet(rows, args.out)
    metrics = niah_metrics(rows, evaluation, json.loads(args.parameters))
    write_task_result(metrics, args, list(HEADLINE))


COMMANDS = (add_build_niah, add_score_niah, add_merge_niah)
