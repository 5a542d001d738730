"""What a panel check needs of a dataset's settings (`PanelSettings`, `LabelSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from carbon_vep.config.fields import default_of
from carbon_vep.config.stages import LabelSettings, PanelSettings

INDEL_POLICIES = ("skip",)
_PANEL_DEFAULTS = {f.name: default_of(f) for f in fields(PanelSettings)}


@dataclass(frozen=True)
class CheckPolicy:
    """What `check_panel` needs of a dataset's settings (defaults: `PanelSettings`'s)."""

    min_ref_concordance: float = _PANEL_DEFAULTS["min_ref_concordance"]
    indel_policy: str = _PANEL_DEFAULTS["indel_policy"]
    label_column: str | None = None  # duplicates whose labels differ get label_conflict
    build: str | None = None  # the dataset's declared build, named in error messages
    min_rows_for_concordance: int = 20  # fewer SNVs whose REF was checked prove nothing

    @classmethod
    def from_settings(cls, panel: PanelSettings, labels: LabelSettings) -> CheckPolicy:
        return cls(
            min_ref_concordance=panel.min_ref_concordance,
            indel_policy=panel.indel_policy,
            label_column=labels.column,
            build=panel.build,
        )
