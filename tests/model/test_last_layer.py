"""The last decoder layer for the positions a pass reads (model.last_layer): the kept positions'
hidden states equal a whole pass's, the cache equals the whole pass's in every layer, and the
last layer's queries, output projection and MLP see the kept positions only. Under both
attentions the jobs use (transformers' sdpa, LOWER_RIGHT_SDPA), with and without a cache, with
a boolean mask, with YaRN; a layer it does not know runs whole."""

import numpy as np
import pytest
import torch
from support.toy_llama import toy_config
from torch.nn.attention.bias import causal_lower_right
from transformers import DynamicCache, LlamaForCausalLM

from carbon_vep.model import last_layer
from carbon_vep.model.attention import LOWER_RIGHT_SDPA, branch_mask, register
from carbon_vep.model.engine import Engine
from carbon_vep.model.last_layer import kept_mask, prunable, reading_last

ATTENTIONS = ["sdpa", LOWER_RIGHT_SDPA]


def config(**extra):
    return toy_config(num_hidden_layers=3, **extra)


@pytest.fixture(scope="module")
def model():
    register()
    torch.manual_seed(0)
    return LlamaForCausalLM(config()).eval()


def ids_of(length: int, rows: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 64, (rows, length), generator=torch.Generator().manual_seed(seed))


def run(model, ids, keep=None, cache=None, mask=None, positions=None):
    """The body's hidden states and whether the last layer was pruned."""
    with torch.inference_mode(), reading_last(model.model, keep) as pruned:
        out = model.model(
            input_ids=ids,
            attention_mask=mask,
            cache=cache,
            use_cache=cache is not None,
            **({} if positions is None else {"position_ids": positions}),
        )
    return out[0], pruned


def same_cache(a: DynamicCache, b: DynamicCache) -> bool:
    return all(
        torch.allclose(x.keys, y.keys, atol=1e-6) and torch.allclose(x.values, y.values, atol=1e-6)
        for x, y in zip(a.layers, b.layers, strict=True)
    )


@pytest.fixture
def last_layer_rows(model):
    """How many positions the last layer's query projection, output projection and MLP saw,
    and its key projection, in each pass."""
    layer = model.model.layers[-1]
    seen = {"q": [], "o": [], "mlp": [], "k": []}
    hooks = [
        getattr(layer.self_attn, f"{name}_proj").register_forward_hook(
            lambda m, args, out, name=name: seen[name].append(args[0].shape[1])
        )
        for name in ("q", "o", "k")
    ]
    hooks.append(layer.mlp.register_forward_hook(lambda m, a, o: seen["mlp"].append(a[0].shape[1])))
    yield seen
    for hook in hooks:
        hook.remove()


@pytest.mark.parametrize("implementation", ATTENTIONS)
@pytest.mark.parametrize("keep", [0, 1, 5])
def test_kept_positions_equal_the_whole_pass_and_the_cache_is_the_same(
    model, implementation, keep, last_layer_rows
):
    model.set_attn_implementation(implementation)
    ids = ids_of(300)
    whole_cache, cache = DynamicCache(config=model.config), DynamicCache(config=model.config)
    whole, _ = run(model, ids, cache=whole_cache)
    part, pruned = run(model, ids, keep=keep, cache=cache)
    model.set_attn_implementation("sdpa")
    assert pruned and part.shape == (2, keep, 64)
    assert torch.allclose(part, whole[:, 300 - keep :], atol=1e-5)
    assert same_cache(cache, whole_cache)
    # the whole pass, then the kept one: keys over every position, the rest over the kept
    assert last_layer_rows["k"] == [300, 300]
    assert (
        last_layer_rows["q"]
        == last_layer_rows["o"]
        == last_layer_rows["mlp"]
        == ([300, keep] if keep else [300])
    )


@pytest.mark.parametrize("implementation", ATTENTIONS)
def test_a_prompt_in_chunks_read_at_its_end(model, implementation):
    """The NIAH prefill: the chunks before the last keep nothing (their keys and values only),
    the last keeps its last position, against the whole prompt in one full pass; a decode step
    off either cache gives the same state."""
    model.set_attn_implementation(implementation)
    ids = ids_of(256)
    whole_cache, cache = DynamicCache(config=model.config), DynamicCache(config=model.config)
    whole, _ = run(model, ids, cache=whole_cache)
    for lo in (0, 100, 200):
        keep = 1 if lo == 200 else 0
        part, _ = run(model, ids[:, lo : min(lo + 100, 256)], keep=keep, cache=cache)
    assert torch.allclose(part[:, -1], whole[:, -1], atol=1e-5)
    assert same_cache(cache, whole_cache)
    step = ids_of(1, seed=7)
    after_whole, _ = run(model, step, cache=whole_cache)
    after, _ = run(model, step, cache=cache)
    model.set_attn_implementation("sdpa")
    assert torch.allclose(after, after_whole, atol=1e-5)


