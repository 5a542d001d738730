"""check-panel: every panel row checked against the reference, with a status and a reason."""

from __future__ import annotations

import argparse

from carbon_vep import atomic
from carbon_vep.cli.common import check_output_files
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import LabelSettings, PanelSettings
from carbon_vep.errors import InputError


def add_check_panel(sub) -> None:
    p = sub.add_parser("check-panel", help="check every panel row against the reference")
    p.add_argument("--panel", required=True)
    p.add_argument("--reference", required=True)
    add_flags(p, PanelSettings, LabelSettings)
    p.add_argument("--out", required=True)
    p.add_argument("--summary", required=True)
    p.set_defaults(func=check_panel)


def check_panel(args: argparse.Namespace) -> None:
    from carbon_vep.genome.reference import open_reference
    from carbon_vep.variants.ingest import write_checked_panel
    from carbon_vep.variants.summary import NothingScoreableError

    panel, labels = from_args(args, PanelSettings, LabelSettings)
    check_output_files(args.out, args.summary)
    with open_reference(args.reference) as reference:
        try:
            summary = write_checked_panel(args.panel, reference, panel, labels, args.out)
        except NothingScoreableError as err:  # the table is written: say why, then stop
            _checked_written(args, err.summary or {})
            raise InputError(
                err.path,
                f"{err.problem}; each row's status and reason are in {args.out} "
                f"(summary: {args.summary})",
            ) from err
    _checked_written(args, summary)


def _checked_written(args: argparse.Namespace, summary: dict) -> None:
    from carbon_vep.variants.summary import log_summary

    atomic.write_json(summary, args.summary)
    log_summary(summary)


COMMANDS = (add_check_panel,)
