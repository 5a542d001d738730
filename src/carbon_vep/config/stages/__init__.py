"""The settings of each stage, defined once: type, default, meaning, CLI flag, config key.

One frozen dataclass per stage concern (declared with `config.fields.setting`), one module a
stage: how a model is loaded (`model`: `ModelSettings`, `VllmSettings`), how a panel is read
and labelled (`panel`: `PanelSettings`, `LabelSettings`), which recipe scores it and how its
variants are sharded (`scoring`: `RecipeSettings`, `ShardSettings`), how a scan is tiled, cut
into jobs and calibrated (`scan`: `TileSettings`, `ScanChunkSettings`, `CalibrationSettings`),
what metrics report (`metrics`: `MetricSettings`, `EvaluationSettings`) and the suite tasks
(`suite`: `RecoverySettings`, `PerturbationSettings`, `NiahSettings`). A stage command reads the
classes it needs (`fields.from_args`); the config entries that group them are in `config.entries`.

The rest of the package imports every name from here (`carbon_vep.config.stages`): the modules
are where a setting is written, this is where it is read.
"""

from carbon_vep.config.stages.metrics import EvaluationSettings, MetricSettings
from carbon_vep.config.stages.model import (
    DEFAULT_SPECULATIVE_TOKENS,
    GENERATION_ONLY,
    SPECULATIVE,
    ModelSettings,
    VllmSettings,
)
from carbon_vep.config.stages.panel import (
    CLNSIG_LABEL_COLUMN,
    DEFAULT_CLNSIG_LABELS,
    LabelSettings,
    PanelSettings,
    clnsig_term_key,
    commonest_label_values,
    label_classes,
    unmatched_label_counts,
)
from carbon_vep.config.stages.scan import CalibrationSettings, ScanChunkSettings, TileSettings
from carbon_vep.config.stages.scoring import RecipeSettings, ShardSettings
from carbon_vep.config.stages.suite import NiahSettings, PerturbationSettings, RecoverySettings

__all__ = [
    "CLNSIG_LABEL_COLUMN",
    "DEFAULT_CLNSIG_LABELS",
    "DEFAULT_SPECULATIVE_TOKENS",
    "GENERATION_ONLY",
    "SPECULATIVE",
    "CalibrationSettings",
    "EvaluationSettings",
    "LabelSettings",
    "MetricSettings",
    "ModelSettings",
    "NiahSettings",
    "PanelSettings",
    "PerturbationSettings",
    "RecipeSettings",
    "RecoverySettings",
    "ScanChunkSettings",
    "ShardSettings",
    "TileSettings",
    "VllmSettings",
    "clnsig_term_key",
    "commonest_label_values",
    "label_classes",
    "unmatched_label_counts",
]
