"""`carbon-vep` command line: one subcommand per pipeline stage (the Snakemake rules call these).

Each module of this package defines its stage's subcommands, each parser next to the command it
runs. A stage's options come from the settings it reads (`carbon_vep.config`: one definition of
each setting, its flag and its default); a rule passes them as one JSON object (`--settings`),
and options given on the command line override it. Commands import what they need when they
run, so the stages that need no model never import torch.

May import: every stage but `benchmark`.
"""

from __future__ import annotations

import argparse
import logging

from carbon_vep.cli import (
    estimate,
    evaluate,
    niah,
    report,
    scan,
    scoring,
    sources,
    suite,
    variants,
)
from carbon_vep.config.fields import ConfigError
from carbon_vep.errors import (
    ContextTooLongError,
    EngineError,
    InputError,
    TokenizerMismatchError,
    UnsupportedModelError,
)
from carbon_vep.model.job_record import job_record

log = logging.getLogger("carbon_vep")
STAGES = (variants, scoring, scan, evaluate, suite, niah, report, sources, estimate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carbon-vep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for stage in STAGES:
        for add_command in stage.COMMANDS:
            add_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    try:
        with job_record(args.command, getattr(args, "out", None)):  # a model job's count
            code = args.func(args)  # a gate (compare) returns its verdict
    except (
        InputError,
        ConfigError,
        TokenizerMismatchError,
        EngineError,
        ContextTooLongError,
        UnsupportedModelError,
    ) as err:
        log.error("%s", err)
        return 2
    except (IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError) as err:
        log.error("%s: %s", err.filename, err.strerror)  # a path that cannot be written
        return 2
    return code or 0
