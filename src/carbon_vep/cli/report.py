"""What users read and the field's tools load: results-table, html-report, report (one
dataset's Markdown), export-vcf, export-tabix, index-tabix (the index of a file written without
it: the workflow's own job), export-tracks (genome-browser tracks of a scan) and doc-tables
(the generated tables of the documentation)."""

from __future__ import annotations

import argparse
from pathlib import Path

from carbon_vep.cli.common import add_no_index, pairs
from carbon_vep.config.entries import TRACK_REFERENCES
from carbon_vep.config.fields import ConfigError, add_flags, flat_fields, from_args
from carbon_vep.config.stages import PanelSettings
from carbon_vep.errors import InputError


def add_results_table(sub) -> None:
    p = sub.add_parser("results-table", help="tasks x headline metrics by model")
    p.add_argument("--metrics", nargs="+", required=True, help="metrics JSON files")
    p.add_argument("--out-parquet", required=True)
    p.add_argument("--out-tsv", required=True)
    p.add_argument("--out-md", required=True)
    p.set_defaults(func=results_table)


def results_table(args: argparse.Namespace) -> None:
    from carbon_vep.report.results_table import write_results_table

    write_results_table(args.metrics, args.out_parquet, args.out_tsv, args.out_md)


def add_html_report(sub) -> None:
    p = sub.add_parser("html-report", help="one self-contained HTML page for a run")
    p.add_argument("--metrics", nargs="*", default=[], help="metrics JSON files")
    p.add_argument(
        "--rows", nargs="*", default=[], help="each metrics file's row file, in the same order"
    )
    p.add_argument("--results-table", default=None, help="results_table.parquet of the run")
    p.add_argument("--results-table-md", default=None, help="results_table.md of the run")
    p.add_argument(
        "--scan",
        action="append",
        default=[],
        help="a scan's output folder (summary.json, calibration/): its calibration is shown",
    )
    p.add_argument(
        "--published-niah",
        help="published Genomic-NIAH exact match (baselines/published_niah.yaml), drawn beside "
        "a model of the same key",
    )
    p.add_argument(
        "--sweep-metrics",
        action="append",
        default=[],
        help="a sweep point's metrics JSON (repeatable): drawn beside its task, not a table row",
    )
    p.add_argument("--title", default="carbon-vep run report")
    p.add_argument("--out-html", required=True)
    p.add_argument("--out-md", required=True)
    p.set_defaults(func=html_report)


def html_report(args: argparse.Namespace) -> None:
    from carbon_vep.report.html import write_html_report

    write_html_report(
        args.metrics,
        args.rows,
        args.results_table,
        args.results_table_md,
        args.scan,
        args.published_niah,
        args.sweep_metrics,
        args.title,
        args.out_html,
        args.out_md,
    )


def add_report(sub) -> None:
    p = sub.add_parser("report", help="Markdown report")
    p.add_argument("--merged", required=True)
    p.add_argument("--metrics", required=True)
    p.add_argument("--title", default="carbon-vep report")
    p.add_argument("--out", required=True)
    p.set_defaults(func=report)


def report(args: argparse.Namespace) -> None:
    from carbon_vep.report.markdown import write_report

    write_report(args.merged, args.metrics, args.title, args.out)


