"""The lower-right causal attention of chunked prefill (model.attention): a prompt prefilled in
chunks under it gives the hidden states of the whole prompt at once and of transformers' own
sdpa (its boolean mask); the bias is used exactly for the chunks that attend to a cache, and
every other case (padding, one query token, no cache) is transformers' sdpa unchanged."""

import pytest
import torch
from support.toy_llama import toy_config
from torch.nn.attention.bias import CausalBias
from transformers import AttentionInterface, DynamicCache, LlamaForCausalLM

from carbon_vep.model import attention
from carbon_vep.model.attention import LOWER_RIGHT_SDPA, chunk_mask, register
from carbon_vep.model.loading import long_context_attention

CONFIG = toy_config()


@pytest.fixture(scope="module")
def model():
    register()
    torch.manual_seed(0)
    return LlamaForCausalLM(CONFIG).eval()


@pytest.fixture
def bias_calls(monkeypatch):
    """How many attention calls got the lower-right bias (the implementation re-registered
    with a counting wrapper for the test)."""
    calls = []

    def counting(module, query, key, value, mask, **kwargs):
        if isinstance(mask, CausalBias):
            calls.append((query.shape[2], key.shape[2]))
        return attention.chunk_attention(module, query, key, value, mask, **kwargs)

    AttentionInterface.register(LOWER_RIGHT_SDPA, counting)
    yield calls
    register()


def _hidden(model, ids, implementation, chunk, mask=None):
    model.set_attn_implementation(implementation)
    cache = DynamicCache(config=CONFIG)
    parts = []
    with torch.inference_mode():
        for lo in range(0, ids.shape[1], chunk):
            piece = None if mask is None else mask[:, : lo + chunk]
            out = model.model(
                input_ids=ids[:, lo : lo + chunk], attention_mask=piece, cache=cache, use_cache=True
            )
            parts.append(out[0])
    model.set_attn_implementation("sdpa")
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("chunk", [64, 37, 1])
def test_chunked_prefill_equals_the_whole_prompt_and_the_boolean_mask(model, bias_calls, chunk):
    ids = torch.randint(0, 64, (2, 300), generator=torch.Generator().manual_seed(1))
    whole = _hidden(model, ids, "sdpa", 300)
    boolean = _hidden(model, ids, "sdpa", chunk)
    lower_right = _hidden(model, ids, LOWER_RIGHT_SDPA, chunk)
    assert torch.allclose(lower_right, whole, atol=1e-5)
    assert torch.allclose(lower_right, boolean, atol=1e-5)
    # every chunk after the first, in each layer, attends to the cache under the bias (one
    # query token needs no mask at all)
    starts = range(chunk, 300, chunk) if chunk > 1 else []
    expected = [(min(chunk, 300 - lo), lo + min(chunk, 300 - lo)) for lo in starts]
    assert bias_calls == [s for s in expected for _ in range(CONFIG.num_hidden_layers)]


def test_padding_masks_go_to_transformers_sdpa(model, bias_calls):
    """Right-padded rows with their mask: the same states as sdpa's, the bias never used."""
    ids = torch.randint(0, 64, (2, 120), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 90:] = 0
    ours = _hidden(model, ids, LOWER_RIGHT_SDPA, 40, mask)
    theirs = _hidden(model, ids, "sdpa", 40, mask)
    assert torch.allclose(ours, theirs, atol=1e-6) and bias_calls == []


def test_the_bias_only_where_it_is_the_whole_mask():
    assert isinstance(chunk_mask(1, 8, 32, q_offset=24), CausalBias)
    # a first chunk (no cache), one query token, a padding mask, queries not at the end
    assert not isinstance(chunk_mask(1, 8, 8, q_offset=0), CausalBias)
    assert not isinstance(chunk_mask(1, 1, 32, q_offset=31), CausalBias)
    padded = torch.ones(1, 32, dtype=torch.bool)
    assert not isinstance(chunk_mask(1, 8, 32, q_offset=24, attention_mask=padded), CausalBias)
    assert not isinstance(chunk_mask(1, 8, 40, q_offset=24), CausalBias)


