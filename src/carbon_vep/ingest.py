"""The ingest stage in one call: read the panel, derive labels, check every row, summarize.

`check-panel` (the Snakemake rule) and the one-process `score` command both go through
`ingest_panel`, so a panel gets the same statuses either way.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from .builds import check_reference_build
from .check import CheckPolicy, check_panel, contig_length_mismatches, summarize
from .config import LabelSettings, PanelSettings
from .contigs import resolve_contigs
from .labels import add_clnsig_labels
from .panel import ALL_INFO, load_panel
from .reference import Reference


def ingest_panel(
    panel_path: str | Path,
    reference: Reference,
    panel: PanelSettings,
    labels: LabelSettings | None = None,
) -> tuple[pl.DataFrame, dict]:
    """(checked table with every input row, summary) for a panel file against a reference."""
    labels = labels or LabelSettings()
    check_reference_build(panel.build, reference.lengths, reference.path)
    from_clnsig = labels.label_source == "clinvar_clnsig"
    info_fields = list(panel.info_fields)
    if from_clnsig and labels.clnsig_field not in info_fields and ALL_INFO not in info_fields:
        info_fields.append(labels.clnsig_field)
    loaded = load_panel(panel_path, panel.format, panel.columns, info_fields)
    frame = loaded.frame
    if from_clnsig:
        frame = add_clnsig_labels(frame, labels.clnsig_field, labels.clnsig_labels, str(panel_path))
    policy = CheckPolicy(
        min_ref_concordance=panel.min_ref_concordance,
        indel_policy=panel.indel_policy,
        label_column=labels.column,
        build=panel.build,
    )
    mapping = resolve_contigs(frame["chrom"].drop_nulls().unique().to_list(), reference.contigs)
    mismatches = contig_length_mismatches(loaded.declared_lengths, mapping, reference)
    checked = check_panel(frame, reference, policy, mismatches)
    notes = loaded.notes + [f"panel header: {m}" for m in mismatches]
    return checked, summarize(checked, panel_path, notes)
