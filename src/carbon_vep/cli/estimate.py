"""estimate: the bill before the run (files to fetch, jobs per rule, GPU-hours per task and
model) of a workflow config under a profile, printed before anything runs."""

from __future__ import annotations

import argparse
import sys


def add_estimate(sub) -> None:
    p = sub.add_parser(
        "estimate",
        help="what a config will fetch, run and cost in GPU-hours (arithmetic), before it runs",
    )
    p.add_argument("--config", required=True, help="workflow config YAML (config/suite.yaml)")
    p.add_argument(
        "--profile",
        default=None,
        help="Snakemake profile folder (profiles/slurm-h100): the GPU class of each rule and its "
        "`config:` overrides; without it, CUDA models are reckoned on an A10",
    )
    p.set_defaults(func=estimate)


def estimate(args: argparse.Namespace) -> None:
    from carbon_vep.estimate.table import bill_text

    sys.stdout.write(bill_text(args.config, args.profile))


COMMANDS = (add_estimate,)
