"""`carbon-vep` command line: one subcommand per pipeline stage (the Snakemake rules call these)."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

import polars as pl

from . import atomic
from .errors import InputError
from .windows import DEFAULT_WINDOW_BP

log = logging.getLogger("carbon_vep")
RECIPE_NAMES = tuple(DEFAULT_WINDOW_BP)  # centered, fns, nexttoken, scan


def _key_values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="local model directory or Hub id")
    p.add_argument("--revision", default=None)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-trust-remote-code", dest="trust_remote_code", action="store_false")
    p.add_argument("--batch-size", type=int, default=8)


def _add_recipe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", required=True, choices=RECIPE_NAMES)
    p.add_argument(
        "--normalization",
        default="published",
        choices=["published", "full_vocab", "dna_block", "acgt_strings"],
        help="published = full_vocab (centered), acgt_strings (nexttoken), dna_block (fns, scan)",
    )
    p.add_argument("--rc-average", action="store_true")
    p.add_argument(
        "--no-share-prefix",
        dest="share_prefix",
        action="store_false",
        help="score reference and alternate windows separately (no KV-cache prefix sharing)",
    )
    p.add_argument("--tile-bp", type=int, default=49_146, help="scan: tile length")
    p.add_argument("--min-context", type=int, default=24_000, help="scan: guaranteed left context")


def _recipe(args: argparse.Namespace):
    from .recipes import Recipe

    return Recipe(
        args.recipe,
        args.normalization,
        args.rc_average,
        share_prefix=args.share_prefix,
        tile_bp=args.tile_bp,
        min_context=args.min_context,
    )


def _add_panel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--panel", required=True)
    p.add_argument("--format", default="auto", choices=["auto", "vcf", "parquet", "tsv", "csv"])
    p.add_argument("--column", action="append", default=[], help="STANDARD=SOURCE column map")
    p.add_argument(
        "--info-field", action="append", default=[], help="VCF INFO field to carry ('*': all)"
    )
    p.add_argument("--min-ref-concordance", type=float, default=0.9)
    p.add_argument("--indel-policy", default="skip", choices=["skip"])
    p.add_argument("--build", default=None, help="the dataset's genome build (for messages)")
    p.add_argument("--label-column", default=None, help="flags duplicates with different labels")
    p.add_argument("--label-source", default="column", choices=["column", "clinvar_clnsig"])
    p.add_argument("--clnsig-field", default="CLNSIG")
    p.add_argument(
        "--clnsig-label",
        action="append",
        default=[],
        help="TERM=0|1 (repeat; default: Pathogenic, Likely_pathogenic ... Benign -> 0)",
    )


def _ingest_options(args: argparse.Namespace):
    from .check import CheckPolicy
    from .ingest import IngestOptions
    from .labels import DEFAULT_CLNSIG_LABELS

    clnsig = {term: int(label) for term, label in _key_values(args.clnsig_label).items()}
    policy = CheckPolicy(
        min_ref_concordance=args.min_ref_concordance,
        indel_policy=args.indel_policy,
        label_column=args.label_column,
        build=args.build,
    )
    return IngestOptions(
        fmt=args.format,
        columns=_key_values(args.column),
        info_fields=args.info_field,
        label_source=args.label_source,
        clnsig_field=args.clnsig_field,
        clnsig_labels=clnsig or DEFAULT_CLNSIG_LABELS,
        policy=policy,
    )


# ---- stage commands ----------------------------------------------------------------------
def cmd_check_panel(args: argparse.Namespace) -> None:
    from .check import NothingScoreableError
    from .ingest import write_checked_panel
    from .reference import open_reference

    with open_reference(args.reference) as reference:
        try:
            summary = write_checked_panel(args.panel, reference, _ingest_options(args), args.out)
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
    from .windows import add_windows, assign_shards, unique_variants

    checked = pl.read_parquet(args.checked)
    window_bp = args.window_bp or DEFAULT_WINDOW_BP[args.recipe]
    with open_reference(args.reference) as reference:
        variants = add_windows(unique_variants(checked), reference.lengths, args.recipe, window_bp)
    sharded = assign_shards(variants, args.shard_size)
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


def _require_model_here(args: argparse.Namespace) -> None:
    """Fail in seconds, before torch is imported, when an offline job lacks its Hub model."""
    from huggingface_hub import constants

    from .hub import is_local_model, require_cached

    if constants.HF_HUB_OFFLINE and not is_local_model(args.model):
        require_cached(args.model, args.revision)


def _load_engine(args: argparse.Namespace):
    _require_model_here(args)
    from .engine import Engine, verify_output_layer
    from .model import ModelSpec, load_model, resolve_device

    resolve_device(args.device, job=getattr(args, "shard", None) or getattr(args, "command", None))
    spec = ModelSpec(args.model, args.revision, args.dtype, args.device, args.trust_remote_code)
    loaded = load_model(spec)
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=args.batch_size)
    verify_output_layer(engine, loaded.vocab.encode("ACGTAC" * 8))
    return engine


def cmd_score_shard(args: argparse.Namespace) -> None:
    shard = pl.read_parquet(args.shard)
    engine = _load_engine(args)  # first: a missing model cache or GPU fails before heavy work
    from .recipes import score_shard
    from .reference import open_reference

    recipe = _recipe(args)
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


def _write_task_result(result: dict, args: argparse.Namespace) -> None:
    """Name the result (task, model key, headline metrics, provenance), write it, log warnings."""
    result.update(
        task=args.task,
        model_key=args.model_key,
        headline_metrics=args.headline,
        provenance=_key_values(args.provenance),
    )
    atomic.write_json(result, args.metrics_out)
    for warning in result["warnings"]:
        log.warning(warning)


def _add_result_args(p: argparse.ArgumentParser, headline: list[str]) -> None:
    p.add_argument("--task", required=True, help="task / dataset name in the results table")
    p.add_argument("--model-key", required=True, help="model name in the results table")
    p.add_argument("--headline", nargs="+", default=headline, help="headline metric names")
    p.add_argument("--bootstrap", type=int, default=1000, help="resamples for 95%% intervals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--provenance", action="append", default=[], help="KEY=VALUE")


def cmd_metrics(args: argparse.Namespace) -> None:
    from .metrics import DEFAULT_NEGATIVE, DEFAULT_POSITIVE, MetricOptions, vep_metrics

    options = MetricOptions(
        positive=args.positive or DEFAULT_POSITIVE,
        negative=args.negative or DEFAULT_NEGATIVE,
        bootstrap=args.bootstrap,
        seed=args.seed,
        breakdown_columns=args.breakdown,
        spearman_column=args.spearman_column,
    )
    _write_task_result(vep_metrics(pl.read_parquet(args.merged), args.label_column, options), args)


def cmd_score_recovery(args: argparse.Namespace) -> None:
    from .model import ModelSpec, load_model
    from .recovery import RecoverySettings, recover, recovery_metrics
    from .suite import read_task_table

    table = read_task_table(args.tasks_file, ["sequence", "label"])
    settings = RecoverySettings(
        args.decoder, args.max_prompt_bp, args.new_tokens, args.score_bp, args.batch_size
    )
    spec = ModelSpec(args.model, args.revision, args.dtype, args.device, args.trust_remote_code)
    predictions = recover(table, load_model(spec), settings)
    atomic.write_parquet(predictions, args.out)
    _write_task_result(recovery_metrics(predictions, settings, args.bootstrap, args.seed), args)


def cmd_score_perturbation(args: argparse.Namespace) -> None:
    from .perturbation import PerturbationSettings, perturbation_metrics, score_pairs
    from .suite import read_task_table

    table = read_task_table(args.tasks_file, ["original_sequence", "sequence"])
    settings = PerturbationSettings(args.scoring, args.normalization)
    pairs = score_pairs(table, _load_engine(args), settings)
    atomic.write_parquet(pairs, args.out)
    _write_task_result(perturbation_metrics(pairs, settings, args.bootstrap, args.seed), args)


def cmd_results_table(args: argparse.Namespace) -> None:
    from .suite import load_results, results_markdown, results_table

    results = load_results(args.metrics)
    table = results_table(results)
    atomic.write_parquet(table, args.out_parquet)
    with atomic.atomic_path(args.out_tsv) as tmp:
        table.write_csv(tmp, separator="\t")
    atomic.write_text(results_markdown(results), args.out_md)


def cmd_html_report(args: argparse.Namespace) -> None:
    from .report import load_run, render_html, render_summary

    run = load_run(args.metrics)
    atomic.write_text(render_html(run, args.title), args.out_html)
    atomic.write_text(render_summary(run, args.title), args.out_md)


def cmd_export_vcf(args: argparse.Namespace) -> None:
    from .exports import default_fields, write_results_vcf
    from .reference import open_reference

    with open_reference(args.reference) as reference:
        lengths = dict(reference.lengths)
    merged = pl.read_parquet(args.merged)
    fields = {**default_fields(merged), **_key_values(args.field)}
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

    fetch_hub_file(args.repo_id, args.filename, args.out, args.revision, args.repo_type)


def cmd_report(args: argparse.Namespace) -> None:
    from .report import render_report

    merged = pl.read_parquet(args.merged)
    metrics = json.loads(Path(args.metrics).read_text())
    atomic.write_text(render_report(merged, metrics, args.title), args.out)


def cmd_score(args: argparse.Namespace) -> None:
    """Every stage in one process, for use outside Snakemake."""
    from .ingest import ingest_panel
    from .merge import merge_scores
    from .recipes import score_shard
    from .reference import open_reference
    from .windows import add_windows, unique_variants

    recipe = _recipe(args)
    window_bp = args.context or DEFAULT_WINDOW_BP[args.recipe]
    with open_reference(args.reference) as reference:
        checked, _ = ingest_panel(args.panel, reference, _ingest_options(args))
        engine = _load_engine(args)  # after the panel checks, so bad input fails fast
        variants = add_windows(unique_variants(checked), reference.lengths, args.recipe, window_bp)
        scores = score_shard(variants, reference, engine, recipe)
    atomic.write_parquet(merge_scores(checked, [scores]), args.out)


def cmd_scan(args: argparse.Namespace) -> None:
    """Every possible SNV of a region: per-position probabilities and per-SNV scores."""
    from .reference import open_reference
    from .scan import parse_region, scan_region, snv_scores

    chrom, start, end = parse_region(args.region)
    engine = _load_engine(args)
    with open_reference(args.reference) as reference:
        if chrom not in reference.lengths:
            raise InputError(args.reference, f"contig {chrom!r} of --region not in the reference")
        positions = scan_region(
            engine, reference, chrom, start, end, args.tile_bp, args.min_context
        )
    atomic.write_parquet(positions, args.out)
    if args.snv_out:
        atomic.write_parquet(snv_scores(positions), args.snv_out)
    missing = (end - start) - positions.height
    log.info("scanned %d positions of %s", positions.height, args.region)
    if missing:
        log.warning("%d bases at the contig end fit no whole 6-mer tile: not scored", missing)


def cmd_fetch_model(args: argparse.Namespace) -> None:
    from .hub import fetch_snapshot, is_local_model

    if is_local_model(args.model):
        fetched = {"model": args.model, "local_directory": True}
    else:
        fetched = fetch_snapshot(args.model, args.revision)
        if args.revision is None:
            log.warning(
                "%s: no revision pinned, fetched commit %s of main; set `revision: %s` in the "
                "config so every run scores with the same weights",
                args.model, fetched["commit"], fetched["commit"],
            )  # fmt: skip
    atomic.write_json(fetched, args.out)
    log.info("model ready for offline jobs: %s", fetched)


def cmd_build_demo_model(args: argparse.Namespace) -> None:
    from .demo_model import build_demo_model

    build_demo_model(args.out)


# ---- parser ------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carbon-vep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("check-panel", help="check every panel row against the reference")
    _add_panel_args(p)
    p.add_argument("--reference", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--summary", required=True)
    p.set_defaults(func=cmd_check_panel)

    p = sub.add_parser("make-shards", help="build windows and group variants into shards")
    p.add_argument("--checked", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--recipe", required=True, choices=RECIPE_NAMES)
    p.add_argument("--window-bp", type=int, default=None, help="default: the recipe's published")
    p.add_argument("--shard-size", type=int, required=True)
    p.add_argument("--outdir", required=True)
    p.set_defaults(func=cmd_make_shards)

    p = sub.add_parser("score-shard", help="score one shard")
    p.add_argument("--shard", required=True)
    p.add_argument("--reference", required=True)
    _add_model_args(p)
    _add_recipe_args(p)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_score_shard)

    p = sub.add_parser("merge", help="join shard scores onto every checked row")
    p.add_argument("--checked", required=True)
    p.add_argument("--scores", nargs="*", default=[])
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("metrics", help="VEP metrics, intervals and status counts as JSON")
    p.add_argument("--merged", required=True)
    p.add_argument("--label-column", default=None)
    p.add_argument("--positive", nargs="*", default=None)
    p.add_argument("--negative", nargs="*", default=None)
    p.add_argument("--breakdown", nargs="*", default=["region", "variant_type", "consequence"])
    p.add_argument("--spearman-column", default=None, help="continuous score column (BRCA2 DMS)")
    _add_result_args(p, ["auroc"])
    p.add_argument("--out", dest="metrics_out", required=True)
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("score-recovery", help="sequence recovery (greedy generation) of a task")
    p.add_argument("--tasks-file", required=True, help="Parquet/TSV/CSV: sequence, label, type")
    _add_model_args(p)
    p.add_argument(
        "--decoder", default="token", choices=["token", "fns_marginal", "fns_conditional"]
    )
    p.add_argument("--max-prompt-bp", type=int, default=6144)
    p.add_argument("--new-tokens", type=int, default=5)
    p.add_argument("--score-bp", type=int, default=30)
    _add_result_args(p, ["accuracy"])
    p.add_argument("--out", required=True, help="per-row predictions Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    p.set_defaults(func=cmd_score_recovery)

    p = sub.add_parser("score-perturbation", help="perturbation pairs: S(original) > S(perturbed)")
    p.add_argument("--tasks-file", required=True, help="Parquet/TSV/CSV: original_sequence,...")
    _add_model_args(p)
    p.add_argument("--scoring", default="token", choices=["token", "bp"])
    p.add_argument("--normalization", default="full_vocab", choices=["full_vocab", "dna_block"])
    _add_result_args(p, ["accuracy"])
    p.add_argument("--out", required=True, help="per-pair Parquet")
    p.add_argument("--metrics", dest="metrics_out", required=True, help="metrics JSON")
    p.set_defaults(func=cmd_score_perturbation)

    p = sub.add_parser("results-table", help="tasks x headline metrics by model")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics JSON files")
    p.add_argument("--out-parquet", required=True)
    p.add_argument("--out-tsv", required=True)
    p.add_argument("--out-md", required=True)
    p.set_defaults(func=cmd_results_table)

    p = sub.add_parser("html-report", help="one self-contained HTML page for a run")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics JSON files")
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
    p.add_argument("--repo-id", required=True)
    p.add_argument("--filename", required=True, help="file in the repo, or a glob of Parquets")
    p.add_argument("--revision", default=None)
    p.add_argument("--repo-type", default="dataset")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_fetch_hub)

    p = sub.add_parser("report", help="Markdown report")
    p.add_argument("--merged", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--title", default="carbon-vep report")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("score", help="check, window and score a panel in one process")
    _add_panel_args(p)
    p.add_argument("--reference", required=True)
    _add_model_args(p)
    _add_recipe_args(p)
    p.add_argument("--context", type=int, default=None, help="window (centered) or context bp")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("scan", help="score every possible SNV of a region in one pass per tile")
    p.add_argument("--reference", required=True)
    p.add_argument("--region", required=True, help="CHROM:START-END, 1-based inclusive")
    _add_model_args(p)
    p.add_argument("--tile-bp", type=int, default=49_146)
    p.add_argument("--min-context", type=int, default=24_000)
    p.add_argument("--out", required=True, help="per-position Parquet")
    p.add_argument("--snv-out", default=None, help="per-SNV Parquet (3 rows per base)")
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser(
        "fetch-model", help="download a Hub model and its remote code into the local Hub cache"
    )
    p.add_argument("--model", required=True, help="Hub id (a local directory is left as is)")
    p.add_argument("--revision", default=None, help="commit, tag or branch (default: main)")
    p.add_argument("--out", required=True, help="JSON record of what was fetched")
    p.set_defaults(func=cmd_fetch_model)

    p = sub.add_parser("build-demo-model", help="build the tiny Carbon-shaped demo model")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_build_demo_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except InputError as err:
        log.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
