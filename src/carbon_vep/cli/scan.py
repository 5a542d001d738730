"""Scans: scan (one region, one process), and the whole-genome path the workflow runs:
plan-scan (the checkpoint), scan-chunk (one job per chunk), merge-scan (one per output file: a
large contig, or small contigs together), calibrate-scan (the rank scales and context means),
write-scan-tsv (one per output file) and summarize-scan; concat-scan for bcftools."""

from __future__ import annotations

import argparse

from carbon_vep import atomic
from carbon_vep.cli.common import log, pairs
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import (
    CalibrationSettings,
    ModelSettings,
    ScanChunkSettings,
    TileSettings,
)
from carbon_vep.errors import InputError
from carbon_vep.model.job import load_engine


def add_scan(sub) -> None:
    p = sub.add_parser("scan", help="score every possible SNV of a region in one pass per tile")
    p.add_argument("--reference", required=True)
    p.add_argument("--region", required=True, help="CHROM:START-END, 1-based inclusive")
    add_flags(p, ModelSettings, TileSettings)
    p.add_argument("--out", required=True, help="per-position Parquet")
    p.add_argument("--snv-out", default=None, help="per-SNV Parquet (3 rows per base)")
    p.set_defaults(func=scan)


def scan(args: argparse.Namespace) -> None:
    """Every possible SNV of a region: per-position probabilities and per-SNV scores."""
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scan.tiling import parse_region

    model, tiles = from_args(args, ModelSettings, TileSettings)
    chrom, start, end = parse_region(args.region)
    engine = load_engine(model, args.region)
    from carbon_vep.scan.tiles import scan_region, snv_scores

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


def add_plan_scan(sub) -> None:
    p = sub.add_parser("plan-scan", help="split a scan's regions into chunks (one job each)")
    p.add_argument("--reference", required=True)
    p.add_argument(
        "--regions",
        nargs="+",
        required=True,
        help="`all`, contig names, CHROM:START-END (1-based inclusive) or BED files",
    )
    add_flags(p, TileSettings, ScanChunkSettings)
    p.add_argument("--model", action="append", default=[], help="KEY=PATH, for the estimates")
    p.add_argument("--title", default="scan")
    p.add_argument("--out", required=True, help="plan JSON")
    p.add_argument("--report", default=None, help="the plan as Markdown")
    p.set_defaults(func=plan_scan)


def plan_scan(args: argparse.Namespace) -> None:
    """Targets -> chunks (one job each), with counts and estimates printed before any model job."""
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scan.plan import describe_plan, plan_scan, resolve_targets

    tiles, chunks = from_args(args, TileSettings, ScanChunkSettings)
    with open_reference(args.reference) as reference:
        targets = resolve_targets(args.regions, reference.lengths)
        plan = plan_scan(reference, targets, tiles, chunks, pairs(args.model))
    atomic.write_json(plan, args.out)
    text = describe_plan(plan, f"scan plan: {args.title}")
    if args.report:
        atomic.write_text(text, args.report)
    print(text, end="")


def add_scan_chunk(sub) -> None:
    p = sub.add_parser("scan-chunk", help="score one chunk of a scan plan (streamed Parquet)")
    p.add_argument("--plan", required=True)
    p.add_argument("--chunk", type=int, required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, ModelSettings)
    p.add_argument("--out", required=True, help="per-base Parquet of the chunk")
    p.add_argument("--stats", required=True, help="JSON: bases, wall and forward-pass seconds")
    p.set_defaults(func=scan_chunk)


def scan_chunk(args: argparse.Namespace) -> None:
    """One chunk of a scan plan, streamed to Parquet row groups."""
    from carbon_vep.scan.outputs import read_json
    from carbon_vep.scan.plan import chunk_pieces

    (model,) = from_args(args, ModelSettings)
    plan = read_json(args.plan)
    tiles = TileSettings(plan["tile_bp"], plan["min_context"])
    pieces = chunk_pieces(plan, args.chunk)
    engine = load_engine(model, f"{args.plan} chunk {args.chunk}")
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scan.tiles import scan_chunk_file

    with open_reference(args.reference) as reference:
        stats = scan_chunk_file(engine, reference, pieces, tiles, args.out, f"chunk {args.chunk}")
    atomic.write_json({"chunk": args.chunk, **stats}, args.stats)
    log.info("chunk %d: %d bases in %.1f s", args.chunk, stats["bases"], stats["wall_s"])


def add_merge_scan(sub) -> None:
    p = sub.add_parser(
        "merge-scan",
        help="one output file of a scan (its contigs): Parquet + the calibration's counts",
    )
    p.add_argument("--plan", required=True, help="the scan's plan (plan-scan --out)")
    p.add_argument("--file", required=True, help="the plan's output file (a name in `files`)")
    p.add_argument("--chunks", nargs="+", required=True, help="chunk Parquet files, in order")
    p.add_argument("--reference", required=True, help="the scan's reference (SNV contexts)")
    add_flags(p, ScanChunkSettings, CalibrationSettings)
    p.add_argument("--provenance", action="append", default=[], help="KEY=VALUE or JSON")
    p.add_argument("--out-parquet", required=True)
    p.add_argument("--out-counts", required=True, help="the file's SNVs per cell and score")
    p.set_defaults(func=merge_scan)


def merge_scan(args: argparse.Namespace) -> None:
    """The rows of one output file's contigs in the chunks -> its Parquet file and counts."""
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scan.calibrate import counts_meta
    from carbon_vep.scan.outputs import merge_plan_file, read_json
    from carbon_vep.scan.plan import plan_file

    chunks, calibration = from_args(args, ScanChunkSettings, CalibrationSettings)
    entry = plan_file(read_json(args.plan), args.file)
    meta = counts_meta(pairs(args.provenance), chunks.tsv_decimals, calibration.neutral_regions)
    with open_reference(args.reference) as reference:
        stats = merge_plan_file(
            entry,
            args.chunks,
            args.out_parquet,
            args.out_counts,
            meta,
            reference,
            calibration.neutral_regions,
        )
    log.info("merged %s: %s", args.file, stats)


