"""`carbon-vep` command line: one subcommand per pipeline stage (the Snakemake rules call these).

A stage's options come from the settings it reads (config.py: one definition of each setting,
its flag and its default); a rule passes them as one JSON object (`--settings`), and options
given on the command line override it. Commands import what they need when they run, so the
stages that need no model never import torch.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

from . import atomic
from .config import (
    DownloadConfig,
    EvaluationSettings,
    HubFileConfig,
    LabelSettings,
    MetricSettings,
    ModelSettings,
    PanelSettings,
    PerturbationSettings,
    RecipeSettings,
    RecoverySettings,
    ScanChunkSettings,
    ShardSettings,
    TileSettings,
)
from .errors import InputError
from .settings import ConfigError, add_flags, from_args

log = logging.getLogger("carbon_vep")


def _pairs(items: list[str]) -> dict[str, Any]:
    """KEY=VALUE options, JSON objects, or @FILE (a JSON object in a file, as record-inputs
    writes), merged in order (`--provenance`, `--field`); mappings under the same key merge."""
    out: dict[str, Any] = {}
    for item in items:
        if item.lstrip().startswith("{") or item.startswith("@"):
            if item.startswith("@"):
                try:
                    item = Path(item[1:]).read_text()
                except OSError as err:
                    raise InputError(item[1:], f"cannot read: {err}") from err
            for key, value in json.loads(item).items():
                if isinstance(value, dict) and isinstance(out.get(key), dict):
                    value = out[key] | value
                out[key] = value
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"expected KEY=VALUE or a JSON object, got {item!r}")
        out[key] = value
    return out


# ---- shared pieces of the stage commands --------------------------------------------------
def _require_model_here(model: ModelSettings) -> None:
    """Fail in seconds, before torch is imported, when an offline job lacks its Hub model."""
    from huggingface_hub import constants

    from .hub import check_remote_code, is_local_model, model_folder, require_cached

    if constants.HF_HUB_OFFLINE and not is_local_model(model.path):
        require_cached(model.path, model.revision)
    check_remote_code(model, *model_folder(model))  # before any code of the checkpoint runs


def _load_model(model: ModelSettings, job: str | None):
    _require_model_here(model)
    from .model import load_model, resolve_device

    resolve_device(model.device, job=job)
    return load_model(model)


def _load_engine(model: ModelSettings, job: str | None):
    loaded = _load_model(model, job)
    from .engine import Engine, verify_output_layer

    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=model.batch_size)
    verify_output_layer(engine, loaded.vocab.encode("ACGTAC" * 8))
    return engine


def _write_task_result(result: dict, args: argparse.Namespace, headline: list[str]) -> None:
    """Name the result (task, model key, headline metrics, provenance), write it, log warnings."""
    result.update(
        task=args.task,
        model_key=args.model_key,
        headline_metrics=headline,
        provenance=_pairs(args.provenance),
    )
    atomic.write_json(result, args.metrics_out)
    for warning in result["warnings"]:
        log.warning(warning)


def _windows(checked: pl.DataFrame, reference, recipe: RecipeSettings) -> pl.DataFrame:
    """The scoreable variants of a checked panel with their recipe's windows."""
    from .windows import unique_variants

    variants = unique_variants(checked)
    return recipe.definition.add_windows(variants, reference.lengths, recipe.window_bp)


# ---- stage commands ----------------------------------------------------------------------
def cmd_check_panel(args: argparse.Namespace) -> None:
    from .check import NothingScoreableError
    from .ingest import write_checked_panel
    from .reference import open_reference

    panel, labels = from_args(args, PanelSettings, LabelSettings)
    with open_reference(args.reference) as reference:
        try:
            summary = write_checked_panel(args.panel, reference, panel, labels, args.out)
        except NothingScoreableError as err:  # the table is written: say why, then stop
            _checked_written(args, err.summary or {})
            raise InputError(
                err.path, f"{err.problem}; each row's status and reason are in {args.out} "
                f"(summary: {args.summary})"
            ) from err  # fmt: skip
    _checked_written(args, summary)


