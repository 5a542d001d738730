"""The ingest stage in one call: read the panel, derive labels, check every row, summarize.

`check-panel` (the Snakemake rule) and the one-process `score` command both go through
`ingest_panel`, so a panel gets the same statuses either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from .check import CheckPolicy, check_panel, contig_length_mismatches, summarize
from .labels import DEFAULT_CLNSIG_LABELS, LABEL_COLUMN, add_clnsig_labels
from .panel import ALL_INFO, load_panel
from .reference import Reference, resolve_contigs

LABEL_SOURCES = ("column", "clinvar_clnsig")


@dataclass(frozen=True)
class IngestOptions:
    fmt: str = "auto"
    columns: Mapping[str, str] = field(default_factory=dict)
    info_fields: Sequence[str] = ()
    label_source: str = "column"  # or clinvar_clnsig: `label` derived from INFO CLNSIG
    clnsig_field: str = "CLNSIG"
    clnsig_labels: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_CLNSIG_LABELS))
    policy: CheckPolicy = field(default_factory=CheckPolicy)


def ingest_panel(
    panel_path: str | Path, reference: Reference, options: IngestOptions | None = None
) -> tuple[pl.DataFrame, dict]:
    """(checked table with every input row, summary) for a panel file against a reference."""
    options = options or IngestOptions()
    if options.label_source not in LABEL_SOURCES:
        raise ValueError(f"label_source must be one of {LABEL_SOURCES}")
    from_clnsig = options.label_source == "clinvar_clnsig"
    info_fields = list(options.info_fields)
    if from_clnsig and options.clnsig_field not in info_fields and ALL_INFO not in info_fields:
        info_fields.append(options.clnsig_field)
    panel = load_panel(panel_path, options.fmt, options.columns, info_fields)
    frame, policy = panel.frame, options.policy
    if from_clnsig:
        frame = add_clnsig_labels(
            frame, options.clnsig_field, options.clnsig_labels, str(panel_path)
        )
        policy = dataclasses.replace(policy, label_column=policy.label_column or LABEL_COLUMN)
    mapping = resolve_contigs(frame["chrom"].drop_nulls().unique().to_list(), reference.contigs)
    mismatches = contig_length_mismatches(panel.declared_lengths, mapping, reference)
    checked = check_panel(frame, reference, policy, mismatches)
    notes = panel.notes + [f"panel header: {m}" for m in mismatches]
    return checked, summarize(checked, panel_path, notes)
