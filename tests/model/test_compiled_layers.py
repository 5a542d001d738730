"""`compile_layers` (model.compiled_layers): every pass runs the decoder layers' steps around
attention compiled by torch.compile (inductor's CPU code here) and gives the eager answers to
float rounding, with a cache or without (scan tiles, right-end contexts, padded windows, window
groups, a chunked prefill); decode steps and the pruned last layer stay eager; one graph a step
serves every layer; a failed compile falls back to eager answers with the cache updated once,
an out-of-memory error still reaches the batcher; the job's record holds the compile's seconds.
Speed is not asserted (docs/performance.md#compiled-decoder-layers)."""

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
from carbon_vep.model import compiled_layers, job_record, llama_layer
from carbon_vep.model.engine import Engine, new_cache
from carbon_vep.model.window_groups import window_groups_scores
from carbon_vep.scan.tiles import scan_region

pytestmark = pytest.mark.slow  # inductor compiles C++ for the CPU: seconds a graph

TILES = TileSettings(tile_bp=600, min_context=240)
REGION = ("chr17", 2_000, 4_400)  # several full tiles, then a shorter one: two shapes


def graphs() -> int:
    return int(counters["stats"]["unique_graphs"])


def stepwise(layer) -> bool:
    """Whether `layer` runs as its steps (model.compiled_layers installed its forward)."""
    forward = layer.__dict__.get("forward")
    return getattr(forward, "func", None) is compiled_layers._stepwise_forward


@contextmanager
def compiled_calls(loaded) -> Iterator[list[bool]]:
    """Per layer call within, in order: whether the layer ran as its steps, two compiled."""
    seen: list[bool] = []
    hooks = [
        layer.register_forward_pre_hook(lambda module, args: seen.append(stepwise(module)))
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
    # the region's 7 tiles: two batches of three 600 bp tiles, then the 480 bp one alone. A
    # graph a step with dynamic sizes serves both layers of the demo model, and one a step the
    # batch of one (Dynamo specialises sizes of 1): 4 (a graph a layer would make 8); none when
    # the same tiles come again
    assert compiled_graphs == 4 and graphs_again == 0
    for layer in loaded.model.get_decoder().layers:  # the class's forward again after a pass
        assert "forward" not in layer.__dict__


def test_window_groups_compile_and_give_the_eager_scores(engines):
    """The centered recipe's passes (prefixes, then every allele's suffix off their cache,
    repeated per allele) run the compiled steps: the eager scores, and no new graph for a
    second set of groups of other shapes (the graphs' sizes are dynamic)."""
    eager, compiled = engines

    def groups(length: int, seeds: tuple[int, ...]) -> list:
        refs = [random_dna(length, seed) for seed in seeds]
        mid = length // 2
        return [
            (ref, [ref[:mid] + b + ref[mid + 1 :] for b in "ACGT" if b != ref[mid]][:alts])
            for ref, alts in zip(refs, (1, 3, 2), strict=False)
        ]

    first, second = groups(240, (1, 2, 3)), groups(300, (4, 5))
    ours = window_groups_scores(compiled, first, "token", "dna_block")
    before = graphs()
    ours += window_groups_scores(compiled, second, "token", "dna_block")
    assert graphs() == before and compiled.compiled_layers.failed is None
    theirs = window_groups_scores(eager, first + second, "token", "dna_block")
    for (ref, alts), (eager_ref, eager_alts) in zip(ours, theirs, strict=True):
        for got, want in zip([ref, *alts], [eager_ref, *eager_alts], strict=True):
            assert got.count == want.count
            assert abs(got.total - want.total) < 1e-4 * max(1.0, abs(want.total))


def test_a_chunked_prefill_compiles_and_decode_steps_stay_eager(engines, loaded, monkeypatch):
    """Genomic-NIAH's passes: a prompt prefilled in chunks off a growing cache (the last layer
    pruned to nothing, then to the last position), then a one-token step: the eager hidden
    states and cache; the one-token step runs no compiled step."""
    eager, compiled = engines
    ids = np.stack([loaded.vocab.encode(random_dna(600, 9))])

    eager_steps: list[int] = []  # the one-token step's eager attention inputs, a layer each
    counted = compiled_layers.attention_inputs

    def counting(layer, *args):
        eager_steps.append(layer.self_attn.layer_idx)
        return counted(layer, *args)

    def prefill(engine: Engine) -> tuple[torch.Tensor, torch.Tensor, list[bool]]:
        cache = new_cache(engine.model)
        with torch.inference_mode():
            engine.forward(ids[:, :40], cache=cache, keep_last=0)
            engine.forward(ids[:, 40:70], cache=cache, keep_last=0)
            last, _ = engine.forward(ids[:, 70:-1], cache=cache, keep_last=1)
            with compiled_calls(loaded) as seen, monkeypatch.context() as patched:
                patched.setattr(compiled_layers, "attention_inputs", counting)
                step, _ = engine.forward(ids[:, -1:], cache=cache)
        return torch.cat([last, step], dim=1), cache.layers[0].keys, seen

    ours, our_keys, seen = prefill(compiled)
    assert seen == [True, True] and eager_steps == [0, 1]  # installed; both layers eager
    assert compiled.compiled_layers.failed is None
    theirs, their_keys, _ = prefill(eager)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert our_keys.shape == their_keys.shape and torch.allclose(our_keys, their_keys, atol=1e-5)


def test_the_kept_last_layer_stays_as_it_is(engines, loaded):
    """Right-end contexts (the last layer kept for one position): every layer but the last
    runs as its steps, with the eager values."""
    eager, compiled = engines
    contexts = [loaded.vocab.encode(random_dna(300, s)) for s in (3, 4)]
    with torch.inference_mode(), compiled_calls(loaded) as seen:
        ours = compiled.last_hidden_states(contexts)
    # the demo model's 2 layers: the first as its steps, the last (kept for one position) not
    assert seen == [True, False]
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


def test_a_failed_compile_falls_back_to_eager_answers(engines, caplog):
    """A compile refused at the step after attention, in a pass with a cache: that step runs
    eagerly in place (the cache updated once, not again by a rerun), and so does every step
    after it; one log line."""
    eager, _ = engines
    failing = Engine(eager.model, eager.vocab, eager.device, batch_size=3)
    failing.compile_layers()

    def refuses(*args, **kwargs):
        raise RuntimeError("inductor refused")

    failing.compiled_layers.steps = (llama_layer.attention_inputs, refuses)
    ids = np.stack([eager.vocab.encode(random_dna(120, s)) for s in (5, 6)])

    def prefix_then_suffix(engine: Engine) -> tuple[torch.Tensor, int]:
        cache = new_cache(engine.model)
        with torch.inference_mode():
            engine.forward(ids[:, :8], cache=cache)
            hidden, _ = engine.forward(ids[:, 8:], cache=cache)
        return hidden, cache.get_seq_length()

    ours, our_length = prefix_then_suffix(failing)
    theirs, their_length = prefix_then_suffix(eager)
    assert torch.equal(ours, theirs) and our_length == their_length == ids.shape[1]
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

    engine.compiled_layers.steps = (out_of_memory, out_of_memory)
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
