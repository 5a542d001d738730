"""What score_shard sends to the model: the right-end recipe scores every distinct left context
once (a site's three alternates share one), batched up to the token budget; the centered recipe
runs each reference window once with its distinct alternates. Values are checked against
separately scored references elsewhere (tests/model/test_engine.py); here the forward passes."""

from __future__ import annotations

import numpy as np
import polars as pl

from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import RecipeSettings
from carbon_vep.model.engine import Engine
from carbon_vep.model.window_groups import window_groups_scores
from carbon_vep.scoring import shard as shard_module
from carbon_vep.scoring.shard import score_shard


def _snvs(reference, positions: list[int]) -> pl.DataFrame:
    rows = []
    for pos in positions:
        ref = reference.fetch("chr17", pos - 1, pos)
        rows += [("chr17", pos, ref, alt) for alt in "ACGT" if alt != ref]
    return pl.DataFrame(rows, schema=["ref_chrom", "pos", "ref", "alt"], orient="row")


def test_right_end_contexts_once_each_and_batched_to_the_token_budget(loaded, reference):
    frame = _snvs(reference, [5_000, 6_000, 7_000])  # 9 variants, 3 distinct contexts
    shard = RECIPES["nexttoken"].add_windows(frame, reference.lengths, 600)
    tokens = 600 // 6 + 1  # a context's tokens, the prefix token included
    engine = Engine(
        loaded.model, loaded.vocab, loaded.device, batch_size=1, batch_tokens=2 * tokens
    )
    batches: list[list[int]] = []
    last_hidden_states = engine.last_hidden_states

    def spy(batch):
        batches.append([len(ids) for ids in batch])
        return last_hidden_states(batch)

    engine.last_hidden_states = spy
    scored = score_shard(shard, reference, engine, RecipeSettings("nexttoken"))
    assert batches == [[tokens, tokens], [tokens]]  # two a pass (the budget), none twice
    assert scored["score_status"].to_list() == ["scored"] * 9
    one_by_one = score_shard(
        shard,
        reference,
        Engine(loaded.model, loaded.vocab, loaded.device, batch_size=1),
        RecipeSettings("nexttoken"),
    )
    assert np.allclose(scored["score"].to_numpy(), one_by_one["score"].to_numpy(), atol=1e-5)


def test_centered_reference_windows_once_each_with_their_alternates(loaded, reference, monkeypatch):
    frame = _snvs(reference, [5_000, 6_000])
    shard = RECIPES["centered"].add_windows(frame, reference.lengths, 240)
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=8)
    groups: list[tuple[str, int]] = []

    def spy(engine, batch, kind, normalization):
        groups.extend((ref, len(alts)) for ref, alts in batch)
        return window_groups_scores(engine, batch, kind, normalization)

    monkeypatch.setattr(shard_module, "window_groups_scores", spy)
    score_shard(shard, reference, engine, RecipeSettings("centered"))
    windows = {
        reference.fetch("chr17", s, e) for s, e in shard.select("window_start", "window_end").rows()
    }
    assert sorted(groups) == sorted((w, 3) for w in windows)  # 2 groups of 3 alternates
