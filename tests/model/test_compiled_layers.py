"""`compile_layers` (model.compiled_layers): the passes without a cache run the decoder layers
compiled by torch.compile (inductor's CPU code here) and give the eager answers to float
rounding; passes with a cache and the pruned last layer stay eager; one graph serves every
layer; a failed compile falls back to eager answers, an out-of-memory error still reaches the
batcher; the job's record holds the compile's seconds. Speed is not asserted (the CPU gains
nothing: docs/performance.md#compiled-decoder-layers)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import polars as pl
import pytest
import torch
from support.files import random_dna
from torch._dynamo.utils import counters

from carbon_vep.config.stages import ModelSettings, TileSettings
from carbon_vep.model import compiled_layers, job_record
from carbon_vep.model.engine import Engine
from carbon_vep.model.window_groups import window_groups_scores
from carbon_vep.scan.tiles import scan_region

pytestmark = pytest.mark.slow  # inductor compiles C++ for the CPU: seconds a graph

TILES = TileSettings(tile_bp=600, min_context=240)
REGION = ("chr17", 2_000, 4_400)  # several full tiles, then a shorter one: two shapes


def graphs() -> int:
    return int(counters["stats"]["unique_graphs"])


@contextmanager
def compiled_calls(loaded) -> Iterator[list[bool]]:
    """Per layer call within, in order: whether the layer ran compiled (a pre-hook runs either
    way: Dynamo traces it in)."""
    seen: list[bool] = []
    hooks = [
        layer.register_forward_pre_hook(
            lambda module, args: seen.append(module._compiled_call_impl is not None)
        )
        for layer in loaded.model.get_decoder().layers
    ]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


@pytest.fixture(scope="module")
def engines(loaded):
    eager = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=3)
    compiled = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=3)
    compiled.compile_layers()
    return eager, compiled


@pytest.fixture(scope="module")
def scans(engines, reference):
    """The region scanned eagerly, then compiled (graphs compiled during it), then compiled
    again (none)."""
    eager, compiled = engines
    first = scan_region(eager, reference, *REGION, TILES)
    before = graphs()
    second = scan_region(compiled, reference, *REGION, TILES)
    during = graphs() - before
    before = graphs()
    third = scan_region(compiled, reference, *REGION, TILES)
    return first, second, third, during, graphs() - before


def test_a_scan_compiled_gives_the_eager_values(scans, loaded):
    eager, compiled, again, compiled_graphs, graphs_again = scans
    assert compiled.select("chrom", "pos", "phase").equals(eager.select("chrom", "pos", "phase"))
    values = [c for c in eager.columns if c.startswith(("fns_", "cond_"))]
    assert values
    for column in values:
        assert (compiled[column] - eager[column]).abs().max() < 1e-5, column
    assert again.equals(compiled)
    # the region's 7 tiles: two batches of three 600 bp tiles, then the 480 bp one alone. One
    # graph with dynamic sizes serves both layers of the demo model, and one the batch of one
    # (Dynamo specialises sizes of 1): 2 (a graph a layer would make 4); none when the same
    # tiles come again
    assert compiled_graphs == 2 and graphs_again == 0
    for layer in loaded.model.get_decoder().layers:  # the model is eager again after a pass
        assert layer._compiled_call_impl is None


def test_passes_with_a_cache_and_the_kept_last_layer_stay_eager(engines, loaded):
    """Window groups (prefix, then suffixes off its cache) compile nothing; right-end contexts
    (the last layer kept for one position) run every layer but the last compiled."""
    _, compiled = engines
    refs = [random_dna(240, seed) for seed in (1, 2)]
    groups = [(ref, [ref[:120] + ("A" if ref[120] != "A" else "C") + ref[121:]]) for ref in refs]
    before = graphs()
    window_groups_scores(compiled, groups, "token", "dna_block")
    assert graphs() == before
    contexts = [loaded.vocab.encode(random_dna(300, s)) for s in (3, 4)]
    with torch.inference_mode(), compiled_calls(loaded) as seen:
        ours = compiled.last_hidden_states(contexts)
    # the demo model's 2 layers: the first compiled, the last (kept for one position) eager
    assert seen == [True, False]
    eager, _ = engines
    with torch.inference_mode():
        assert torch.allclose(ours, eager.last_hidden_states(contexts), atol=1e-5)


def test_whole_windows_with_padding_run_every_layer_compiled(engines, loaded):
    """Windows of mixed lengths (the perturbation pairs' and published right-end batches: right
    padding and a mask), read at every position: every layer compiled, the eager values."""
    eager, compiled = engines
    windows = [loaded.vocab.encode(random_dna(n, n)) for n in (240, 180, 120)]
    with torch.inference_mode(), compiled_calls(loaded) as seen:
        ours, lengths = compiled.hidden_states(windows)
    assert seen == [True, True]
    with torch.inference_mode():
        theirs, _ = eager.hidden_states(windows)
    for row, n in enumerate(lengths):  # the padding's positions are read by nobody
        assert torch.allclose(ours[row, :n], theirs[row, :n], atol=1e-5)


def test_a_failed_compile_falls_back_to_eager_answers(engines, monkeypatch, caplog):
    eager, _ = engines
    failing = Engine(eager.model, eager.vocab, eager.device, batch_size=3)
    failing.compile_layers()

    def refuses(*args, **kwargs):
        raise RuntimeError("inductor refused")

    failing.compiled_layers.calls = [refuses] * len(failing.compiled_layers.layers)
    ids = np.stack([eager.vocab.encode(random_dna(120, s)) for s in (5, 6)])
    with torch.inference_mode():
        ours, _ = failing.forward(ids)
        again, _ = failing.forward(ids)  # eager from now on: no second attempt
        theirs, _ = eager.forward(ids)
    assert torch.equal(ours, theirs) and torch.equal(again, theirs)
    assert failing.compiled_layers.failed == "RuntimeError: inductor refused"
    assert [r.message for r in caplog.records if "compile_layers" in r.message] == [
        "compile_layers: compiling failed, the layers run eagerly (RuntimeError: inductor refused)"
    ]


def test_out_of_memory_reaches_the_batcher(engines):
    eager, _ = engines
    engine = Engine(eager.model, eager.vocab, eager.device, batch_size=3)
    engine.compile_layers()

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    engine.compiled_layers.calls = [out_of_memory] * len(engine.compiled_layers.layers)
    ids = np.stack([eager.vocab.encode(random_dna(120, 7))])
    with pytest.raises(torch.OutOfMemoryError), torch.inference_mode():
        engine.forward(ids)
    assert engine.compiled_layers.failed is None  # OOM is no reason to stop compiling


def test_the_setting_compiles_after_the_probe_and_the_record_holds_the_compile(
    demo_model_dir, reference, monkeypatch, tmp_path
):
    """A job's engine (model.job.load_engine) with compile_layers: the start-up probe runs
    eagerly, the scan compiles, and the job record's phase `compile_layers` holds the seconds
    of the passes that compiled."""
    from carbon_vep.model.job import load_engine

    torch._dynamo.reset()  # a fresh process's first compile
    monkeypatch.setenv(job_record.RECORDS_ENV, str(tmp_path))
    settings = ModelSettings(str(demo_model_dir), trust_remote_code=True, compile_layers=True)
    with job_record.job_record("scan", str(tmp_path / "out.parquet")):
        before = graphs()
        engine = load_engine(settings, None)
        assert graphs() == before and engine.compiled_layers is not None
        positions = scan_region(engine, reference, *REGION, TILES)
        assert graphs() > before
    assert positions.height == REGION[2] - REGION[1]
    [record] = [pl.read_json(p) for p in tmp_path.glob("*.json")]
    phases, tokens = record["phases"][0], record["phase_tokens"][0]
    assert 0 < phases[compiled_layers.COMPILE_PHASE] <= record["after_load_s"][0]
    # the tiles of the passes that compiled (not the probe's: it ran before, eagerly)
    assert 0 < tokens[compiled_layers.COMPILE_PHASE] < record["tokens"][0]
