"""Genomic-NIAH memory: a row of our one-prefill scorer holds no more tensor memory at its peak
than the official script's three passes on the same row (measured with torch's profiler on the
CPU), the prompt's KV cache is never repeated per continuation, nothing of a prefill chunk
outlives it, and rows share a batch only within one prefill chunk. Ours runs under the jobs'
attention (model.attention's lower-right SDPA, whose branch-mask pass carries both
continuations) or transformers' sdpa (a pass each)."""

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from carbon_vep.config.stages import ModelSettings
from carbon_vep.model.attention import LOWER_RIGHT_SDPA, register
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.suite.niah import NiahScorer, rows_per_batch
from carbon_vep.suite.niah_build import CellSpec, write_cell
from carbon_vep.suite.niah_cells import read_cell
from carbon_vep.suite.niah_published import three_pass_cell_row

DEMO_FASTA = Path(__file__).resolve().parents[2] / "resources/demo/chr17.hg19.part.fa"


def peak_tensor_bytes(run) -> int:
    """The largest total of CPU tensor memory allocated during `run` above its start, replayed
    from the profiler's allocation and free events in time order."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    cpu = torch.autograd.DeviceType.CPU
    events = [
        e
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == cpu
    ]
    total = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        total += event.nbytes()
        peak = max(peak, total)
    return peak


@pytest.fixture(scope="module")
def kv_heavy(tmp_path_factory):
    """A model whose KV cache weighs as much as a layer's activations a token (8 layers, no
    grouped heads), so a cache held twice would show against the official passes' peak, and a
    row of 2,048 tokens."""
    folder = tmp_path_factory.mktemp("niah_memory")
    model = build_demo_model(
        folder / "model",
        hidden_size=64,
        num_layers=8,
        num_heads=4,
        num_kv_heads=4,
        intermediate_size=128,
        seed=3,
    )
    write_cell(CellSpec("neardup_d2", 2048, 1, seed=5), DEMO_FASTA, folder / "cell.parquet")
    loaded = load_model(ModelSettings(str(model), trust_remote_code=True))
    return loaded, read_cell(folder / "cell.parquet").row(0, named=True)


@contextmanager
def attention(model, implementation: str):
    model.set_attn_implementation(register() if implementation == LOWER_RIGHT_SDPA else "sdpa")
    try:
        yield
    finally:
        model.set_attn_implementation("sdpa")


def _kv_bytes(cache) -> int:
    return sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
    )


@pytest.mark.parametrize(("chunk", "implementation"), [(256, "sdpa"), (0, LOWER_RIGHT_SDPA)])
def test_a_rows_peak_is_at_most_the_official_passes(kv_heavy, chunk, implementation):
    """Chunked, the peak is the cache and one chunk's activations, below the script's (the
    cache and the whole prompt's); whole, the prefill is the script's own first pass, and the
    branch-mask pass after it (the jobs' attention) adds no peak of its own. (On the CPU the
    jobs' lower-right bias is materialised as a float mask for each chunk: 15.7 MB here
    chunked against sdpa's 11.6 MB; on CUDA it reaches the fused kernels, model.attention.)"""
    loaded, row = kv_heavy
    scorer = NiahScorer(
        Engine(loaded.model, loaded.vocab, loaded.device, 1), loaded.tokenizer, chunk
    )
    args = ([row["prompt"]], [row["value"]], [row["negative_value"]])
    with torch.inference_mode(), attention(loaded.model, implementation):
        ours_result = scorer.score_batch(*args)[0]  # warm-up, then measured
        ours = peak_tensor_bytes(lambda: scorer.score_batch(*args))
    with torch.inference_mode():
        official = peak_tensor_bytes(lambda: three_pass_cell_row(loaded, row))
    reference = three_pass_cell_row(loaded, row)
    assert ours_result.pred == reference.pred
    assert ours_result.target_ll == pytest.approx(reference.target_ll, abs=1e-5)
    assert ours <= official, (
        f"ours {ours / 1e6:.2f} MB > the official passes' {official / 1e6:.2f} MB"
    )


@pytest.mark.parametrize("implementation", [LOWER_RIGHT_SDPA, "sdpa"])
def test_the_prompt_cache_is_held_once_and_no_chunk_outlives_its_pass(
    kv_heavy, monkeypatch, implementation
):
    """Each continuation runs off the prompt's own cache (batch = the rows, not rows x 2), the
    cache never holds more than the prompt and the generated tokens (a value's tokens
    generated, or the branch-mask pass's three runs of n - 1 tokens), and the hidden state kept
    from the prefill is one position a row, not the last chunk's. After the prefill, at most
    n - 1 passes under the jobs' attention, n + 1 under sdpa (a 4-token value)."""
    loaded, row = kv_heavy
    engine = Engine(loaded.model, loaded.vocab, loaded.device, 1)
    scorer = NiahScorer(engine, loaded.tokenizer, prefill_chunk=256)
    prompt_tokens = len(loaded.vocab.encode(row["prompt"]))
    seen, kept = [], []
    forward, prefill = engine.forward, scorer.prefill

    def watched(ids, mask=None, cache=None, positions=None, keep_last=None):
        out = forward(ids, mask, cache, positions, keep_last)
        seen.append((out[1].layers[0].keys.shape, _kv_bytes(out[1])))
        return out

    def watched_prefill(ids, cache):
        last = prefill(ids, cache)
        kept.append(last.untyped_storage().nbytes())
        return last

    monkeypatch.setattr(engine, "forward", watched)
    monkeypatch.setattr(scorer, "prefill", watched_prefill)
    with attention(loaded.model, implementation):
        scorer.score_batch([row["prompt"]], [row["value"]], [row["negative_value"]])
    per_token = _kv_bytes_per_token(loaded.model.config)
    new_tokens = len(row["value"]) // 6
    branched = implementation == LOWER_RIGHT_SDPA
    held = 3 * (new_tokens - 1) if branched else new_tokens  # the branch pass's three runs
    after_prefill = len(seen) - -(-prompt_tokens // 256)
    assert 1 <= after_prefill <= new_tokens - 1 if branched else after_prefill == new_tokens + 1
    assert all(shape[0] == 1 for shape, _ in seen)  # one row: never repeated per continuation
    assert max(size for _, size in seen) <= per_token * (prompt_tokens + held)
    assert kept == [loaded.model.config.hidden_size * 4]  # [1, H] float32: the last layer's one row


def _kv_bytes_per_token(config) -> int:
    head_dim = config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4


def test_rows_share_a_batch_only_within_one_prefill_chunk():
    assert rows_per_batch(4_101, 8_192, 8, 0) == 1  # 4k rows: two would pass the chunk
    assert rows_per_batch(2_000, 8_192, 8, 0) == 4
    assert rows_per_batch(2_000, 8_192, 2, 0) == 2  # batch_size still caps it
    assert rows_per_batch(2_000, 8_192, 8, 4_000) == 2  # and batch_tokens, when set
    assert rows_per_batch(32_773, 8_192, 8, 131_072) == 1  # the H100 profile's budget at 32k
    assert rows_per_batch(300, 0, 8, 0) == 1  # the whole prompt at once: a row at a time
    assert rows_per_batch(300, 8_192, 8, 100) == 1  # one at least
    assert np.all([rows_per_batch(n, 0, 64, 0) == 1 for n in (10, 10_000)])