def add_calibrate_scan(sub) -> None:
    p = sub.add_parser(
        "calibrate-scan",
        help="a scan's rank scales (PHRED) and context means from every output file's counts",
    )
    p.add_argument("--counts", nargs="+", required=True, help="merge-scan --out-counts files")
    add_flags(p, CalibrationSettings)
    p.add_argument("--out", required=True, help="the calibration folder (calibration.json, ...)")
    p.set_defaults(func=calibrate_scan)


def calibrate_scan(args: argparse.Namespace) -> None:
    from carbon_vep.scan.calibrate import Calibration, read_counts

    (settings,) = from_args(args, CalibrationSettings)
    counts, neutral, meta = read_counts(args.counts)
    calibration = Calibration.build(counts, neutral, meta, settings.context_min_count)
    calibration.write(args.out)
    log.info("calibrated %s SNVs: %s", f"{calibration.raw.total:,}", calibration.thresholds())


def add_write_scan_tsv(sub) -> None:
    p = sub.add_parser(
        "write-scan-tsv", help="one output file's tabix TSV: score and PHRED for every SNV"
    )
    p.add_argument("--plan", required=True, help="the scan's plan (plan-scan --out)")
    p.add_argument("--file", required=True, help="the plan's output file (a name in `files`)")
    p.add_argument("--parquet", required=True, help="the file's Parquet (merge-scan)")
    p.add_argument("--calibration", required=True, help="the scan's calibration folder")
    p.add_argument("--reference", required=True, help="the scan's reference (SNV contexts)")
    add_flags(p, CalibrationSettings)
    p.add_argument("--provenance", action="append", default=[], help="KEY=VALUE or JSON")
    p.add_argument("--out-tsv", required=True, help="*.tsv.gz (index: *.tsv.gz.tbi)")
    p.set_defaults(func=write_scan_tsv)


def write_scan_tsv(args: argparse.Namespace) -> None:
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.scan.calibrate import Calibration
    from carbon_vep.scan.outputs import read_json, write_tsv
    from carbon_vep.scan.plan import plan_file

    (settings,) = from_args(args, CalibrationSettings)
    entry = plan_file(read_json(args.plan), args.file)
    provenance = pairs(args.provenance)
    calibration = Calibration.read(args.calibration)
    calibration.check_fingerprint(provenance, args.calibration)
    with open_reference(args.reference) as reference:
        stats = write_tsv(
            args.parquet,
            entry["contigs"],
            args.out_tsv,
            provenance,
            calibration,
            reference,
            settings.tsv_calibrated,
        )
    log.info("wrote %s: %s", args.out_tsv, stats)


def add_summarize_scan(sub) -> None:
    p = sub.add_parser("summarize-scan", help="a scan's final summary (JSON and Markdown)")
    p.add_argument("--plan", required=True)
    p.add_argument("--chunk-stats", nargs="+", required=True)
    p.add_argument("--parquet", nargs="+", required=True)
    p.add_argument("--tsv", nargs="+", required=True)
    p.add_argument("--calibration", required=True, help="the scan's calibration folder")
    p.add_argument("--title", default="scan")
    p.add_argument(
        "--provenance",
        action="append",
        default=[],
        help="KEY=VALUE or JSON: the scan's build, model, ... (recorded in --out-record)",
    )
    p.add_argument("--out-json", required=True)
    p.add_argument("--out-md", required=True)
    p.add_argument("--out-record", default=None, help="scan.json: what annotate reads")
    p.set_defaults(func=summarize_scan)


def summarize_scan(args: argparse.Namespace) -> None:
    from carbon_vep.scan.calibrate import Calibration, contexts_markdown
    from carbon_vep.scan.outputs import read_json, scan_record, summarize, summary_markdown
    from carbon_vep.scan.plan import describe_plan

    plan = read_json(args.plan)
    stats = [read_json(p) for p in args.chunk_stats]
    calibration = Calibration.read(args.calibration)
    summary = summarize(plan, stats, args.parquet, args.tsv, calibration)
    if args.out_record:
        atomic.write_json(scan_record(plan, pairs(args.provenance)), args.out_record)
    atomic.write_json(summary, args.out_json)
    plan_text = describe_plan(plan, f"scan plan: {args.title}")
    text = summary_markdown(summary, plan_text, contexts_markdown(calibration))
    atomic.write_text(text, args.out_md)


def add_concat_scan(sub) -> None:
    p = sub.add_parser(
        "concat-scan", help="a scan's tabix TSVs as one file (for `bcftools annotate -a`)"
    )
    p.add_argument("--scan", required=True, help="a scan's output folder (holds scan.json)")
    p.add_argument("--out", required=True, help="*.tsv.gz (index: *.tsv.gz.tbi)")
    p.set_defaults(func=concat_scan)


def concat_scan(args: argparse.Namespace) -> None:
    """Every tabix TSV of a scan in one file, reference order, one header."""
    from carbon_vep.scan.outputs import concat_tsv

    if not args.out.endswith(".gz"):
        raise InputError(args.out, "the output is bgzipped and tabix-indexed: name it *.tsv.gz")
    stats = concat_tsv(args.scan, args.out)
    log.info("wrote %s: %s", args.out, stats)


COMMANDS = (
    add_scan,
    add_plan_scan,
    add_scan_chunk,
    add_merge_scan,
    add_calibrate_scan,
    add_write_scan_tsv,
    add_summarize_scan,
    add_concat_scan,
)
