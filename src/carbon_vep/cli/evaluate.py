"""Metrics and the comparison gate: metrics (a scored panel's VEP metrics), compare (a results
table against a baseline; exit 1 on drift) and make-baseline."""

from __future__ import annotations

import argparse

import polars as pl

from carbon_vep import atomic
from carbon_vep.cli.common import add_result_args, log, write_task_result
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import LabelSettings, MetricSettings


def add_metrics(sub) -> None:
    p = sub.add_parser("metrics", help="VEP metrics, intervals and status counts as JSON")
    p.add_argument("--merged", required=True)
    add_flags(p, LabelSettings, MetricSettings)
    add_result_args(p)
    p.add_argument("--out", dest="metrics_out", required=True)
    p.add_argument(
        "--rows-out", default=None, help="Parquet of the rows the metrics used (for the report)"
    )
    p.set_defaults(func=metrics)


def metrics(args: argparse.Namespace) -> None:
    from carbon_vep.evaluate.metrics import evaluated_rows, metric_columns, vep_metrics

    labels, settings = from_args(args, LabelSettings, MetricSettings)
    columns = metric_columns(pl.read_parquet_schema(args.merged), labels, settings)
    merged = pl.read_parquet(args.merged, columns=columns)
    result = vep_metrics(merged, labels, settings, args.merged)
    write_task_result(result, args, list(settings.headline_metrics))
    if args.rows_out:
        atomic.write_parquet(evaluated_rows(merged, labels), args.rows_out)


def add_compare(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare a results table with a baseline; exit 1 when a value drifts or is missing",
    )
    p.add_argument("--baseline", required=True, help="baseline YAML (baselines/)")
    p.add_argument("--results", required=True, help="results_table.parquet or .tsv")
    p.add_argument(
        "--tolerance",
        action="append",
        default=[],
        help="X (every metric) or METRIC=X: allowed absolute difference, in the metric's units "
        "(replaces the baseline's)",
    )
    p.add_argument("--junit", help="write the comparison as JUnit XML here (CI systems show it)")
    p.add_argument("--out", help="write the comparison as TSV here (only when it passes)")
    p.set_defaults(func=compare)


def compare(args: argparse.Namespace) -> int:
    from carbon_vep.evaluate.compare import run_gate

    passed, table = run_gate(args.baseline, args.results, args.tolerance, args.junit, args.out)
    print(table, end="")
    if args.junit:
        log.info("JUnit XML: %s", args.junit)
    return 0 if passed else 1


def add_make_baseline(sub) -> None:
    p = sub.add_parser("make-baseline", help="write a baseline YAML from a results table")
    p.add_argument("--results", required=True, help="results_table.parquet or .tsv")
    p.add_argument("--source", required=True, help="how the numbers were obtained")
    p.add_argument("--tolerance", action="append", default=[], help="X or METRIC=X")
    p.add_argument("--out", required=True)
    p.set_defaults(func=make_baseline)


def make_baseline(args: argparse.Namespace) -> None:
    from carbon_vep.evaluate.compare import baseline_yaml, parse_tolerances

    every, per_metric = parse_tolerances(args.tolerance)
    tolerance = ({"default": every} if every is not None else {}) | per_metric
    atomic.write_text(baseline_yaml(args.results, args.source, tolerance or None), args.out)


COMMANDS = (add_metrics, add_compare, add_make_baseline)
