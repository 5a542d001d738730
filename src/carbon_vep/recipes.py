"""Variant-level recipes on top of the engine (zero-shot-suite.md §4).

- centered:  mean token log-prob of the centered window, alt minus ref, optional RC averaging;
             identical windows are scored once. score = -delta (larger = more damaging).
- fns:       the same windows scored by mean log FNS marginal per base (bp-level likelihood).
- nexttoken: right-end next-token marginal of the base after the left context.
             score = log P(ref) - log P(alt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from .engine import Engine
from .reference import Reference
from .scan import scan_tiles, snv_scores, tiles_for_positions
from .tokens import BASES, non_acgt_count
from .windows import SCORE_KEY, prepare_right_context, rc_index, reverse_complement, substitute

PUBLISHED_NORMALIZATION = {
    "centered": "full_vocab",
    "nexttoken": "acgt_strings",
    "fns": "dna_block",
    "scan": "dna_block",
}
_BASE_CODE = {b: i for i, b in enumerate(BASES)}
_COMP = str.maketrans("ACGT", "TGCA")


@dataclass(frozen=True)
class Recipe:
    name: str
    normalization: str = "published"
    rc_average: bool = False
    share_prefix: bool = True  # reuse the reference prefix's KV cache for alternates
    tile_bp: int = 49_146  # scan: tile length (8,191 tokens + the prefix = 8,192)
    min_context: int = 24_000  # scan: left context every scored base is guaranteed

    @property
    def resolved_normalization(self) -> str:
        if self.normalization == "published":
            return PUBLISHED_NORMALIZATION[self.name]
        return self.normalization


SCORE_SCHEMA: dict[str, Any] = {
    "ref_chrom": pl.Utf8,
    "pos": pl.Int64,
    "ref": pl.Utf8,
    "alt": pl.Utf8,
    "score_status": pl.Utf8,
    "score_reason": pl.Utf8,
    "score": pl.Float64,
    "ref_ll": pl.Float64,
    "alt_ll": pl.Float64,
    "delta": pl.Float64,
    "delta_rc": pl.Float64,
    "p_ref": pl.Float64,
    "p_alt": pl.Float64,
    "window_bp": pl.Int64,
    "window_non_acgt": pl.Int64,
    "recipe": pl.Utf8,
    "normalization": pl.Utf8,
}


def _row(key: tuple, recipe: Recipe, **values: Any) -> dict[str, Any]:
    row = dict.fromkeys(SCORE_SCHEMA)
    row.update(zip(SCORE_KEY, key, strict=True))
    row.update(recipe=recipe.name, normalization=recipe.resolved_normalization, **values)
    return row


def check_context(shard: pl.DataFrame, engine: Engine, recipe: Recipe) -> None:
    """Refuse windows longer than the model's positional range before any forward pass."""
    if shard.height == 0:
        return
    if recipe.name == "scan":
        engine.check_window_bp(recipe.tile_bp, "scan tiles")
    else:
        longest = int((shard["window_end"] - shard["window_start"]).max())
        engine.check_window_bp(longest, f"{recipe.name} windows")


def score_shard(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: Recipe
) -> pl.DataFrame:
    """Score the variants of one shard; every input key comes back exactly once."""
    check_context(shard, engine, recipe)
    if recipe.name == "nexttoken":
        rows = _score_nexttoken(shard, reference, engine, recipe)
    elif recipe.name == "scan":
        rows = _score_from_scan(shard, reference, engine, recipe)
    else:
        rows = _score_windows(shard, reference, engine, recipe)
    return pl.from_dicts(rows, schema=SCORE_SCHEMA) if rows else pl.DataFrame(schema=SCORE_SCHEMA)


# ---- centered / fns ----------------------------------------------------------------------
_FAILED = "out of memory even at batch size 1"


def _group_scores(
    groups: dict[str, list[str]], engine: Engine, recipe: Recipe
) -> dict[str, float | None]:
    """Mean log-likelihood of every reference and alternate sequence (None = failed)."""
    kind = "bp" if recipe.name == "fns" else "token"
    norm = recipe.resolved_normalization
    means: dict[str, float | None] = {}
    if recipe.share_prefix:
        for ref, alts in groups.items():
            ref_score, alt_scores = engine.window_group_scores(ref, alts, kind, norm)
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
        views.append((rc, rc_index(len(window), idx), row["ref"].translate(_COMP),
                      row["alt"].translate(_COMP)))  # fmt: skip
    return views


