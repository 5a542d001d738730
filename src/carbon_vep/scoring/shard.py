"""Score a shard of variants with its recipe (recipes.py names the function for each).

- score_windows (centered, fns): mean token (or base) log-likelihood of the variant's window,
  alt minus ref, optional reverse-complement averaging; identical windows are scored once;
  score = -delta (larger = more damaging).
- score_next_base (nexttoken): the next-token marginal of the base after the left context;
  score = log P(ref) - log P(alt). A variant with no whole 6-mer of left context once leading
  N are stripped (a contig start, or just after an N gap) is not scored (`no_context`): the
  model would see its prefix token alone, so REF and ALT alone would decide the score.
- score_from_scan (scan): scan tiles covering the shard's sites, then look each variant up.
Every input key comes back exactly once, with a scoring status (columns.SCORING_STATUSES).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from carbon_vep import columns
from carbon_vep.columns import FAILED_ALONE, VARIANT_KEY, Status
from carbon_vep.config.stages import RecipeSettings
from carbon_vep.genome.reference import Reference
from carbon_vep.genome.windows import (
    prepare_right_context,
    rc_index,
    reverse_complement,
    substitute,
)
from carbon_vep.model.engine import Engine
from carbon_vep.model.tokens import BASES, non_acgt_count
from carbon_vep.model.window_groups import window_groups_scores
from carbon_vep.scan.tiles import scan_tiles, snv_scores
from carbon_vep.scan.tiling import tiles_for_positions

SCORE_SCHEMA = columns.schema(columns.SCORE_SHARD)
_BASE_CODE = {b: i for i, b in enumerate(BASES)}
_COMP = str.maketrans("ACGT", "TGCA")


def _row(key: tuple, recipe: RecipeSettings, status: Status, **values: Any) -> dict[str, Any]:
    row = dict.fromkeys(SCORE_SCHEMA)
    row.update(zip(VARIANT_KEY, key, strict=True))
    row.update(score_status=status.value, score_reason="", recipe=recipe.recipe)
    row.update(normalization=recipe.resolved_normalization, **values)
    return row


def _check_windows(shard: pl.DataFrame, engine: Engine, recipe: RecipeSettings) -> None:
    """Refuse windows longer than the model's positional range before any forward pass."""
    if shard.height:
        longest = int((shard["window_end"] - shard["window_start"]).max())
        engine.check_window_bp(longest, f"{recipe.recipe} windows", "window_bp")


def score_shard(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: RecipeSettings
) -> pl.DataFrame:
    """Score the variants of one shard with the recipe's function; every key comes back once."""
    rows = recipe.definition.score_function()(shard, reference, engine, recipe)
    return pl.from_dicts(rows, schema=SCORE_SCHEMA) if rows else pl.DataFrame(schema=SCORE_SCHEMA)


# ---- centered / fns ----------------------------------------------------------------------
def _group_scores(
    groups: dict[str, list[str]], engine: Engine, recipe: RecipeSettings
) -> dict[str, float | None]:
    """Mean log-likelihood of every reference and alternate sequence (None = failed)."""
    kind = recipe.definition.likelihood  # token or bp
    norm = recipe.resolved_normalization
    means: dict[str, float | None] = {}
    if recipe.share_prefix:
        scored = window_groups_scores(engine, list(groups.items()), kind, norm)
        for (ref, alts), (ref_score, alt_scores) in zip(groups.items(), scored, strict=True):
            for seq, score in zip([ref, *alts], [ref_score, *alt_scores], strict=True):
                means[seq] = None if score is None else score.mean
        return means
    sequences = list(dict.fromkeys([s for ref, alts in groups.items() for s in (ref, *alts)]))
    scores = engine.sequence_scores(sequences, kind, norm)
    return {s: None if sc is None else sc.mean for s, sc in zip(sequences, scores, strict=True)}


def _window_views(row: dict, window: str, rc_average: bool) -> list[tuple[str, int, str, str]]:
    """(window, variant index, ref, alt) forward, plus the reverse complement (index W-1-i)."""
    idx = row["variant_index"]
    views = [(window, idx, row["ref"], row["alt"])]
    if rc_average:
        rc = reverse_complement(window)
        views.append(
            (
                rc,
                rc_index(len(window), idx),
                row["ref"].translate(_COMP),
                row["alt"].translate(_COMP),
            )
        )
    return views


def plan_window_groups(
    shard: pl.DataFrame, reference: Reference, k: int, rc_average: bool
) -> tuple[list[tuple], dict[str, list[str]]]:
    """Each variant's plan (key, its (ref, alt) window pairs or None, the reason, bp, non-ACGT
    bases) and the window groups to score: reference window -> its distinct alternates (a
    window trimmed to whole k-mers; identical windows once)."""
    plans, groups = [], {}
    for row in shard.iter_rows(named=True):
        key = tuple(row[c] for c in VARIANT_KEY)
        window = reference.fetch(row["ref_chrom"], row["window_start"], row["window_end"])
        usable = len(window) - len(window) % k
        views = _window_views(row, window, rc_average)
        if any(i >= usable for _, i, _, _ in views):
            reason = f"variant falls in the last {len(window) % k} bp trimmed to whole {k}-mers"
            plans.append((key, None, reason, len(window), non_acgt_count(window)))
            continue
        pairs = []
        for seq, i, ref, alt in views:
            ref_seq, alt_seq = seq[:usable], substitute(seq, i, ref, alt)[:usable]
            groups.setdefault(ref_seq, [])
            if alt_seq not in groups[ref_seq]:  # identical windows are scored once
                groups[ref_seq].append(alt_seq)
            pairs.append((ref_seq, alt_seq))
        plans.append((key, pairs, "", usable, non_acgt_count(window[:usable])))
    return plans, groups