def _checked_written(args: argparse.Namespace, summary: dict) -> None:
    atomic.write_json(summary, args.summary)
    log.info("checked %d rows: %s", summary.get("n_rows", 0), summary.get("status_counts"))
    for note in summary.get("notes", []):
        log.warning("%s: %s", args.panel, note)


def cmd_make_shards(args: argparse.Namespace) -> None:
    from .reference import open_reference
    from .windows import assign_shards

    recipe, shards = from_args(args, RecipeSettings, ShardSettings)
    with open_reference(args.reference) as reference:
        variants = _windows(pl.read_parquet(args.checked), reference, recipe)
    sharded = assign_shards(variants, shards.shard_size)
    outdir = Path(args.outdir)
    tmp = outdir.with_name(f".{outdir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    n_shards = int(sharded["shard"].max()) + 1 if sharded.height else 1
    for shard in range(n_shards):  # an empty panel still gets one (empty) shard
        part = sharded.filter(pl.col("shard") == shard).drop("shard")
        part.write_parquet(tmp / f"shard_{shard:05d}.parquet")
    shutil.rmtree(outdir, ignore_errors=True)
    tmp.rename(outdir)
    log.info("%d variants in %d shards", sharded.height, n_shards)


def cmd_score_shard(args: argparse.Namespace) -> None:
    model, recipe = from_args(args, ModelSettings, RecipeSettings)
    shard = pl.read_parquet(args.shard)
    engine = _load_engine(model, args.shard)  # first: a missing cache or GPU fails fast
    from .reference import open_reference
    from .scoring import score_shard

    with open_reference(args.reference) as reference:
        scores = score_shard(shard, reference, engine, recipe)
    atomic.write_parquet(scores, args.out)
    log.info("scored %d variants of %s", scores.height, args.shard)


def cmd_merge(args: argparse.Namespace) -> None:
    from .merge import merge_scores

    checked = pl.read_parquet(args.checked)
    merged = merge_scores(checked, [pl.read_parquet(p) for p in args.scores])
    atomic.write_parquet(merged, args.out)
    log.info("merged %d rows", merged.height)


def cmd_metrics(args: argparse.Namespace) -> None:
    from .metrics import evaluated_rows, vep_metrics

    labels, metrics = from_args(args, LabelSettings, MetricSettings)
    merged = pl.read_parquet(args.merged)
    result = vep_metrics(merged, labels, metrics)
    _write_task_result(result, args, list(metrics.headline_metrics))
    if args.rows_out:
        atomic.write_parquet(evaluated_rows(merged, labels), args.rows_out)


def cmd_score_recovery(args: argparse.Namespace) -> None:
    from .recovery import recover, recovery_metrics
    from .suite import read_task_table

    model, settings, evaluation = from_args(
        args, ModelSettings, RecoverySettings, EvaluationSettings
    )
    table = read_task_table(args.tasks_file, ["sequence", "label"])
    loaded = _load_model(model, args.tasks_file)
    predictions = recover(table, loaded, settings, model.batch_size)
    atomic.write_parquet(predictions, args.out)
    _write_task_result(recovery_metrics(predictions, settings, evaluation), args, ["accuracy"])


def cmd_score_perturbation(args: argparse.Namespace) -> None:
    from .perturbation import perturbation_metrics, score_pairs
    from .suite import read_task_table

    model, settings, evaluation = from_args(
        args, ModelSettings, PerturbationSettings, EvaluationSettings
    )
    table = read_task_table(args.tasks_file, ["original_sequence", "sequence"])
    pairs = score_pairs(table, _load_engine(model, args.tasks_file), settings)
    atomic.write_parquet(pairs, args.out)
    _write_task_result(perturbation_metrics(pairs, settings, evaluation), args, ["accuracy"])


def cmd_results_table(args: argparse.Namespace) -> None:
    from .suite import load_results, results_markdown, results_table

    results = load_results(args.metrics)
    table = results_table(results)
    atomic.write_parquet(table, args.out_parquet)
    with atomic.atomic_path(args.out_tsv) as tmp:
        table.write_csv(tmp, separator="\t")
    atomic.write_text(results_markdown(results), args.out_md)


def cmd_html_report(args: argparse.Namespace) -> None:
    from .report_html import load_run, render_html
    from .report_markdown import render_summary

    run = load_run(args.metrics, args.rows)
    table = pl.read_parquet(args.results_table)
    atomic.write_text(render_html(run, table, args.title), args.out_html)
    table_markdown = Path(args.results_table_md).read_text()
    summary = render_summary([r.metrics for r in run], table_markdown, args.title)
    atomic.write_text(summary, args.out_md)


def cmd_export_vcf(args: argparse.Namespace) -> None:
    from .exports import default_fields, write_results_vcf
    from .reference import open_reference

    with open_reference(args.reference) as reference:
        lengths = dict(reference.lengths)
    merged = pl.read_parquet(args.merged)
    fields = {**default_fields(merged), **_pairs(args.field)}
    unwritten = write_results_vcf(merged, lengths, args.out, fields)
    if unwritten:
        log.warning("%d rows without CHROM/POS/REF are not VCF records (see Parquet)", unwritten)


def cmd_export_tabix(args: argparse.Namespace) -> None:
    from .exports import write_tabix_tsv
    from .reference import open_reference

    order = None
    if args.reference:
        with open_reference(args.reference) as reference:
            order = list(reference.lengths)
    write_tabix_tsv(pl.read_parquet(args.scores), args.out, args.column, order)


def cmd_fetch_hub(args: argparse.Namespace) -> None:
    from .suite import fetch_hub_file

    (hub,) = from_args(args, HubFileConfig)
    fetch_hub_file(hub.repo_id, hub.filename, hub.out, hub.revision, hub.repo_type)


def cmd_fetch_url(args: argparse.Namespace) -> None:
    from .download import fetch_url

    (download,) = from_args(args, DownloadConfig)
    digest = fetch_url(download.url, download.out, download.sha256, download.gunzip)
    log.info("%s: sha256 %s verified, written to %s", download.url, digest, download.out)


def cmd_report(args: argparse.Namespace) -> None:
    from .report_markdown import render_report

    merged = pl.read_parquet(args.merged)
    metrics = json.loads(Path(args.metrics).read_text())
    atomic.write_text(render_report(merged, metrics, args.title), args.out)


def cmd_score(args: argparse.Namespace) -> None:
    """Every stage in one process, for use outside Snakemake."""
    from .ingest import ingest_panel
    from .merge import merge_scores
    from .reference import open_reference

    model, panel, labels, recipe = from_args(
        args, ModelSettings, PanelSettings, LabelSettings, RecipeSettings
    )
    with open_reference(args.reference) as reference:
        checked, _ = ingest_panel(args.panel, reference, panel, labels)
        engine = _load_engine(model, args.panel)  # after the panel checks: bad input fails fast
        from .scoring import score_shard

        scores = score_shard(_windows(checked, reference, recipe), reference, engine, recipe)
    atomic.write_parquet(merge_scores(checked, [scores]), args.out)


def cmd_scan(args: argparse.Namespace) -> None:
    """Every possible SNV of a region: per-position probabilities and per-SNV scores."""
    from .reference import open_reference
    from .tiling import parse_region

    model, tiles = from_args(args, ModelSettings, TileSettings)
    chrom, start, end = parse_region(args.region)
    engine = _load_engine(model, args.region)
    from .scan import scan_region, snv_scores

    with open_reference(args.reference) as reference:
        if chrom not in reference.lengths:
            raise InputError(args.reference, f"contig {chrom!r} of --region not in the reference")
        positions = scan_region(engine, reference, chrom, start, end, tiles)
    atomic.write_parquet(positions, args.out)
    if args.snv_out:
        atomic.write_parquet(snv_scores(positions), args.snv_out)
    missing = (end - start) - positions.height
    log.info("scanned %d positions of %s", positions.height, args.region)
    if missing:
        log.warning("%d bases at the contig end fit no whole 6-mer tile: not scored", missing)


def cmd_plan_scan(args: argparse.Namespace) -> None:
    """Targets -> chunks (one job each), with counts and estimates printed before any model job."""
    from .reference import open_reference
    from .scan_plan import describe_plan, plan_scan, resolve_targets

    tiles, chunks = from_args(args, TileSettings, ScanChunkSettings)
    with open_reference(args.reference) as reference:
        targets = resolve_targets(args.regions, reference.lengths)
        plan = plan_scan(reference, targets, tiles, chunks, _pairs(args.model))
    atomic.write_json(plan, args.out)
    text = describe_plan(plan, f"scan plan: {args.title}")
    if args.report:
        atomic.write_text(text, args.report)
    print(text, end="")


def cmd_scan_chunk(args: argparse.Namespace) -> None:
    """One chunk of a scan plan, streamed to Parquet row groups."""
    from .scan_merge import BaseWriter, read_json
    from .scan_plan import chunk_pieces

    (model,) = from_args(args, ModelSettings)
    plan = read_json(args.plan)
    tiles = TileSettings(plan["tile_bp"], plan["min_context"])
    pieces = chunk_pieces(plan, args.chunk)
    engine = _load_engine(model, f"{args.plan} chunk {args.chunk}")
    from .reference import open_reference
    from .scan import scan_chunk

    writer = BaseWriter(args.out)
    try:
        with open_reference(args.reference) as reference:
            stats = scan_chunk(engine, reference, pieces, tiles, writer, f"chunk {args.chunk}")
    except BaseException:
        writer.abort()
        raise
    writer.close()
    atomic.write_json({"chunk": args.chunk, **stats}, args.stats)
    log.info("chunk %d: %d bases in %.1f s", args.chunk, stats["bases"], stats["wall_s"])


def cmd_merge_scan(args: argparse.Namespace) -> None:
    """One contig's rows of the chunks -> its Parquet partition and tabix TSV."""
    from .scan_merge import merge_contig

    (chunks,) = from_args(args, ScanChunkSettings)
    stats = merge_contig(args.chunks, args.contig, args.out_parquet, args.out_tsv,
                         _pairs(args.provenance), chunks.tsv_decimals)  # fmt: skip
    log.info("merged %s: %s", args.contig, stats)


def cmd_summarize_scan(args: argparse.Namespace) -> None:
    from .scan_merge import read_json, summarize, summary_markdown
    from .scan_plan import describe_plan

    plan = read_json(args.plan)
    stats = [read_json(p) for p in args.chunk_stats]
    summary = summarize(plan, stats, args.parquet, args.tsv)
    atomic.write_json(summary, args.out_json)
    atomic.write_text(
        summary_markdown(summary, describe_plan(plan, f"scan plan: {args.title}")), args.out_md
    )


def cmd_annotate(args: argparse.Namespace) -> None:
    """A panel scored by lookup in a scan's outputs: no model."""
    from .annotate import annotate_panel

    if args.checked:  # the workflow's check_panel output
        checked = pl.read_parquet(args.checked)
    elif args.panel and args.reference:
        from .ingest import ingest_panel
        from .reference import open_reference

        panel, labels = from_args(args, PanelSettings, LabelSettings)
        with open_reference(args.reference) as reference:
            checked, _ = ingest_panel(args.panel, reference, panel, labels)
    else:
        raise InputError("command line", "annotate needs --panel and --reference, or --checked")
    began = time.monotonic()
    annotated = annotate_panel(checked, args.scan)
    took = time.monotonic() - began
    atomic.write_parquet(annotated, args.out)
    log.info("annotated %d rows in %.2f s (lookup): %s", annotated.height, took,
             dict(annotated.group_by("status").len().sort("status").iter_rows()))  # fmt: skip


def cmd_fetch_model(args: argparse.Namespace) -> None:
    from .hub import check_remote_code, fetch_snapshot, is_local_model

    (model,) = from_args(args, ModelSettings)
    if is_local_model(model.path):
        fetched = {"model": model.path, "local_directory": True}
    else:
        fetched = fetch_snapshot(model.path, model.revision)
        check_remote_code(model, Path(fetched["snapshot"]), from_hub=True)
        if model.revision is None:
            log.warning(
                "%s: no revision pinned, fetched commit %s of main; set `revision: %s` in the "
                "config so every run scores with the same weights",
                model.path, fetched["commit"], fetched["commit"],
            )  # fmt: skip
    atomic.write_json(fetched, args.out)
    log.info("model ready for offline jobs: %s", fetched)


def cmd_record_inputs(args: argparse.Namespace) -> None:
    from .inputs import record_files, record_model

    pins = json.loads(args.pins) if args.pins else {}
    if args.model:
        record = record_model(args.model, args.revision, pins)
    else:
        record = record_files(args.file, pins)
    for name, digest in record["inputs_sha256"].items():
        log.info("%s  %s", digest, name)
    atomic.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", args.out)


def cmd_build_demo_model(args: argparse.Namespace) -> None:
    from .demo_model import build_demo_model

    build_demo_model(args.out)


def cmd_config_schema(args: argparse.Namespace) -> None:
    from .config import schema_yaml

    atomic.write_text(schema_yaml(), args.out)


def cmd_readme_tables(args: argparse.Namespace) -> None:
    from .docs import render_readme

    path = Path(args.readme)
    atomic.write_text(render_readme(path.read_text()), path)


# ---- parser ------------------------------------------------------------------------------
def cmd_compare(args: argparse.Namespace) -> int:
    from .compare import run_gate

    passed, table = run_gate(args.baseline, args.results, args.tolerance, args.junit, args.out)
    print(table, end="")
    if args.junit:
        log.info("JUnit XML: %s", args.junit)
    return 0 if passed else 1


def cmd_make_baseline(args: argparse.Namespace) -> None:
    from .compare import baseline_yaml, parse_tolerances

    every, per_metric = parse_tolerances(args.tolerance)
    tolerance = ({"default": every} if every is not None else {}) | per_metric
    atomic.write_text(baseline_yaml(args.results, args.source, tolerance or None), args.out)


def _add_result_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", required=True, help="task / dataset name in the results table")
    p.add_argument("--model-key", required=True, help="model name in the results table")
    p.add_argument("--provenance", action="append", default=[], help="KEY=VALUE or a JSON object")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carbon-vep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("check-panel", help="check every panel row against the reference")
    p.add_argument("--panel", required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, PanelSettings, LabelSettings)
    p.add_argument("--out", required=True)
    p.add_argument("--summary", required=True)
    p.set_defaults(func=cmd_check_panel)

    p = sub.add_parser("make-shards", help="build windows and group variants into shards")
    p.add_argument("--checked", required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, RecipeSettings, ShardSettings)
    p.add_argument("--outdir", required=True)
    p.set_defaults(func=cmd_make_shards)

    p = sub.add_parser("score-shard", help="score one shard")
    p.add_argument("--shard", required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, ModelSettings, RecipeSettings)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_score_shard)

    p = sub.add_parser("merge", help="join shard scores onto every checked row")
    p.add_argument("--checked", required=True)
    p.add_argument("--scores", nargs="*", default=[])
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("metrics", help="VEP metrics, intervals and status counts as JSON")
    p.add_argument("--merged", required=True)
    add_flags(p, LabelSettings, MetricSettings)
    _add_result_args(p)
    p.add_argument("--out", dest="metrics_out", required=True)
    p.add_argument(
        "--rows-out", default=None, help="Parquet of the rows the metrics used (for the report)"
    )
    p.set_defaults(func=cmd_metrics)

    for name, settings, func, columns in (
        ("score-recovery", RecoverySettings, cmd_score_recovery, "sequence, label, type"),
        ("score-perturbation", PerturbationSettings, cmd_score_perturbation,
         "original_sequence, sequence"),
    ):  # fmt: skip
        p = sub.add_parser(name, help=settings.__doc__)
        p.add_argument("--tasks-file", required=True, help=f"Parquet/TSV/CSV: {columns}")
        add_flags(p, ModelSettings, settings, EvaluationSettings)
        _add_result_args(p)
        p.add_argument("--out", required=True, help="per-row predictions Parquet")
        p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
        p.set_defaults(func=func)

    p = sub.add_parser("results-table", help="tasks x headline metrics by model")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics JSON files")
    p.add_argument("--out-parquet", required=True)
    p.add_argument("--out-tsv", required=True)
    p.add_argument("--out-md", required=True)
    p.set_defaults(func=cmd_results_table)

    p = sub.add_parser("html-report", help="one self-contained HTML page for a run")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics JSON files")
    p.add_argument(
        "--rows", nargs="+", required=True, help="each metrics file's row file, in the same order"
    )
    p.add_argument("--results-table", required=True, help="results_table.parquet of the run")
    p.add_argument("--results-table-md", required=True, help="results_table.md of the run")
    p.add_argument("--title", default="carbon-vep run report")
    p.add_argument("--out-html", required=True)
    p.add_argument("--out-md", required=True)
    p.set_defaults(func=cmd_html_report)

    p = sub.add_parser("export-vcf", help="a panel's results as a VCF, scores in INFO")
    p.add_argument("--merged", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--field", action="append", default=[], help="extra COLUMN=DESCRIPTION")
    p.add_argument("--out", required=True, help=".vcf, or .vcf.gz (bgzipped + tabix index)")
    p.set_defaults(func=cmd_export_vcf)

    p = sub.add_parser("export-tabix", help="per-SNV scores as a bgzipped, tabix-indexed TSV")
    p.add_argument("--scores", required=True, help="Parquet with chrom, pos, ref, alt, ...")
    p.add_argument("--column", action="append", required=True, help="value column to export")
    p.add_argument("--reference", default=None, help="FASTA whose contig order to follow")
    p.add_argument("--out", required=True, help="*.tsv.gz (index: *.tsv.gz.tbi)")
    p.set_defaults(func=cmd_export_tabix)

    p = sub.add_parser("fetch-hub", help="download a public dataset file from the Hub")
    add_flags(p, HubFileConfig)
    p.set_defaults(func=cmd_fetch_hub)

    p = sub.add_parser("fetch-url", help="download a public file from a pinned URL (sha256)")
    add_flags(p, DownloadConfig)
    p.set_defaults(func=cmd_fetch_url)

    p = sub.add_parser("report", help="Markdown report")
    p.add_argument("--merged", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--title", default="carbon-vep report")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("score", help="check, window and score a panel in one process")
    p.add_argument("--panel", required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, ModelSettings, PanelSettings, LabelSettings, RecipeSettings)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("scan", help="score every possible SNV of a region in one pass per tile")
    p.add_argument("--reference", required=True)
    p.add_argument("--region", required=True, help="CHROM:START-END, 1-based inclusive")
    add_flags(p, ModelSettings, TileSettings)
    p.add_argument("--out", required=True, help="per-position Parquet")
    p.add_argument("--snv-out", default=None, help="per-SNV Parquet (3 rows per base)")
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser("plan-scan", help="split a scan's regions into chunks (one job each)")
    p.add_argument("--reference", required=True)
    p.add_argument(
        "--regions", nargs="+", required=True,
        help="`all`, contig names, CHROM:START-END (1-based inclusive) or BED files",
    )  # fmt: skip
    add_flags(p, TileSettings, ScanChunkSettings)
    p.add_argument("--model", action="append", default=[], help="KEY=PATH, for the estimates")
    p.add_argument("--title", default="scan")
    p.add_argument("--out", required=True, help="plan JSON")
    p.add_argument("--report", default=None, help="the plan as Markdown")
    p.set_defaults(func=cmd_plan_scan)

    p = sub.add_parser("scan-chunk", help="score one chunk of a scan plan (streamed Parquet)")
    p.add_argument("--plan", required=True)
    p.add_argument("--chunk", type=int, required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, ModelSettings)
    p.add_argument("--out", required=True, help="per-base Parquet of the chunk")
    p.add_argument("--stats", required=True, help="JSON: bases, wall and forward-pass seconds")
    p.set_defaults(func=cmd_scan_chunk)

    p = sub.add_parser("merge-scan", help="one contig of a scan: Parquet partition + tabix TSV")
    p.add_argument("--contig", required=True)
    p.add_argument("--chunks", nargs="+", required=True, help="chunk Parquet files, in order")
    add_flags(p, ScanChunkSettings)
    p.add_argument("--provenance", action="append", default=[], help="KEY=VALUE or JSON")
    p.add_argument("--out-parquet", required=True)
    p.add_argument("--out-tsv", required=True, help="*.tsv.gz (index: *.tsv.gz.tbi)")
    p.set_defaults(func=cmd_merge_scan)

    p = sub.add_parser("summarize-scan", help="a scan's final summary (JSON and Markdown)")
    p.add_argument("--plan", required=True)
    p.add_argument("--chunk-stats", nargs="+", required=True)
    p.add_argument("--parquet", nargs="+", required=True)
    p.add_argument("--tsv", nargs="+", required=True)
    p.add_argument("--title", default="scan")
    p.add_argument("--out-json", required=True)
    p.add_argument("--out-md", required=True)
    p.set_defaults(func=cmd_summarize_scan)

    p = sub.add_parser("annotate", help="score a panel by lookup in a scan's outputs, no model")
    p.add_argument("--scan", required=True, help="a scan's output folder (holds positions/)")
    p.add_argument("--panel", default=None, help="VCF/BCF, Parquet, TSV or CSV (ingested)")
    p.add_argument("--reference", default=None, help="the panel's reference (for the checks)")
    p.add_argument("--checked", default=None, help="or: a checked panel (check-panel --out)")
    add_flags(p, PanelSettings, LabelSettings)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_annotate)

    p = sub.add_parser(
        "fetch-model", help="download a Hub model and its remote code into the local Hub cache"
    )
    add_flags(p, ModelSettings)
    p.add_argument("--out", required=True, help="JSON record of what was fetched")
    p.set_defaults(func=cmd_fetch_model)

    p = sub.add_parser("build-demo-model", help="build the tiny Carbon-shaped demo model")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_build_demo_model)

    p = sub.add_parser("config-schema", help="write the workflow's config schema (from config.py)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_config_schema)

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
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "record-inputs",
        help="hash input files (or a model's files) into a provenance record; stop on a pin "
        "mismatch",
    )
    p.add_argument("--file", action="append", default=[], help="an input file (repeatable)")
    p.add_argument("--model", help="a model directory or Hub id: hash every file of it")
    p.add_argument("--revision", help="the Hub model's revision (its cached snapshot)")
    p.add_argument("--pins", help='JSON {"PATH": "SHA256"}: expected hashes (config `sha256:`)')
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_record_inputs)

    p = sub.add_parser("make-baseline", help="write a baseline YAML from a results table")
    p.add_argument("--results", required=True, help="results_table.parquet or .tsv")
    p.add_argument("--source", required=True, help="how the numbers were obtained")
    p.add_argument("--tolerance", action="append", default=[], help="X or METRIC=X")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_make_baseline)

    p = sub.add_parser("readme-tables", help="rewrite the README's generated tables")
    p.add_argument("--readme", default="README.md")
    p.set_defaults(func=cmd_readme_tables)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)  # a gate (compare) returns its verdict
    except (InputError, ConfigError) as err:
        log.error("%s", err)
        return 2
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
