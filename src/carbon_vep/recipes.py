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
from .tokens import BASES
from .windows import SCORE_KEY, prepare_right_context, rc_index, reverse_complement, substitute

RECIPES = ("centered", "fns", "nexttoken")
PUBLISHED_NORMALIZATION = {
    "centered": "full_vocab",
    "nexttoken": "acgt_strings",
    "fns": "dna_block",
}
_BASE_CODE = {b: i for i, b in enumerate(BASES)}
_COMP = str.maketrans("ACGT", "TGCA")


@dataclass(frozen=True)
class Recipe:
    name: str
    normalization: str = "published"
    rc_average: bool = False

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


def _non_acgt(seq: str) -> int:
    return len(seq) - sum(seq.count(b) for b in BASES)


def score_shard(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: Recipe
) -> pl.DataFrame:
    """Score the variants of one shard; every input key comes back exactly once."""
    if recipe.name == "nexttoken":
        rows = _score_nexttoken(shard, reference, engine, recipe)
    else:
        rows = _score_windows(shard, reference, engine, recipe)
    return pl.from_dicts(rows, schema=SCORE_SCHEMA) if rows else pl.DataFrame(schema=SCORE_SCHEMA)


# ---- centered / fns ----------------------------------------------------------------------
def _sequence_scores(seqs: list[str], engine: Engine, recipe: Recipe) -> list[float]:
    """Mean log-likelihood of each sequence under the recipe (token-level or bp-level)."""
    ids = [engine.vocab.encode(s) for s in seqs]
    if recipe.name == "fns":
        marginals = engine.base_log_marginals(ids)
        return [_mean_bp_ll(s, m) for s, m in zip(seqs, marginals, strict=True)]
    norm = recipe.resolved_normalization
    lls = engine.token_log_likelihoods(ids, norm)
    if norm == "dna_block" and engine.vocab.oov_id is not None:
        # a block-normalised log-prob of <oov> is meaningless: such targets are left out
        return [
            float(ll[i[1:] != engine.vocab.oov_id].mean()) for ll, i in zip(lls, ids, strict=True)
        ]
    return [float(ll.mean()) for ll in lls]


def _mean_bp_ll(seq: str, marginals: np.ndarray) -> float:
    """Mean over ACGT bases of log m_j(base); marginals [n_tokens, k, 4] for seq's tokens."""
    k = marginals.shape[1]
    codes = np.array([_BASE_CODE.get(b, -1) for b in seq]).reshape(-1, k)
    picked = np.take_along_axis(marginals, np.clip(codes, 0, 3)[..., None], axis=2)[..., 0]
    return float(picked[codes >= 0].mean())


def _score_windows(
    shard: pl.DataFrame, reference: Reference, engine: Engine, recipe: Recipe
) -> list[dict[str, Any]]:
    k = engine.k
    plans, slots = [], {}
    for row in shard.iter_rows(named=True):
        key = tuple(row[c] for c in SCORE_KEY)
        window = reference.fetch(row["ref_chrom"], row["window_start"], row["window_end"])
        usable = len(window) - len(window) % k
        idx = row["variant_index"]
        views = [(window, idx, row["ref"], row["alt"])]
        if recipe.rc_average:
            rc = (reverse_complement(window), rc_index(len(window), idx))
            views.append((*rc, row["ref"].translate(_COMP), row["alt"].translate(_COMP)))
        if any(i >= usable for _, i, _, _ in views):
            reason = f"variant falls in the last {len(window) % k} bp trimmed to whole {k}-mers"
            plans.append((key, None, reason, len(window), _non_acgt(window)))
            continue
        pairs = []
        for seq, i, ref, alt in views:
            pair = (seq[:usable], substitute(seq, i, ref, alt)[:usable])
            pairs.append(tuple(slots.setdefault(s, len(slots)) for s in pair))
        plans.append((key, pairs, "", usable, _non_acgt(window[:usable])))
    scores = _sequence_scores(list(slots), engine, recipe)
    rows = []
    for key, pairs, reason, bp, non_acgt in plans:
        if pairs is None:
            rows.append(
                _row(
                    key,
                    recipe,
                    score_status="skipped",
                    score_reason=reason,
                    window_bp=bp,
                    window_non_acgt=non_acgt,
                )
            )
            continue
        deltas = [scores[alt] - scores[ref] for ref, alt in pairs]
        delta = float(np.mean(deltas))
        rows.append(_row(
            key, recipe, score_status="scored", score_reason="", score=-delta,
            ref_ll=scores[pairs[0][0]], alt_ll=scores[pairs[0][1]], delta=delta,
            delta_rc=deltas[1] if len(deltas) > 1 else None,
            window_bp=bp, window_non_acgt=non_acgt,
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
                      len(context), _non_acgt(context)))  # fmt: skip
    ids = [engine.vocab.encode(c) for c in contexts]
    log_probs = engine.next_base_log_probs(ids, recipe.resolved_normalization)
    rows = []
    for key, slot, bp, non_acgt in plans:
        lp = log_probs[slot]
        lp_ref, lp_alt = float(lp[_BASE_CODE[key[2]]]), float(lp[_BASE_CODE[key[3]]])
        rows.append(_row(
            key, recipe, score_status="scored", score_reason="", score=lp_ref - lp_alt,
            p_ref=float(np.exp(lp_ref)), p_alt=float(np.exp(lp_alt)),
            ref_ll=lp_ref, alt_ll=lp_alt, window_bp=bp, window_non_acgt=non_acgt,
        ))  # fmt: skip
    return rows
