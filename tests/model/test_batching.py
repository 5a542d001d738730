"""The one out-of-memory backoff (batching.py), as every model stage uses it: a batch that runs
out of memory is retried at half the size, and an item that fails alone is marked, not fatal."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from carbon_vep.config.stages import ModelSettings, RecoverySettings, TileSettings
from carbon_vep.model.batching import FAILED_ALONE, in_batches, run_sorted
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.scan.tiles import scan_region
from carbon_vep.suite.recovery import recover


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
