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

log = logging.getLogger("carbon_vep")


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
    p.add_argument("--recipe", required=True, choices=["centered", "fns", "nexttoken"])
    p.add_argument(
        "--normalization",
        default="published",
        choices=["published", "full_vocab", "dna_block", "acgt_strings"],
    )
    p.add_argument("--rc-average", action="store_true")


def _add_panel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--panel", required=True)
    p.add_argument("--format", default="auto", choices=["auto", "vcf", "parquet", "tsv", "csv"])
    p.add_argument("--column", action="append", default=[], help="STANDARD=SOURCE column map")
    p.add_argument("--info-field", action="append", default=[], help="VCF INFO field to carry")
    p.add_argument("--min-ref-concordance", type=float, default=0.9)


# ---- stage commands ----------------------------------------------------------------------
def cmd_check_panel(args: argparse.Namespace) -> None:
    from .check import CheckPolicy, check_panel, summarize
    from .panel import read_panel
    from .reference import Reference

    panel = read_panel(args.panel, args.format, _key_values(args.column), args.info_field)
    with Reference(args.reference) as reference:
        checked = check_panel(panel, reference, CheckPolicy(args.min_ref_concordance))
    summary = summarize(checked, args.panel)
    atomic.write_parquet(checked, args.out)
    atomic.write_json(summary, args.summary)
    log.info("checked %d rows: %s", checked.height, summary["status_counts"])


def cmd_make_shards(args: argparse.Namespace) -> None:
    from .reference import Reference
    from .windows import DEFAULT_WINDOW_BP, add_windows, assign_shards, unique_variants

    checked = pl.read_parquet(args.checked)
    window_bp = args.window_bp or DEFAULT_WINDOW_BP[args.recipe]
    with Reference(args.reference) as reference:
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


def _load_engine(args: argparse.Namespace):
    from .engine import Engine, verify_output_layer
    from .model import ModelSpec, load_model

    spec = ModelSpec(args.model, args.revision, args.dtype, args.device, args.trust_remote_code)
    loaded = load_model(spec)
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=args.batch_size)
    verify_output_layer(engine, loaded.vocab.encode("ACGTAC" * 8))
    return engine


def cmd_score_shard(args: argparse.Namespace) -> None:
    from .recipes import Recipe, score_shard
    from .reference import Reference

    shard = pl.read_parquet(args.shard)
    engine = _load_engine(args)
    recipe = Recipe(args.recipe, args.normalization, args.rc_average)
    with Reference(args.reference) as reference:
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
    from .metrics import vep_metrics

    merged = pl.read_parquet(args.merged)
    kwargs = {}
    if args.positive:
        kwargs["positive"] = args.positive
    if args.negative:
        kwargs["negative"] = args.negative
    result = vep_metrics(merged, args.label_column, **kwargs)
    result["provenance"] = _key_values(args.provenance)
    atomic.write_json(result, args.out)
    for warning in result["warnings"]:
        log.warning(warning)


def cmd_report(args: argparse.Namespace) -> None:
    from .report import render_report

    merged = pl.read_parquet(args.merged)
    metrics = json.loads(Path(args.metrics).read_text())
    atomic.write_text(render_report(merged, metrics, args.title), args.out)


def cmd_score(args: argparse.Namespace) -> None:
    """Every stage in one process, for use outside Snakemake."""
    from .check import CheckPolicy, check_panel
    from .merge import merge_scores
    from .panel import read_panel
    from .recipes import Recipe, score_shard
    from .reference import Reference
    from .windows import DEFAULT_WINDOW_BP, add_windows, unique_variants

    panel = read_panel(args.panel, args.format, _key_values(args.column), args.info_field)
    engine = _load_engine(args)
    recipe = Recipe(args.recipe, args.normalization, args.rc_average)
    window_bp = args.context or DEFAULT_WINDOW_BP[args.recipe]
    with Reference(args.reference) as reference:
        checked = check_panel(panel, reference, CheckPolicy(args.min_ref_concordance))
        variants = add_windows(unique_variants(checked), reference.lengths, args.recipe, window_bp)
        scores = score_shard(variants, reference, engine, recipe)
    atomic.write_parquet(merge_scores(checked, [scores]), args.out)


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
    p.add_argument("--recipe", required=True, choices=["centered", "fns", "nexttoken"])
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

    p = sub.add_parser("metrics", help="AUROC / AUPRC and status counts as JSON")
    p.add_argument("--merged", required=True)
    p.add_argument("--label-column", default=None)
    p.add_argument("--positive", nargs="*", default=None)
    p.add_argument("--negative", nargs="*", default=None)
    p.add_argument("--provenance", action="append", default=[], help="KEY=VALUE")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_metrics)

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
