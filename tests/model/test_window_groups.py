"""Window groups batched (model.window_groups) against one group at a time (the code it replaced,
support/engine_as_it_was.py): the same totals and counts to float rounding, for groups of mixed
shapes (other split tokens, other numbers of alleles, other window lengths) cut into several
batches, under both likelihood kinds and both normalisers; a group's score the same whatever the
batch it shares (float64 sums); and a group that runs out of memory alone is scored None while
the others keep their values."""

from __future__ import annotations

import pytest
import torch
from support.engine_as_it_was import one_window_group
from support.files import random_dna

from carbon_vep.model.engine import Engine
from carbon_vep.model.window_groups import encode_group, window_groups_scores


def snv(seq: str, i: int, base: str) -> str:
    return seq[:i] + base + seq[i + 1 :]


def groups_of_mixed_shapes() -> list[tuple[str, list[str]]]:
    """Centered-like groups (variant in the middle, 3 alternates), one with the variant near
    the start, one with a single alternate, one shorter window, one with N bases."""
    groups = []
    for seed in range(5):
        ref = random_dna(240, seed)
        alts = [snv(ref, 120, b) for b in "ACGT" if b != ref[120]]
        groups.append((ref, alts))
    near_start = random_dna(240, 9)
    groups.append((near_start, [snv(near_start, 7, "A" if near_start[7] != "A" else "C")]))
    short = random_dna(180, 11)
    groups.append((short, [snv(short, 90, b) for b in "ACGT" if b != short[90]]))
    with_n = random_dna(240, 12)
    with_n = with_n[:30] + "NNNNNN" + with_n[36:]
    groups.append((with_n, [snv(with_n, 150, b) for b in "ACGT" if b != with_n[150]]))
    return groups


@pytest.mark.parametrize(
    ("kind", "normalization"),
    [("token", "full_vocab"), ("token", "dna_block"), ("bp", "dna_block")],
)
@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_batched_groups_equal_one_group_at_a_time(loaded, kind, normalization, batch_size):
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=batch_size)
    groups = groups_of_mixed_shapes()
    shapes = {encode_group(engine, ref, alts).shape for ref, alts in groups}
    assert len(shapes) >= 4  # the batches really mix shapes
    batched = window_groups_scores(engine, groups, kind, normalization)
    for (ref, alts), (ref_score, alt_scores) in zip(groups, batched, strict=True):
        alone_ref, alone_alts = one_window_group(engine, ref, alts, kind, normalization)
        for ours, alone in zip([ref_score, *alt_scores], [alone_ref, *alone_alts], strict=True):
            assert ours.count == alone.count
            assert ours.total == pytest.approx(alone.total, abs=1e-4, rel=1e-6)


@pytest.mark.parametrize(("kind", "normalization"), [("token", "full_vocab"), ("bp", "dna_block")])
def test_a_groups_score_does_not_depend_on_the_batch_it_shares(loaded, kind, normalization):
    """Each group's terms are computed row by row and summed in float64: one group a batch and
    every group in one batch give the same means (a float32 sum moved them by ~1e-6)."""
    groups = groups_of_mixed_shapes()
    scores = {
        size: window_groups_scores(
            Engine(loaded.model, loaded.vocab, loaded.device, batch_size=size),
            groups,
            kind,
            normalization,
        )
        for size in (1, 16)
    }
    for one, every in zip(scores[1], scores[16], strict=True):
        for a, b in zip([one[0], *one[1]], [every[0], *every[1]], strict=True):
            assert a.count == b.count and a.mean == pytest.approx(b.mean, abs=1e-9, rel=0)


def test_a_group_out_of_memory_alone_is_none_and_the_others_are_scored(loaded, monkeypatch):
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)
    groups = groups_of_mixed_shapes()[:4]
    poisoned = engine.vocab.encode(groups[2][0])[1:9]  # the third group's first tokens
    forward = engine.forward

    def forward_or_oom(ids, mask=None, cache=None):
        if any((row[1:9] == poisoned).all() for row in ids if len(row) > 9):
            raise torch.OutOfMemoryError("test")
        return forward(ids, mask, cache)

    monkeypatch.setattr(engine, "forward", forward_or_oom)
    scored = window_groups_scores(engine, groups, "token", "full_vocab")
    assert scored[2] == (None, [None] * len(groups[2][1]))
    for i in (0, 1, 3):
        ref_score, alt_scores = scored[i]
        assert ref_score is not None and all(a is not None for a in alt_scores)