def score_windows(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: RecipeSettings
) -> list[dict[str, Any]]:
    _check_windows(shard, engine, recipe)
    plans, groups = plan_window_groups(shard, reference, engine.k, recipe.rc_average)
    means = _group_scores(groups, engine, recipe)
    rows = []
    for key, pairs, reason, bp, non_acgt in plans:
        common = {"window_bp": bp, "window_non_acgt": non_acgt}
        if pairs is None:
            rows.append(_row(key, recipe, Status.CONTIG_END, score_reason=reason, **common))
            continue
        values = [(means[ref], means[alt]) for ref, alt in pairs]
        if any(v is None for pair in values for v in pair):
            rows.append(_row(key, recipe, Status.FAILED, score_reason=FAILED_ALONE, **common))
            continue
        deltas = [alt - ref for ref, alt in values]
        delta = float(np.mean(deltas))
        rows.append(
            _row(
                key,
                recipe,
                Status.SCORED,
                score=-delta,
                ref_ll=values[0][0],
                alt_ll=values[0][1],
                delta=delta,
                delta_rc=deltas[1] if len(deltas) > 1 else None,
                **common,
            )
        )
    return rows


# ---- nexttoken ---------------------------------------------------------------------------
def score_next_base(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: RecipeSettings
) -> list[dict[str, Any]]:
    _check_windows(shard, engine, recipe)
    contexts: dict[str, int] = {}
    plans = []
    for row in shard.iter_rows(named=True):
        raw = reference.fetch(row["ref_chrom"], row["window_start"], row["window_end"])
        context = prepare_right_context(raw, engine.k)
        key = tuple(row[c] for c in VARIANT_KEY)
        if not context:  # the model would see its prefix token alone: REF and ALT would decide
            plans.append((key, None, len(raw), non_acgt_count(raw), _no_context(raw, engine.k)))
            continue
        slot = contexts.setdefault(context, len(contexts))
        plans.append((key, slot, len(context), non_acgt_count(context), ""))
    ids = [engine.vocab.encode(c) for c in contexts]
    log_probs = engine.next_base_log_probs(ids, recipe.resolved_normalization) if ids else []
    rows = []
    for key, slot, bp, non_acgt, reason in plans:
        common = {"window_bp": bp, "window_non_acgt": non_acgt}
        if slot is None:
            rows.append(_row(key, recipe, Status.NO_CONTEXT, score_reason=reason, **common))
            continue
        lp = log_probs[slot]
        if lp is None:
            rows.append(_row(key, recipe, Status.FAILED, score_reason=FAILED_ALONE, **common))
            continue
        lp_ref, lp_alt = float(lp[_BASE_CODE[key[2]]]), float(lp[_BASE_CODE[key[3]]])
        rows.append(
            _row(
                key,
                recipe,
                Status.SCORED,
                score=lp_ref - lp_alt,
                p_ref=float(np.exp(lp_ref)),
                p_alt=float(np.exp(lp_alt)),
                ref_ll=lp_ref,
                alt_ll=lp_alt,
                **common,
            )
        )
    return rows


def _no_context(raw: str, k: int) -> str:
    """Why a right-end context is empty (the reason of a `no_context` row): the contig starts,
    or an N gap ends, less than one k-mer before the variant. `raw` is the unstripped window."""
    gap = len(raw) - len(raw.lstrip("N"))
    left = len(raw) - gap
    where = f"an N gap ({gap} N)" if gap else "the contig start"
    return (
        f"no left context: {left} bp between {where} and the variant, less than one whole {k}-mer"
    )


# ---- scan lookup -------------------------------------------------------------------------
def score_from_scan(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: RecipeSettings
) -> list[dict[str, Any]]:
    """Scan tiles covering the shard's sites, then look each variant up (FNS marginal LLR)."""
    tile_bp, min_context = recipe.tiles.tile_bp, recipe.tiles.min_context
    rows = []
    for chrom, part in shard.partition_by("ref_chrom", as_dict=True).items():
        contig = chrom[0]
        positions = [p - 1 for p in part["pos"].to_list()]
        tiles = tiles_for_positions(
            positions, reference.lengths[contig], tile_bp, min_context, engine.k
        )
        snvs = snv_scores(scan_tiles(engine, reference, contig, tiles))
        found = {(r["pos"], r["alt"]): r for r in snvs.iter_rows(named=True)}
        for row in part.iter_rows(named=True):
            key = tuple(row[c] for c in VARIANT_KEY)
            hit = found.get((row["pos"], row["alt"]))
            if hit is None:
                reason = "base not covered by a whole-6-mer scan tile (contig end)"
                rows.append(_row(key, recipe, Status.CONTIG_END, score_reason=reason))
                continue
            rows.append(
                _row(
                    key,
                    recipe,
                    Status.SCORED,
                    score=hit["score"],
                    p_ref=hit["p_ref"],
                    p_alt=hit["p_alt"],
                    ref_ll=float(np.log(hit["p_ref"])),
                    alt_ll=float(np.log(hit["p_alt"])),
                    window_bp=hit["context_bp"],
                )
            )
    return rows