@pytest.mark.parametrize("implementation", ATTENTIONS)
def test_kept_rows_of_a_boolean_mask(model, implementation):
    """A branch-mask pass after a cache (Genomic-NIAH's runs) read at its last run only: that
    run's rows of the mask, so it still sees none of the other runs."""
    model.set_attn_implementation(implementation)
    ids = ids_of(120)
    runs = ids_of(9, seed=3)
    mask, positions = branch_mask(120, [3, 3, 3], torch.device("cpu"))
    states = []
    for keep in (None, 3):
        cache = DynamicCache(config=model.config)
        run(model, ids, cache=cache)
        states.append(run(model, runs, keep=keep, cache=cache, mask=mask, positions=positions)[0])
    model.set_attn_implementation("sdpa")
    assert torch.allclose(states[1], states[0][:, -3:], atol=1e-5)


def test_yarn_positions(model):
    """YaRN scales the rotary tables (and attention through them): the kept queries are rotated
    with their own positions' tables."""
    torch.manual_seed(0)
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256}
    yarn = LlamaForCausalLM(config(rope_scaling=scaling)).eval()
    yarn.set_attn_implementation(LOWER_RIGHT_SDPA)
    ids = ids_of(700)
    whole, _ = run(yarn, ids)
    part, pruned = run(yarn, ids, keep=4)
    assert pruned and torch.allclose(part, whole[:, -4:], atol=1e-5)


def test_a_layer_it_does_not_know_runs_whole(model):
    """eager attention (and any layer other than Llama's): no pruning, the kept positions sliced
    from the whole pass by the engine."""
    model.set_attn_implementation("eager")
    try:
        assert not prunable(model.model)
        part, pruned = run(model, ids_of(50), keep=2)
    finally:
        model.set_attn_implementation("sdpa")
    assert not pruned and part.shape[1] == 50
    assert "forward" not in vars(model.model.layers[-1])  # nothing patched


def test_the_layer_is_restored_after_an_error(model):
    with pytest.raises(RuntimeError), reading_last(model.model, 1):
        raise RuntimeError("a pass failed")
    assert "forward" not in vars(model.model.layers[-1])


def test_kept_mask_rows():
    """The last n rows of a causal pass's mask are a causal mask aligned to the lower right."""
    for n, keys in [(3, 10), (2, 2)]:
        full = torch.ones(keys, keys, dtype=torch.bool).tril()[None, None]
        assert torch.equal(kept_mask(None, n, keys, "sdpa"), full[..., keys - n :, :])
        assert torch.equal(kept_mask(full, n, keys, "sdpa"), full[..., keys - n :, :])
    assert kept_mask(None, 1, 10, "sdpa") is None  # the last query sees every key
    # a chunk's lower-right bias (a tensor subclass, never sliced as a tensor)
    bias = kept_mask(causal_lower_right(8, 10), 3, 10, LOWER_RIGHT_SDPA)
    assert (bias.seq_len_q, bias.seq_len_kv) == (3, 10)
    assert kept_mask(causal_lower_right(8, 10), 1, 10, LOWER_RIGHT_SDPA) is None
    with pytest.raises(TypeError, match="no kept rows"):
        kept_mask(object(), 2, 10, "sdpa")


def test_the_engine_reads_the_last_states(loaded):
    """Engine.forward's keep_last and last_hidden_states (the right-end contexts) on the demo
    model: equal lengths prune, mixed lengths are padded and read at each one's end."""
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)
    assert prunable(engine.body)
    rng = np.random.default_rng(5)
    seqs = [loaded.vocab.encode("".join(rng.choice(list("ACGT"), 240))) for _ in range(2)]
    mlp_rows = []
    hook = last_layer.last_layer(engine.body).mlp.register_forward_hook(
        lambda m, args, out: mlp_rows.append(args[0].shape[1])
    )
    try:
        with torch.inference_mode():
            whole, _ = engine.forward(np.stack(seqs))
            last = engine.last_hidden_states(seqs)
            mixed = engine.last_hidden_states([seqs[0], seqs[1][:25]])
            alone = engine.forward(seqs[1][None, :25])[0][:, -1]
    finally:
        hook.remove()
    assert torch.allclose(last, whole[:, -1], atol=1e-5)
    assert torch.allclose(mixed[1], alone[0], atol=1e-5)
    assert mlp_rows == [41, 1, 41, 25]  # whole, kept, padded, alone
    assert last_layer.kept(whole, None) is whole and last_layer.kept(whole, 50) is whole