def test_every_pass_of_the_groups_runs_without_cudnn_attention(loaded, monkeypatch):
    """The groups' passes come in many shapes, and cuDNN's attention builds a plan for each new
    one (model.attention.without_cudnn): each forward pass of the groups sees cuDNN's kernel
    switched off, and the switch is back as it was afterwards."""
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=3)
    forward, seen = engine.forward, []

    def forward_noting_cudnn(ids, mask=None, cache=None):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return forward(ids, mask, cache)

    monkeypatch.setattr(engine, "forward", forward_noting_cudnn)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    window_groups_scores(engine, groups_of_mixed_shapes(), "token", "full_vocab")
    assert len(seen) >= 8 and not any(seen)  # prefix and suffix passes of several batches
    assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_the_pass_shape_count_follows_the_groups_own_passes(loaded, monkeypatch):
    """scripts/count_pass_shapes.py predicts the groups' passes without a model (docs/gpu.md
    reads its counts): its (rows, query, key) shapes are the forward passes the groups really
    run, in order, at a token budget that cuts several batches."""
    import importlib.util

    from carbon_vep.benchmark.harness import PROJECT_ROOT

    spec = importlib.util.spec_from_file_location(
        "count_pass_shapes", PROJECT_ROOT / "scripts/count_pass_shapes.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    groups = dict(groups_of_mixed_shapes())
    budget = 600
    engine = Engine(loaded.model, loaded.vocab, loaded.device, 8, batch_tokens=budget)
    forward, ran = engine.forward, []

    def forward_noting_shapes(ids, mask=None, cache=None):
        seen = 0 if cache is None else cache.get_seq_length()
        ran.append((len(ids), ids.shape[1], seen + ids.shape[1]))
        return forward(ids, mask, cache)

    monkeypatch.setattr(engine, "forward", forward_noting_shapes)
    window_groups_scores(engine, list(groups.items()), "token", "full_vocab")
    predicted = [shape[1:] for shape in script.pass_shapes(engine, groups, budget)]
    assert len(ran) >= 6 and ran == predicted


def test_a_jobs_suffix_passes_take_the_lower_right_bias_with_the_same_scores(
    demo_model_dir, loaded, monkeypatch
):
    """A job's engine (model.job.load_engine) attends with the lower-right causal bias, so the
    groups' suffix passes, the queries being the last keys of the prefixes' cache, reach
    PyTorch's flash kernel on a GPU instead of a materialised mask: every suffix pass gets the
    bias in every layer, the prefix passes (no cache) never do, and the scores are transformers'
    sdpa's (on the CPU the bias is materialised into the same mask: identical)."""
    from torch.nn.attention.bias import CausalBias
    from transformers import AttentionInterface

    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.model import attention
    from carbon_vep.model.job import load_engine

    engine = load_engine(
        ModelSettings(str(demo_model_dir), trust_remote_code=True, batch_size=3), None
    )
    assert engine.model.config._attn_implementation == attention.LOWER_RIGHT_SDPA
    biased, passes = [], []

    def counting(module, query, key, value, mask, **kwargs):
        biased.append(isinstance(mask, CausalBias))
        return attention.chunk_attention(module, query, key, value, mask, **kwargs)

    forward = engine.forward

    def forward_noting_suffix(ids, mask=None, cache=None):
        passes.append(cache is not None and cache.get_seq_length() > 0 and ids.shape[1] > 1)
        return forward(ids, mask, cache)

    AttentionInterface.register(attention.LOWER_RIGHT_SDPA, counting)
    monkeypatch.setattr(engine, "forward", forward_noting_suffix)
    try:
        groups = groups_of_mixed_shapes()
        ours = window_groups_scores(engine, groups, "token", "full_vocab")
    finally:
        attention.register()
    layers = engine.model.config.num_hidden_layers
    assert sum(passes) >= 4 and biased == [p for p in passes for _ in range(layers)]
    plain = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=3)
    assert loaded.model.config._attn_implementation == "sdpa"
    theirs = window_groups_scores(plain, groups, "token", "full_vocab")
    for (r1, a1), (r2, a2) in zip(ours, theirs, strict=True):
        for x, y in zip([r1, *a1], [r2, *a2], strict=True):
            assert x.count == y.count and x.total == pytest.approx(y.total, abs=1e-6, rel=0)