def add_export_vcf(sub) -> None:
    p = sub.add_parser("export-vcf", help="a panel's results as a VCF, scores in INFO")
    p.add_argument("--merged", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument(
        "--panel",
        help="the panel the results are of, with its settings as check-panel takes them "
        "(--settings, --build, --info-field, ...): its requested INFO fields are carried, "
        "declared as its header declares them; without it, none are carried",
    )
    add_flags(p, PanelSettings)
    p.add_argument(
        "--field",
        action="append",
        default=[],
        help="another column of --merged as INFO, COLUMN=DESCRIPTION (repeatable)",
    )
    p.add_argument(
        "--out",
        required=True,
        help=".vcf, or .vcf.gz (bgzipped + tabix index: .tbi; .csi past 2^29 bp)",
    )
    add_no_index(p)
    p.set_defaults(func=export_vcf)


def export_vcf(args: argparse.Namespace) -> None:
    from carbon_vep.report.vcf_export import export_vcf

    settings = None
    if args.panel is not None:
        (settings,) = from_args(args, PanelSettings)
    elif args.settings is not None or any(
        f.name in vars(args) for f, _ in flat_fields(PanelSettings)
    ):
        raise ConfigError("export-vcf: the panel's settings are given without --panel")
    export_vcf(
        args.merged,
        args.reference,
        pairs(args.field),
        args.out,
        args.panel,
        settings,
        index=not args.no_index,
    )


def add_export_tabix(sub) -> None:
    p = sub.add_parser("export-tabix", help="per-SNV scores as a bgzipped, tabix-indexed TSV")
    p.add_argument("--scores", required=True, help="Parquet with chrom, pos, ref, alt, ...")
    p.add_argument(
        "--column",
        action="append",
        required=True,
        help="value column to export (repeatable: one --column a column, in this order)",
    )
    p.add_argument("--reference", default=None, help="FASTA whose contig order to follow")
    p.add_argument("--out", required=True, help="*.tsv.gz (index: .tbi; .csi past 2^29 bp)")
    p.set_defaults(func=export_tabix)


def export_tabix(args: argparse.Namespace) -> None:
    from carbon_vep.report.exports import export_tabix

    export_tabix(args.scores, args.column, args.reference, args.out)


def add_index_tabix(sub) -> None:
    p = sub.add_parser(
        "index-tabix",
        help="tabix-index a bgzipped VCF (*.vcf.gz) or `#chrom pos` table (a scan's TSV) "
        "written with --no-index",
    )
    p.add_argument("--file", required=True, help="the bgzipped file")
    p.add_argument(
        "--out",
        required=True,
        help="FILE.tbi, or FILE.csi (a .tbi cannot hold a position past 2^29 bp: refused)",
    )
    p.set_defaults(func=index_tabix)


def index_tabix(args: argparse.Namespace) -> None:
    from carbon_vep.atomic import TbiRangeError, index_tabix

    try:
        index_tabix(args.file, args.out)
    except TbiRangeError as err:  # a .tbi asked for data it cannot hold
        raise InputError(args.file, str(err)) from None
    except ValueError as err:  # not an index name beside the file
        raise InputError(args.out, str(err)) from None


def add_export_tracks(sub) -> None:
    p = sub.add_parser(
        "export-tracks",
        help="genome-browser tracks of a scan: bigWig per alternative base, PHRED, max and "
        "surprise, a UCSC track hub and IGV sessions (docs/tracks.md)",
    )
    p.add_argument("--scan", required=True, help="a scan's output folder (scans/<scan>/<model>)")
    p.add_argument("--out", required=True, help="the tracks folder (written)")
    p.add_argument(
        "--track",
        action="append",
        default=None,
        help="write only this track's bigWig (repeatable; no hub)",
    )
    p.add_argument(
        "--hub-only",
        action="store_true",
        help="only the hub and IGV files, beside bigWigs already written",
    )
    p.add_argument("--email", default=None, help="contact in the hub's hub.txt")
    p.add_argument(
        "--reference-mode",
        default="auto",
        choices=TRACK_REFERENCES,
        help="how the IGV sessions name the reference (a scan's tracks_reference; default: auto)",
    )
    p.set_defaults(func=export_tracks)


def export_tracks(args: argparse.Namespace) -> None:
    from carbon_vep.report.track_hub import export_scan_tracks

    export_scan_tracks(
        args.scan, args.out, args.track, args.hub_only, args.email, args.reference_mode
    )


def add_doc_tables(sub) -> None:
    p = sub.add_parser(
        "doc-tables",
        help="rewrite the generated tables of the documentation pages (README.md, docs/*.md, "
        "config/README.md)",
    )
    p.add_argument(
        "pages",
        nargs="*",
        type=Path,
        help="pages to rewrite (default: every page of the repository around the current folder)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="rewrite nothing; exit 1 when a page's generated table is stale",
    )
    p.set_defaults(func=doc_tables)


def doc_tables(args: argparse.Namespace) -> int:
    from carbon_vep.report.doc_tables import rewrite_pages

    stale = rewrite_pages(args.pages, args.check)
    return 1 if args.check and stale else 0


COMMANDS = (
    add_export_tracks,
    add_results_table,
    add_html_report,
    add_report,
    add_export_vcf,
    add_export_tabix,
    add_index_tabix,
    add_doc_tables,
)
