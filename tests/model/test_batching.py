"""The one out-of-memory backoff (batching.py), as every model stage uses it: a batch that runs
out of memory is retried at half the size, and an item that fails alone is marked, not fatal."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from carbon_vep.columns import FAILED_ALONE
from carbon_vep.config.stages import ModelSettings, RecoverySettings, TileSettings
from carbon_vep.model.batching import in_batches, run_sorted
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.scan.tiles import scan_region
from carbon_vep.suite.rollouts import recover


def _oom_above(limit: int, calls: list[int], poison: object = None):
    def work(batch):
        calls.append(len(batch))
        if len(batch) > limit or poison in batch:
            raise torch.OutOfMemoryError("simulated")
        return [x * 10 for x in batch]

    return work


def test_batches_halve_on_oom_and_keep_the_smaller_size():
    calls: list[int] = []
    out = list(in_batches(list(range(7)), _oom_above(2, calls), batch_size=8))
    assert [v for _, values in out for v in values] == [x * 10 for x in range(7)]
    assert calls == [7, 4, 2, 2, 2, 1]  # 8 -> 4 -> 2, then stays at 2


def test_an_item_that_fails_alone_gets_none_and_the_rest_go_on():
    calls: list[int] = []
    items = [3, 1, 4, 1, 5]
    results = run_sorted(items, _oom_above(8, calls, poison=4), 4, lengths=items)
    assert results == [30, 10, None, 10, 50]


class _OomOnBigBatches:
    """Wraps a module so that any forward pass over more than one sequence runs out of memory."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, *args, input_ids=None, **kwargs):
        self.calls.append(input_ids.shape[0])
        if input_ids.shape[0] > 1:
            raise torch.OutOfMemoryError("simulated")
        return self.model(*args, input_ids=input_ids, **kwargs)


@pytest.fixture(scope="module")
def model_dir(demo_model_dir):
    return demo_model_dir


def test_scan_survives_oom_with_the_same_values(model_dir, reference):
    loaded = load_model(ModelSettings(str(model_dir), trust_remote_code=True))
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)
    tiles = TileSettings(120, 60)
    expected = scan_region(engine, reference, "chr17", 2_000, 2_240, tiles)
    engine.body = _OomOnBigBatches(engine.body)
    got = scan_region(engine, reference, "chr17", 2_000, 2_240, tiles)
    assert got.equals(expected)
    assert engine.body.calls[:3] == [4, 2, 1]


def test_recovery_survives_oom_and_marks_a_row_that_fails_alone(model_dir, monkeypatch):
    loaded = load_model(ModelSettings(str(model_dir), trust_remote_code=True))
    table = pl.DataFrame(
        {"sequence": ["ACGTAC" * 20] * 3 + ["TTGACA" * 40], "label": ["ACGTAC" * 5] * 4}
    ).with_columns(pl.int_range(pl.len()).alias("row_id"), pl.lit("t").alias("source"))
    settings = RecoverySettings(decoder="fns_marginal")
    expected = recover(table, loaded, settings, batch_size=1)
    generate = loaded.model.generate

    def flaky(input_ids=None, **kwargs):
        if input_ids.shape[0] > 1 or input_ids.shape[1] > 30:  # the long prompt never fits
            raise torch.OutOfMemoryError("simulated")
        return generate(input_ids=input_ids, **kwargs)

    monkeypatch.setattr(loaded.model, "generate", flaky)
    got = recover(table, loaded, settings, batch_size=4)
    assert got["prediction"].to_list()[:3] == expected["prediction"].to_list()[:3]
    assert got["status"].to_list() == ["scored"] * 3 + ["failed"]
    assert got["reason"][3] == FAILED_ALONE


def test_a_token_budget_replaces_the_batch_size_and_counts_padding():
    tokens = [10, 10, 10, 30, 30, 30, 30, 70]
    calls: list[list[int]] = []

    def work(batch):
        calls.append(list(batch))
        return batch

    list(in_batches(tokens, work, batch_size=2, tokens=tokens, batch_tokens=60))
    # 10s: 3 x 10; then 30s: 2 x 30 = 60; the last 30 and 70 each alone (70 > 60: at least one)
    assert calls == [[10, 10, 10], [30, 30], [30, 30], [70]]


def test_out_of_memory_halves_the_token_budget():
    tokens = [10] * 8
    calls: list[int] = []
    out = list(in_batches(tokens, _oom_above(2, calls), 8, tokens=tokens, batch_tokens=80))
    assert [len(index) for index, _ in out] == [2, 2, 2, 2]
    assert calls == [8, 4, 2, 2, 2, 2]


