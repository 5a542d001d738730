"""The recipes, one registry entry each (the published ones: docs/suite-conventions.md#recipes).

An entry says everything the pipeline needs to know about a recipe: its name, the window it
cuts around a variant (geometry and default length), the normalisation the published numbers
use, what kind of log-likelihood it compares, and the function that scores a shard. The config
schema, the CLI's choices, `make-shards`, scoring and the docs' tables read it from here. No torch:
the scoring function is named, and imported only by the model stage that runs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from carbon_vep.genome.windows import Window, add_windows, centered_window, right_end_window

PUBLISHED = "published"
# normalisation -> what the log-probabilities are normalised over
NORMALIZATIONS = {
    "full_vocab": "log-softmax over all 155,776 entries (the published centered definition)",
    "acgt_strings": "full-vocabulary softmax summed over every pure-ACGT vocabulary string by "
    "first base, text tokens included (what the published right-end script does)",
    "dna_block": "softmax over the 4,096 6-mers only (FNS, the model's `score_sequence`)",
}


@dataclass(frozen=True)
class Recipe:
    name: str
    summary: str
    window: Callable[[int, int, int], Window]  # (pos, contig length, window_bp) -> Window
    default_window_bp: int
    window_meaning: str  # what `window_bp` is for this recipe
    normalizations: tuple[str, ...]  # what its scorer computes; the published one first
    likelihood: Literal["token", "bp", "next_base", "scan", "lookup"]
    scorer: str  # "module:function" in carbon_vep (needs torch: imported on use); "" = no model
    # whether its scorer reads `rc_average` (the centered windows' reverse complement)
    reverse_complement: bool = False
    # whether it cuts windows of `window_bp` (from_scan reads the scan's context instead)
    cuts_windows: bool = True

    @property
    def needs_model(self) -> bool:
        return bool(self.scorer)

    @property
    def published_normalization(self) -> str:
        return self.normalizations[0]

    def normalization(self, requested: str) -> str:
        """The normalisation actually used: the published one unless another is named."""
        return self.published_normalization if requested == PUBLISHED else requested

    def unsupported_normalization(self, requested: str) -> str | None:
        """Why `requested` cannot be this recipe's normalisation (None when it can): a scorer
        that computes one normalisation must not label its rows with another."""
        if requested == PUBLISHED or requested in self.normalizations:
            return None
        return (
            f"recipe {self.name} computes {' or '.join(self.normalizations)} only, not "
            f"{requested}; choose one of {[PUBLISHED, *self.normalizations]}"
        )

    def unsupported_rc_average(self) -> str | None:
        """Why `rc_average` cannot be set for this recipe (None when it can): its scorer would
        ignore it, and the run would say it averaged when it did not."""
        if self.reverse_complement:
            return None
        averaging = [r.name for r in RECIPES.values() if r.reverse_complement]
        return (
            f"recipe {self.name} does not average with the reverse complement (only "
            f"{' and '.join(averaging)} do): drop it, or choose one of those recipes"
        )

    def unsupported_window_bp(self) -> str | None:
        """Why `window_bp` cannot be set for this recipe (None when it can): it cuts no
        window, and the setting would change nothing while the config said it did."""
        if self.cuts_windows:
            return None
        return (
            f"recipe {self.name} cuts no window: a variant is looked up in the scan, at the "
            "left context the scan gave its base (the scan's min_context, or back to a gap); "
            "drop it"
        )

    def add_windows(
        self, variants: pl.DataFrame, lengths: dict[str, int], window_bp: int | None = None
    ) -> pl.DataFrame:
        """The variants with this recipe's windows (window_start, window_end, variant_index)."""
        return add_windows(variants, lengths, self.window, window_bp or self.default_window_bp)

    def score_function(self) -> Callable[..., Any]:
        if not self.needs_model:
            raise ValueError(f"recipe {self.name} scores by lookup, not with a model")
        module, _, function = self.scorer.partition(":")
        return getattr(importlib.import_module(f"carbon_vep.{module}"), function)


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe(
            "centered",
            "BRCA2 / TraitGym: mean token log-prob of the centered window, alt minus ref; "
            "score = -delta",
            centered_window,
            8192,
            "the whole centered window",
            ("full_vocab", "dna_block"),
            "token",
            "scoring.shard:score_windows",
            reverse_complement=True,
        ),
        Recipe(
            "fns",
            "the centered windows scored by the mean log FNS marginal per base (bp-level "
            "likelihood); score = -delta",
            centered_window,
            8192,
            "the whole centered window",
            ("dna_block",),  # FNS marginals are over the 6-mer block
            "bp",
            "scoring.shard:score_windows",
            reverse_complement=True,
        ),
        Recipe(
            "nexttoken",
            "ClinVar: right-end next-token marginal of the base after the left context; "
            "score = log P(ref) - log P(alt)",
            right_end_window,
            24000,
            "the left context",
            ("acgt_strings", "full_vocab", "dna_block"),
            "next_base",
            "scoring.shard:score_next_base",
        ),
        Recipe(
            "scan",
            "look the variants up in tiled one-pass scans (FNS marginals); score = log m(ref) - "
            "log m(alt)",
            right_end_window,
            24000,
            "the left context recorded with the shard (scans use tile_bp and min_context)",
            ("dna_block",),  # FNS marginals are over the 6-mer block
            "scan",
            "scoring.shard:score_from_scan",
        ),
        Recipe(
            "from_scan",
            "no model: look the SNVs up in a whole-genome scan of this config (`scan:`, same "
            "model; `carbon-vep annotate`); score = log m(ref) - log m(alt)",
            right_end_window,
            0,
            "not used: each base's left context in the scan (`min_context` or back to a gap)",
            ("dna_block",),  # what the scan computed
            "lookup",
            "",
            cuts_windows=False,
        ),
    )
}
