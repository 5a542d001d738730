"""What a panel check needs of a dataset's settings (`PanelSettings`, `LabelSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from carbon_vep.config.fields import default_of
from carbon_vep.config.stages import LabelSettings, PanelSettings

INDEL_POLICIES = ("skip",)
_PANEL_DEFAULTS = {f.name: default_of(f) for f in fields(PanelSettings)}
_LABEL_DEFAULTS = {f.name: default_of(f) for f in fields(LabelSettings)}


@dataclass(frozen=True)
class CheckPolicy:
    """What `check_panel` needs of a dataset's settings (defaults: `PanelSettings`'s)."""

    min_ref_concordance: float = _PANEL_DEFAULTS["min_ref_concordance"]
    indel_policy: str = _PANEL_DEFAULTS["indel_policy"]
    label_column: str | None = None  # duplicates labelled positive and negative: label_conflict
    positive_labels: tuple[str, ...] = _LABEL_DEFAULTS["positive_labels"]
    negative_labels: tuple[str, ...] = _LABEL_DEFAULTS["negative_labels"]
    build: str | None = None  # the dataset's declared build, named in error messages
    # The build / 0-based check (`genome_match.assert_build_matches`): from this many rows whose
    # REF was compared with the reference, concordance below min_ref_concordance aborts ...
    min_rows_for_concordance: int = 20
    # ... below it, from this many rows, only strong evidence does: REF matching at POS+1 or
    # POS-1 as a whole panel would need, or no better than this at POS (chance is about 0.3);
    # anything else is a note in the summary and a warning
    min_rows_for_evidence: int = 5
    max_chance_concordance: float = 0.5

    @classmethod
    def from_settings(cls, panel: PanelSettings, labels: LabelSettings) -> CheckPolicy:
        return cls(
            min_ref_concordance=panel.min_ref_concordance,
            indel_policy=panel.indel_policy,
            label_column=labels.column,
            positive_labels=labels.positive_labels,
            negative_labels=labels.negative_labels,
            build=panel.build,
        )