def test_length_buckets_make_equal_length_batches_without_more_batches():
    from carbon_vep.model.batching import batch_end, length_buckets

    lengths = [15] * 5 + [18] * 5 + [21] * 6
    order, keys = length_buckets(lengths, batch_size=4)
    assert sorted(order) == list(range(16))
    batches, start = [], 0
    while start < len(order):
        end = batch_end(start, len(order), 4, keys=keys)
        batches.append([lengths[i] for i in order[start:end]])
        start = end
    assert batches == [[15] * 4, [18] * 4, [21] * 4, [15, 18, 21, 21]]  # sorting alone: 4 too
    # with a token budget each length fills as many windows as fit (60 // 15 = 4, 60 // 21 = 2)
    order, keys = length_buckets(lengths, batch_size=1, batch_tokens=60)
    assert [lengths[i] for i in order] == [15] * 4 + [18] * 3 + [21] * 6 + [15, 18, 18]


def test_run_sorted_returns_results_in_input_order_from_buckets():
    items = [5, 3, 5, 5, 3, 7, 5, 9, 5]
    seen: list[list[int]] = []

    def work(batch):
        seen.append(list(batch))
        return [x * 10 for x in batch]

    assert run_sorted(items, work, 2, lengths=items) == [x * 10 for x in items]
    assert [b for b in seen if len(set(b)) > 1] == [[5, 7]]  # only leftovers mix: 5, 7 and 9


def test_each_batch_runs_in_the_context_its_shape_count_chooses():
    """in_batches plans its batches before the first: a batch's context is told how many
    batches of its shape (items, longest tokens) the plan holds; the last, partial batch of a
    run is a shape of its own."""
    from contextlib import contextmanager

    from carbon_vep.model.batching import planned_shapes

    tokens = [10] * 9 + [30]
    assert planned_shapes(0, len(tokens), 8, tokens, 40) == {(4, 10): 2, (1, 10): 1, (1, 30): 1}
    entered: list[int] = []
    inside: list[int] = []

    @contextmanager
    def context(passes):
        entered.append(passes)
        yield
        inside.append(passes)  # the work ran inside it

    def work(batch):
        return list(batch)

    out = list(in_batches(tokens, work, 8, tokens=tokens, batch_tokens=40, shape_context=context))
    assert [len(index) for index, _ in out] == [4, 4, 1, 1]
    assert entered == inside == [2, 2, 1, 1]


def test_the_shape_plan_is_made_again_when_the_limits_halve():
    """After running out of memory the batches that follow are counted afresh at the halved
    limits (4 batches of 2 left, not the first plan's shapes, which no longer come)."""
    from contextlib import nullcontext

    tokens = [10] * 8
    calls: list[int] = []
    told: list[int] = []

    def context(passes):
        told.append(passes)
        return nullcontext()

    out = list(
        in_batches(
            tokens, _oom_above(2, calls), 8, tokens=tokens, batch_tokens=80, shape_context=context
        )
    )
    assert [len(index) for index, _ in out] == [2, 2, 2, 2]
    # one batch of 8 planned; halved to 4 (2 batches of 4 planned), then to 2: the four
    # batches of 2 the plan of the items left holds
    assert told == [1, 2, 4, 4, 4, 4]


def test_cudnn_attention_only_for_a_shape_the_job_runs_often(model_dir):
    """The right-end contexts through Engine.run_batched: the shape of 4 full batches keeps
    SDPA's own choice (cuDNN's attention allowed, its plan paid back), the last, partial batch
    runs without it (model.attention.for_planned_passes); the answers are those of one context
    a batch."""
    from carbon_vep.model.attention import CUDNN_PLAN_PASSES

    assert CUDNN_PLAN_PASSES == 4
    loaded = load_model(ModelSettings(str(model_dir), trust_remote_code=True))
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=2)
    cudnn_allowed: list[bool] = []
    engine.body.register_forward_pre_hook(
        lambda *_: cudnn_allowed.append(torch.backends.cuda.cudnn_sdp_enabled())
    )
    contexts = [loaded.vocab.encode("ACGTTG" * (10 + i % 3) + "ACGTTG" * 5) for i in range(9)]
    equal = [loaded.vocab.encode("ACGTTG" * 20)] * 9
    got = engine.next_base_log_probs(equal, "dna_block")
    assert cudnn_allowed == [True] * 4 + [False]  # 4 batches of 2, then 1 alone
    cudnn_allowed.clear()
    engine.next_base_log_probs(contexts, "dna_block")  # 3 lengths, 3 each: no shape 4 times
    assert cudnn_allowed and not any(cudnn_allowed)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # restored after the run
    one = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=1)
    for a, b in zip(got, one.next_base_log_probs(equal, "dna_block"), strict=True):
        assert abs(a - b).max() < 1e-5
