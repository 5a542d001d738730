"""Binary labels from ClinVar's clinical significance (INFO `CLNSIG`).

A CLNSIG value lists terms joined by `|` or `,` (e.g. `Pathogenic/Likely_pathogenic|risk_factor`,
`Likely_pathogenic,_low_penetrance`). Each term is looked up in the mapping as a whole, then as
its `/`-separated parts; terms the mapping does not name (risk_factor, drug_response, ...) are
ignored. The label is the one value the named terms agree on, null when none is named
(Uncertain_significance, not_provided, ...), and null with `label_conflict = true` when the terms
disagree or ClinVar itself says `Conflicting_...`. Conflicted rows are kept and left out of
metrics (metrics.py reads `label_conflict`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import polars as pl

from carbon_vep.config.run import setting_name
from carbon_vep.config.stages import CLNSIG_LABEL_COLUMN, clnsig_term_key
from carbon_vep.errors import InputError

CONFLICT_COLUMN = "label_conflict"
_TERM_SEPARATORS = re.compile(r"[|,]")


def clnsig_label(value: str | None, mapping: Mapping[str, int]) -> tuple[int | None, bool]:
    """(label or None, conflict) for one CLNSIG value."""
    if value is None:
        return None, False
    lookup = {clnsig_term_key(term): label for term, label in mapping.items()}
    terms = [t.strip(" _") for t in _TERM_SEPARATORS.split(str(value)) if t.strip(" _.")]
    keys = [clnsig_term_key(term) for term in terms]
    if any(key.startswith("conflicting") for key in keys):
        return None, True
    labels: set[int] = set()
    for key in keys:
        if key in lookup:
            labels.add(lookup[key])
        else:
            labels.update(lookup[p] for p in key.split("/") if p in lookup)
    if len(labels) > 1:
        return None, True
    return (labels.pop() if labels else None), False


def add_clnsig_labels(
    panel: pl.DataFrame, field: str, mapping: Mapping[str, int], source: str
) -> pl.DataFrame:
    """Add `label` (1 / 0 / null) and `label_conflict` from the CLNSIG column `field`."""
    if field not in panel.columns:
        raise InputError(
            source,
            f"{setting_name('label_source', 'clinvar_clnsig')} needs the INFO field "
            f"{field!r}, which the panel does not carry; name the field that holds ClinVar's "
            f"significance with {setting_name('clnsig_field')}",
        )
    if CLNSIG_LABEL_COLUMN in panel.columns:
        raise InputError(
            source,
            f"the panel already has a {CLNSIG_LABEL_COLUMN!r} column; with "
            f"{setting_name('label_source', 'clinvar_clnsig')} the label is derived from "
            "CLNSIG, so remove or rename it",
        )
    values = panel[field].cast(pl.Utf8)
    by_value = {v: clnsig_label(v, mapping) for v in values.drop_nulls().unique().to_list()}
    labels = {v: label for v, (label, _) in by_value.items()}  # ClinVar has few distinct
    conflicts = {v: conflict for v, (_, conflict) in by_value.items()}
    return panel.with_columns(
        values.replace_strict(labels, default=None, return_dtype=pl.Int8).alias(
            CLNSIG_LABEL_COLUMN
        ),
        values.replace_strict(conflicts, default=False, return_dtype=pl.Boolean)
        .fill_null(False)
        .alias(CONFLICT_COLUMN),
    )