def _score_windows(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: Recipe
) -> list[dict[str, Any]]:
    k = engine.k
    plans, groups = [], {}
    for row in shard.iter_rows(named=True):
        key = tuple(row[c] for c in SCORE_KEY)
        window = reference.fetch(row["ref_chrom"], row["window_start"], row["window_end"])
        usable = len(window) - len(window) % k
        views = _window_views(row, window, recipe.rc_average)
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
    means = _group_scores(groups, engine, recipe)
    rows = []
    for key, pairs, reason, bp, non_acgt in plans:
        common = {"window_bp": bp, "window_non_acgt": non_acgt}
        if pairs is None:
            rows.append(_row(key, recipe, score_status="skipped", score_reason=reason, **common))
            continue
        values = [(means[ref], means[alt]) for ref, alt in pairs]
        if any(v is None for pair in values for v in pair):
            rows.append(_row(key, recipe, score_status="failed", score_reason=_FAILED, **common))
            continue
        deltas = [alt - ref for ref, alt in values]
        delta = float(np.mean(deltas))
        rows.append(_row(
            key, recipe, score_status="scored", score_reason="", score=-delta,
            ref_ll=values[0][0], alt_ll=values[0][1], delta=delta,
            delta_rc=deltas[1] if len(deltas) > 1 else None, **common,
        ))  # fmt: skip
    return rows


# ---- nexttoken ---------------------------------------------------------------------------
def _score_nexttoken(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: Recipe
) -> list[dict[str, Any]]:
    contexts: dict[str, int] = {}
    plans = []
    for row in shard.iter_rows(named=True):
        raw = reference.fetch(row["ref_chrom"], row["window_start"], row["window_end"])
        context = prepare_right_context(raw, engine.k)
        plans.append((tuple(row[c] for c in SCORE_KEY), contexts.setdefault(context, len(contexts)),
                      len(context), non_acgt_count(context)))  # fmt: skip
    ids = [engine.vocab.encode(c) for c in contexts]
    log_probs = engine.next_base_log_probs(ids, recipe.resolved_normalization)
    rows = []
    for key, slot, bp, non_acgt in plans:
        lp = log_probs[slot]
        if lp is None:
            rows.append(_row(key, recipe, score_status="failed", score_reason=_FAILED,
                             window_bp=bp, window_non_acgt=non_acgt))  # fmt: skip
            continue
        lp_ref, lp_alt = float(lp[_BASE_CODE[key[2]]]), float(lp[_BASE_CODE[key[3]]])
        rows.append(_row(
            key, recipe, score_status="scored", score_reason="", score=lp_ref - lp_alt,
            p_ref=float(np.exp(lp_ref)), p_alt=float(np.exp(lp_alt)),
            ref_ll=lp_ref, alt_ll=lp_alt, window_bp=bp, window_non_acgt=non_acgt,
        ))  # fmt: skip
    return rows


# ---- scan lookup -------------------------------------------------------------------------
def _score_from_scan(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: Recipe
) -> list[dict[str, Any]]:
    """Scan tiles covering the shard's sites, then look each variant up (FNS marginal LLR)."""
    rows = []
    for chrom, part in shard.partition_by("ref_chrom", as_dict=True).items():
        contig = chrom[0]
        positions = [p - 1 for p in part["pos"].to_list()]
        tiles = tiles_for_positions(
            positions, reference.lengths[contig], recipe.tile_bp, recipe.min_context, engine.k
        )
        snvs = snv_scores(scan_tiles(engine, reference, contig, tiles))
        found = {(r["pos"], r["alt"]): r for r in snvs.iter_rows(named=True)}
        for row in part.iter_rows(named=True):
            key = tuple(row[c] for c in SCORE_KEY)
            hit = found.get((row["pos"], row["alt"]))
            if hit is None:
                reason = "base not covered by a whole-6-mer scan tile (contig end)"
                rows.append(_row(key, recipe, score_status="skipped", score_reason=reason))
                continue
            rows.append(_row(
                key, recipe, score_status="scored", score_reason="", score=hit["score"],
                p_ref=hit["p_ref"], p_alt=hit["p_alt"], ref_ll=float(np.log(hit["p_ref"])),
                alt_ll=float(np.log(hit["p_alt"])), window_bp=hit["context_bp"],
            ))  # fmt: skip
    return rows
