"""Variant panels scored: make-shards, score-shard and merge (the workflow's path), score (every
stage in one process), and annotate (lookup in a scan's outputs, no model)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import polars as pl

from carbon_vep import atomic
from carbon_vep.cli.common import check_output_files, log, recipe_windows
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import (
    LabelSettings,
    ModelSettings,
    PanelSettings,
    RecipeSettings,
    ShardSettings,
)
from carbon_vep.errors import InputError
from carbon_vep.model.job import load_engine


def add_make_shards(sub) -> None:
    p = sub.add_parser("make-shards", help="build windows and group variants into shards")
    p.add_argument("--checked", required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, RecipeSettings, ShardSettings)
    p.add_argument("--outdir", required=True)
    p.set_defaults(func=make_shards)


def make_shards(args: argparse.Namespace) -> None:
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scoring.make_shards import write_shards

    recipe, shards = from_args(args, RecipeSettings, ShardSettings)
    with open_reference(args.reference) as reference:
        lengths = reference.lengths

    def add_windows(variants: pl.DataFrame) -> pl.DataFrame:
        return recipe.definition.add_windows(variants, lengths, recipe.window_bp)

    variants, n_shards = write_shards(args.checked, args.outdir, add_windows, shards.shard_size)
    log.info("%d variants in %d shards", variants, n_shards)


def add_score_shard(sub) -> None:
    p = sub.add_parser("score-shard", help="score one shard")
    p.add_argument("--shard", required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, ModelSettings, RecipeSettings)
    p.add_argument("--out", required=True)
    p.set_defaults(func=score_shard)


def score_shard(args: argparse.Namespace) -> None:
    model, recipe = from_args(args, ModelSettings, RecipeSettings)
    check_output_files(args.out)
    shard = pl.read_parquet(args.shard)
    engine = load_engine(model, args.shard)  # first: a missing cache or GPU fails fast
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scoring.shard import score_shard

    with open_reference(args.reference) as reference:
        scores = score_shard(shard, reference, engine, recipe)
    atomic.write_parquet(scores, args.out)
    log.info("scored %d variants of %s", scores.height, args.shard)


def add_merge(sub) -> None:
    p = sub.add_parser("merge", help="join shard scores onto every checked row")
    p.add_argument("--checked", required=True)
    p.add_argument("--scores", nargs="*", default=[])
    p.add_argument("--out", required=True)
    p.set_defaults(func=merge)


def merge(args: argparse.Namespace) -> None:
    from carbon_vep.scoring.merge import MergeError, merge_score_files

    check_output_files(args.out)
    try:
        rows = merge_score_files(args.checked, args.scores, args.out)
    except MergeError as err:  # shards missing or scored twice: which files were given
        given = ", ".join(args.scores) or "none"
        raise InputError(
            args.checked,
            f"the shard scores do not match this checked panel: {err} "
            f"(score files: {given}); give every shard's scores once",
        ) from err
    log.info("merged %d rows", rows)


def add_score(sub) -> None:
    p = sub.add_parser("score", help="check, window and score a panel in one process")
    p.add_argument("--panel", required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, ModelSettings, PanelSettings, LabelSettings, RecipeSettings)
    p.add_argument("--out", required=True)
    p.set_defaults(func=score)


def score(args: argparse.Namespace) -> None:
    """Every stage in one process, for use outside Snakemake."""
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scoring.merge import merge_scores
    from carbon_vep.variants.ingest import ingest_panel
    from carbon_vep.variants.summary import NothingScoreableError, log_summary

    model, panel, labels, recipe = from_args(
        args, ModelSettings, PanelSettings, LabelSettings, RecipeSettings
    )
    check_output_files(args.out)
    with open_reference(args.reference) as reference:
        try:
            checked, summary = ingest_panel(args.panel, reference, panel, labels)
        except NothingScoreableError as err:  # say what the check found, then stop
            log_summary(err.summary or {})
            raise
        log_summary(summary)
        engine = load_engine(model, args.panel)  # after the panel checks: bad input fails fast
        from carbon_vep.scoring.shard import score_shard

        windows = recipe_windows(checked, reference, recipe)
        scores = score_shard(windows, reference, engine, recipe)
    atomic.write_parquet(merge_scores(checked, [scores]), args.out)


def add_annotate(sub) -> None:
    p = sub.add_parser("annotate", help="score a panel by lookup in a scan's outputs, no model")
    p.add_argument("--scan", required=True, help="a scan's output folder (holds scan.json)")
    p.add_argument("--panel", default=None, help="VCF/BCF, Parquet, TSV or CSV (ingested)")
    p.add_argument(
        "--reference",
        default=None,
        help="the panel's reference for the checks (default: the scan's, from its scan.json)",
    )
    p.add_argument("--checked", default=None, help="or: a checked panel (check-panel --out)")
    p.add_argument(
        "--calibration",
        default=None,
        help="the calibration folder whose PHRED and context means to use (default: the scan's "
        "own, SCAN/calibration; another must be of the same model and settings)",
    )
    add_flags(p, PanelSettings, LabelSettings)
    p.set_defaults(build=None)  # the scan's build unless given (and then it must agree)
    for action in p._actions:
        if action.dest == "build":
            action.help = "default: the scan's build (scan.json); given, it must name the same"
    p.add_argument("--out", required=True)
    p.set_defaults(func=annotate)


def annotate(args: argparse.Namespace) -> None:
    """A panel scored by lookup in a scan's outputs: no model. The scan's build and reference
    are used unless given; a `--build` of another assembly is refused. A `--panel` is checked
    into a folder beside the output first, removed after."""
    import tempfile

    from carbon_vep.scoring.annotate import annotate_checked, checked_file, read_scan, resolve_build

    record = read_scan(args.scan)
    args.build = resolve_build(record, args.build, args.scan)
    settings = from_args(args, PanelSettings, LabelSettings)
    check_output_files(args.out)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.checked-", dir=out.parent) as tmp:
        checked = checked_file(
            record, args.checked, args.panel, args.reference, settings, Path(tmp)
        )
        began = time.monotonic()
        n_rows = annotate_checked(checked, args.scan, out, args.reference, args.calibration)
        took = time.monotonic() - began
    counts = pl.scan_parquet(out).group_by("status").len().sort("status").collect()
    log.info(
        "annotated %d rows in %.2f s (lookup and merge; build %s): %s",
        n_rows,
        took,
        args.build,
        dict(counts.iter_rows()),
    )


COMMANDS = (add_make_shards, add_score_shard, add_merge, add_score, add_annotate)
