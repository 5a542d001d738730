"""Scans: scan (one region, one process), and the whole-genome path the workflow runs:
plan-scan (the checkpoint), scan-chunk (one job per chunk), merge-scan (one per output file: a
large contig, or small contigs together), count-scan (one per output file: its SNVs counted for
the calibration), calibrate-scan (the rank scales and context means), write-scan-tsv (one per
output file) and summarize-scan; concat-scan for bcftools."""

from __future__ import annotations

import argparse

from carbon_vep.cli.common import add_no_index, pairs
from carbon_vep.config.fields import ConfigError, add_flags, from_args
from carbon_vep.config.stages import (
    CalibrationSettings,
    ModelSettings,
    ScanChunkSettings,
    TileSettings,
)


def add_scan(sub) -> None:
    p = sub.add_parser("scan", help="score every possible SNV of a region in one pass per tile")
    p.add_argument("--reference", required=True)
    p.add_argument("--region", required=True, help="CHROM:START-END, 1-based inclusive")
    add_flags(p, ModelSettings, TileSettings)
    p.add_argument("--out", required=True, help="per-position Parquet")
    p.add_argument("--snv-out", default=None, help="per-SNV Parquet (3 rows per base)")
    p.set_defaults(func=scan)


def scan(args: argparse.Namespace) -> None:
    from carbon_vep.scan.jobs import scan_region_files

    model, tiles = from_args(args, ModelSettings, TileSettings)
    scan_region_files(model, tiles, args.reference, args.region, args.out, args.snv_out)


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
    p.add_argument(
        "--model",
        action="append",
        default=[],
        help="KEY=PATH: the estimates, and tile_bp checked against a local model's context",
    )
    p.add_argument(
        "--demo-model",
        action="append",
        default=[],
        metavar="KEY",
        help="a --model KEY the run builds (build_demo): estimated at the demo model's shape",
    )
    p.add_argument(
        "--neutral-regions",
        default=None,
        help="the scan's neutral_regions BED, checked against the reference before any model "
        "job (contigs the reference lacks are ignored and named)",
    )
    p.add_argument("--title", default="scan")
    p.add_argument("--out", required=True, help="plan JSON")
    p.add_argument("--report", default=None, help="the plan as Markdown")
    p.set_defaults(func=plan_scan)


def plan_scan(args: argparse.Namespace) -> None:
    from carbon_vep.scan.jobs import write_plan

    tiles, chunks = from_args(args, TileSettings, ScanChunkSettings)
    models = pairs(args.model)
    unknown = sorted(set(args.demo_model) - set(models))
    if unknown:
        raise ConfigError(f"--demo-model {', '.join(unknown)}: no --model KEY=PATH of that key")
    text = write_plan(
        args.reference,
        args.regions,
        tiles,
        chunks,
        models,
        args.title,
        args.out,
        args.report,
        args.neutral_regions,
        args.demo_model,
    )
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
    from carbon_vep.scan.jobs import scan_plan_chunk

    (model,) = from_args(args, ModelSettings)
    scan_plan_chunk(model, args.plan, args.chunk, args.reference, args.out, args.stats)


def add_merge_scan(sub) -> None:
    p = sub.add_parser(
        "merge-scan", help="one output file of a scan (its contigs) from its chunks: Parquet"
    )
    p.add_argument("--plan", required=True, help="the scan's plan (plan-scan --out)")
    p.add_argument("--file", required=True, help="the plan's output file (a name in `files`)")
    p.add_argument("--chunks", nargs="+", required=True, help="chunk Parquet files, in order")
    p.add_argument("--out-parquet", required=True)
    p.set_defaults(func=merge_scan)


def merge_scan(args: argparse.Namespace) -> None:
    from carbon_vep.scan.jobs import merge_file

    merge_file(args.plan, args.file, args.chunks, args.out_parquet)


def add_count_scan(sub) -> None:
    p = sub.add_parser(
        "count-scan",
        help="one output file's SNVs counted per context cell and score (from its Parquet)",
    )
    p.add_argument("--parquet", required=True, help="the file's Parquet (merge-scan)")
    p.add_argument("--reference", required=True, help="the scan's reference (SNV contexts)")
    add_flags(p, ScanChunkSettings, CalibrationSettings)
    p.add_argument("--provenance", action="append", default=[], help="KEY=VALUE or JSON")
    p.add_argument("--out-counts", required=True, help="the file's SNVs per cell and score")
    p.set_defaults(func=count_scan)


def count_scan(args: argparse.Namespace) -> None:
    from carbon_vep.scan.jobs import count_file

    chunks, calibration = from_args(args, ScanChunkSettings, CalibrationSettings)
    provenance = pairs(args.provenance)
    count_file(
        args.parquet, args.reference, provenance, chunks.tsv_decimals, calibration, args.out_counts
    )


def add_calibrate_scan(sub) -> None:
    p = sub.add_parser(
        "calibrate-scan",
        help="a scan's rank scales (PHRED) and context means from every output file's counts",
    )
    p.add_argument("--counts", nargs="+", required=True, help="count-scan --out-counts files")
    add_flags(p, CalibrationSettings)
    p.add_argument("--out", required=True, help="the calibration folder (calibration.json, ...)")
    p.set_defaults(func=calibrate_scan)


def calibrate_scan(args: argparse.Namespace) -> None:
    from carbon_vep.scan.jobs import calibrate

    (settings,) = from_args(args, CalibrationSettings)
    calibrate(args.counts, settings, args.out)


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
    p.add_argument("--out-tsv", required=True, help="*.tsv.gz (index: .tbi; .csi past 2^29 bp)")
    add_no_index(p)
    p.set_defaults(func=write_scan_tsv)


def write_scan_tsv(args: argparse.Namespace) -> None:
    from carbon_vep.scan.jobs import FileJob, write_file_tsv

    (settings,) = from_args(args, CalibrationSettings)
    job = FileJob(args.plan, args.file, args.reference, pairs(args.provenance))
    write_file_tsv(job, args.parquet, args.calibration, settings, args.out_tsv, not args.no_index)


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
    from carbon_vep.scan.jobs import ScanParts, write_summary

    parts = ScanParts(args.plan, args.chunk_stats, args.parquet, args.tsv, args.calibration)
    provenance = pairs(args.provenance)
    write_summary(parts, args.title, provenance, args.out_json, args.out_md, args.out_record)


def add_concat_scan(sub) -> None:
    p = sub.add_parser(
        "concat-scan", help="a scan's tabix TSVs as one file (for `bcftools annotate -a`)"
    )
    p.add_argument("--scan", required=True, help="a scan's output folder (holds scan.json)")
    p.add_argument("--out", required=True, help="*.tsv.gz (index: .tbi; .csi past 2^29 bp)")
    p.set_defaults(func=concat_scan)


def concat_scan(args: argparse.Namespace) -> None:
    from carbon_vep.scan.jobs import concat_scan_tsv

    concat_scan_tsv(args.scan, args.out)


COMMANDS = (
    add_scan,
    add_plan_scan,
    add_scan_chunk,
    add_merge_scan,
    add_count_scan,
    add_calibrate_scan,
    add_write_scan_tsv,
    add_summarize_scan,
    add_concat_scan,
)