def test_long_context_jobs_load_with_it_on_a_cpu():
    name = long_context_attention(torch.device("cpu"), "float32")
    assert (
        name == LOWER_RIGHT_SDPA
        and attention.kernel(
            torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 8, 8), torch.zeros(1, 2, 8, 8)
        )
        == "materialised"
    )


def test_a_model_whose_attention_skips_the_registry_loads_with_sdpa(demo_model_dir, monkeypatch):
    """Remote code whose attention does not read transformers' registry could not see the
    bias: such a model gets transformers' sdpa instead; a Llama keeps the lower-right bias."""
    from transformers import LlamaForCausalLM

    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.model.loading import load_model

    spec = ModelSettings(str(demo_model_dir), trust_remote_code=True)
    lower_right = long_context_attention(torch.device("cpu"), "float32")
    assert load_model(spec, attention=lower_right).model.config._attn_implementation == lower_right
    monkeypatch.setattr(LlamaForCausalLM, "_supports_attention_backend", False)
    assert load_model(spec, attention=lower_right).model.config._attn_implementation == "sdpa"


def test_without_cudnn_leaves_the_other_kernels_and_restores_cudnn():
    flags = torch.backends.cuda
    before = flags.cudnn_sdp_enabled()
    with attention.without_cudnn():
        assert not flags.cudnn_sdp_enabled()
        assert flags.flash_sdp_enabled() and flags.mem_efficient_sdp_enabled()
        assert flags.math_sdp_enabled()
    assert flags.cudnn_sdp_enabled() == before


# ---- runs of tokens in one pass under a branch mask ----------------------------------------
def _after_prompt(model, prompt, runs, implementation):
    """Each run's hidden states after the prompt: all runs in one pass under `branch_mask`
    (the cache cropped back after it), and each run alone on its own copy of the prompt's
    cache."""
    model.set_attn_implementation(implementation)
    try:
        with torch.inference_mode():
            cache = DynamicCache(config=CONFIG)
            model.model(input_ids=prompt, cache=cache, use_cache=True)
            cached = cache.get_seq_length()
            mask, positions = attention.branch_mask(cached, [r.shape[1] for r in runs], "cpu")
            together = model.model(
                input_ids=torch.cat(runs, dim=1),
                attention_mask=mask,
                position_ids=positions,
                cache=cache,
                use_cache=True,
            )[0]
            cache.crop(-sum(r.shape[1] for r in runs))
            left = cache.get_seq_length()
            alone = []
            for run in runs:
                own = DynamicCache(config=CONFIG)
                model.model(input_ids=prompt, cache=own, use_cache=True)
                alone.append(model.model(input_ids=run, cache=own, use_cache=True)[0])
    finally:
        model.set_attn_implementation("sdpa")
    return together, torch.cat(alone, dim=1), (cached, left)


@pytest.mark.parametrize("implementation", [LOWER_RIGHT_SDPA, "sdpa"])
def test_runs_under_a_branch_mask_equal_each_run_alone(model, implementation):
    """A first token and two 3-token runs (Genomic-NIAH's first decode step with both value
    continuations): each run's states are those of the run fed alone after the prompt, under
    the jobs' attention (grouped heads packed into the query rows) and transformers' sdpa;
    the crop leaves the prompt's cache as it was."""
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, 64, (2, 50), generator=gen)
    runs = [torch.randint(0, 64, (2, n), generator=gen) for n in (1, 3, 3)]
    together, alone, (cached, left) = _after_prompt(model, prompt, runs, implementation)
    assert torch.allclose(together, alone, atol=1e-5)
    assert cached == left == 50


