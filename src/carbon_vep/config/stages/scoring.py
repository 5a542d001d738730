"""Which recipe scores a dataset and its options (`RecipeSettings`, with the scan recipe's
tiles), and how its variants are grouped into shards (`ShardSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from carbon_vep.config.fields import ConfigError, describe, field_named, group, setting
from carbon_vep.config.recipes import NORMALIZATIONS, PUBLISHED, RECIPES, Recipe
from carbon_vep.config.stages.scan import TileSettings


@dataclass(frozen=True)
class RecipeSettings:
    """Which recipe scores a dataset, and its options (make-shards, score-shard, score)."""

    recipe: str = setting(
        choices=tuple(RECIPES),
        help="; ".join(f"{r.name}: {r.summary}" for r in RECIPES.values()),
    )
    normalization: str = setting(
        PUBLISHED,
        choices=(PUBLISHED, *NORMALIZATIONS),
        help="published = the recipe's published one; or another the recipe computes: "
        + "; ".join(f"{r.name}: {', '.join(r.normalizations)}" for r in RECIPES.values()),
    )
    window_bp: int | None = setting(
        None,
        minimum=6,
        help="window length: the centered window (centered, fns) or the left context "
        "(nexttoken, scan); default: the recipe's published one; from_scan cuts no window "
        "(refused there)",
    )
    rc_average: bool = setting(
        False, help="average with the reverse-complement delta (centered and fns only)"
    )
    share_prefix: bool = setting(
        True, help="score alternates from the reference prefix's KV cache (same values)"
    )
    tiles: TileSettings = group(TileSettings)  # the scan recipe's tiles
    scan: str | None = setting(
        None,
        help="recipe from_scan: the key of the scan (in `scans:`) whose outputs the panel is "
        "looked up in, no model (each of the dataset's models needs that scan)",
    )

    def __post_init__(self) -> None:
        problem = self.definition.unsupported_normalization(self.normalization)
        if problem:  # rows must never name a normalisation their scorer did not compute
            normalization = field_named(self, "normalization")
            raise ConfigError(f"{describe(normalization, self.normalization)}: {problem}")
        problem = self.definition.unsupported_rc_average() if self.rc_average else None
        if problem:  # a scorer that ignores it would leave rows and provenance saying it ran
            rc_average = field_named(self, "rc_average")
            raise ConfigError(f"{describe(rc_average, 'true', bool)}: {problem}")
        problem = self.definition.unsupported_window_bp() if self.window_bp is not None else None
        if problem:  # its default (None) is no setting: the schema fills it into every entry
            window_bp = field_named(self, "window_bp")
            raise ConfigError(f"{describe(window_bp, str(self.window_bp))}: {problem}")

    @property
    def definition(self) -> Recipe:
        return RECIPES[self.recipe]

    def model_bases(self) -> tuple[int, str] | None:
        """The most bases a scoring job puts through the model at once, and the setting that
        sets them: a window (centered, fns, nexttoken) or a tile (scan); None for a recipe
        with no model (from_scan)."""
        if not self.definition.needs_model:
            return None
        if self.definition.likelihood == "scan":
            return self.tiles.tile_bp, "tile_bp"
        return self.window_bp or self.definition.default_window_bp, "window_bp"

    @property
    def resolved_normalization(self) -> str:
        return self.definition.normalization(self.normalization)


@dataclass(frozen=True)
class ShardSettings:
    shard_size: int = setting(
        500,
        scope="run",
        minimum=1,
        help="scoreable variants per shard (whole sites are kept together)",
    )
