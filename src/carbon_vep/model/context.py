"""A model's usable context, defined once: the positions a stretch of bases takes (its whole
k-mers and the `<dna>` prefix), the bases a model's positions hold, and the refusal of a window
or tile that needs more (ContextTooLongError, naming the setting to lower).

No torch: the scan's plan checks a local checkpoint's `config.json` with it before any GPU job
(scan.plan), and the engine checks the loaded model with it before any forward pass
(model.engine: the models the plan could not read, a Hub id or a model an earlier job builds,
and the VEP windows of every scoring job).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from carbon_vep.config.gpus import DEMO_MAX_POSITIONS
from carbon_vep.config.run import setting_name
from carbon_vep.errors import ContextTooLongError
from carbon_vep.sources.hub import local_positions

PREFIX_POSITIONS = 1  # the `<dna>` token before a sequence's k-mers
# what else to lower with a setting, where lowering it alone would not do
_ALSO_LOWER = {"tile_bp": " (and min_context below it)"}


def positions_needed(bp: int, k: int) -> int:
    """Positions `bp` bases take: their whole k-mers and the prefix."""
    return bp // k + PREFIX_POSITIONS


def usable_bp(positions: int, k: int) -> int:
    """The most bases a model with `positions` positions takes: whole k-mers after the prefix."""
    return (positions - PREFIX_POSITIONS) * k


def check_context(
    bp: int, k: int, positions: int | None, *, what: str, model: str, setting: str
) -> None:
    """Refuse `what` ("scan tiles", "centered windows") of `bp` bases when they need more
    positions than the model's `positions` (None: not known here, nothing checked). `model`
    names the model and where its positions were read; `setting` is the config key to lower
    (tile_bp, window_bp), spelled as the user sets it."""
    if positions is None:
        return
    needed = positions_needed(bp, k)
    if needed > positions:
        most = usable_bp(positions, k)
        raise ContextTooLongError(
            f"{what} of {bp:,} bp need {needed:,} positions (whole {k}-mers + the prefix) but "
            f"{model} supports {positions:,}, {most:,} bp; lower {setting_name(setting)} to at "
            f"most {most:,}{_ALSO_LOWER.get(setting, '')}"
        )


def check_models_context(
    bp: int,
    k: int,
    models: Mapping[str, str],
    demo_models: Collection[str] = (),
    *,
    what: str,
    setting: str,
) -> list[str]:
    """`check_context` for each model (key -> path) before any job loads it: from the positions
    a local checkpoint's config.json declares (no torch), or for a demo model not built yet
    (`demo_models`) the positions it is built with. The models it cannot check yet (a Hub id, a
    model an earlier job copies) come back as notes: their jobs check when they load them."""
    notes = []
    for key, path in models.items():
        limit, why = local_positions(path)
        source = "max_position_embeddings in its config.json"
        if limit is None and key in demo_models:
            limit, source = DEMO_MAX_POSITIONS, "the positions the demo model is built with"
        if limit is None:
            notes.append(f"model {key}: {setting} not checked against its context here: {why}")
        check_context(
            bp, k, limit, what=what, model=f"model {key} ({path}; {source})", setting=setting
        )
    return notes