def test_the_branch_mask_hides_other_runs_and_continues_positions():
    mask, positions = attention.branch_mask(2, [1, 2, 2], "cpu")
    assert positions.tolist() == [[2, 2, 3, 2, 3]]
    assert mask.shape == (1, 1, 5, 7)
    assert mask[0, 0].int().tolist() == [
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 1, 0, 0],
        [1, 1, 0, 0, 0, 1, 0],
        [1, 1, 0, 0, 0, 1, 1],
    ]


def test_packed_heads_equal_repeated_keys_and_values():
    """Query heads packed under their key head ([B, 8, q, d] as [B, 2, 4q, d]) give what
    SDPA gives on keys and values repeated per query head (transformers' repeat_kv)."""
    gen = torch.Generator().manual_seed(4)
    query = torch.randn(2, 8, 5, 16, generator=gen)
    key, value = (torch.randn(2, 2, 40, 16, generator=gen) for _ in range(2))
    mask = torch.rand(1, 1, 5, 40, generator=gen) > 0.3
    mask[..., 0] = True  # every query sees a key
    module = torch.nn.Module()
    module.num_key_value_groups = 4
    assert attention._packs(module, query, mask, 0.0)
    packed, _ = attention.chunk_attention(module, query, key, value, mask, scaling=0.25)
    repeated = torch.nn.functional.scaled_dot_product_attention(
        query,
        key.repeat_interleave(4, dim=1),
        value.repeat_interleave(4, dim=1),
        attn_mask=mask,
        scale=0.25,
    )
    assert torch.allclose(packed, repeated.transpose(1, 2), atol=1e-6)
    # a long query and a mask a row over several queries (padding) keep transformers' own path
    assert not attention._packs(module, torch.zeros(1, 8, 65, 16), mask, 0.0)
    assert not attention._packs(module, query, mask.expand(2, 1, 5, 40), 0.0)


def test_a_decode_step_under_a_mask_a_row_is_transformers_eager_packing_also_compiled(
    monkeypatch,
):
    """One query a row under a mask a row (a decode step on a static cache, its empty slots
    hidden): packed, bit for bit what transformers' eager sdpa computes (its own packing),
    and under torch.compile too, where transformers' sdpa repeats the keys and values per
    query head (repeat_kv) instead."""
    from transformers.integrations import sdpa_attention

    gen = torch.Generator().manual_seed(6)
    query = torch.randn(3, 8, 1, 16, generator=gen)
    key, value = (torch.randn(3, 2, 40, 16, generator=gen) for _ in range(2))
    mask = torch.zeros(3, 1, 1, 40, dtype=torch.bool)
    for row, filled in enumerate((12, 30, 40)):  # each row's cache filled this far
        mask[row, ..., :filled] = True
    module = torch.nn.Module()
    module.num_key_value_groups = 4
    assert attention._packs(module, query, mask, 0.0)
    ours, _ = attention.chunk_attention(module, query, key, value, mask, scaling=0.25)
    theirs, _ = sdpa_attention.sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    assert torch.equal(ours, theirs)

    repeats = []  # the group of every repeat_kv traced
    original = sdpa_attention.repeat_kv
    monkeypatch.setattr(
        sdpa_attention, "repeat_kv", lambda states, n: repeats.append(n) or original(states, n)
    )
    for attend in (attention.chunk_attention, sdpa_attention.sdpa_attention_forward):
        torch._dynamo.reset()
        step = torch.compile(lambda q, k, v, m, f=attend: f(module, q, k, v, m, scaling=0.25)[0])
        assert torch.allclose(step(query, key, value, mask), theirs, atol=1e-6)
        if attend is attention.chunk_attention:
            assert repeats == []  # the job's attention: keys and values read as cached
    torch._dynamo.reset()
    assert repeats == [4, 4]  # transformers' sdpa traced: the keys and the values repeated


def test_only_the_jobs_attention_takes_branch_masks(model):
    model.set_attn_implementation(LOWER_RIGHT_SDPA)
    assert attention.takes_branch_masks(model)
    model.set_attn_implementation("sdpa")
    assert not attention.takes_branch_masks(model)
