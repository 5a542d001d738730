"""Recovery's `decode_cache` static: transformers' StaticCache gives exactly the dynamic cache's
predictions on the CPU (float32, the demo model), at batch 1 and batched, with the published
suppression and min_new_tokens, for each decoder, with a draft, and for left-padded prompts of
unequal lengths (which our batches never hold, but transformers' static mask must get right).
Each test checks the static cache was in use, so an equality cannot pass vacuously. On a CPU
transformers does not compile the decode step; what the compiled step does on a GPU is the GPU
check's `rollouts` step (docs/generation.md#static-kv-cache)."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from support.context_model import context_dependent
from transformers import DynamicCache, StaticCache

from carbon_vep.config.fields import from_args
from carbon_vep.config.stages import ModelSettings, RecoverySettings
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.drafting import Draft
from carbon_vep.model.loading import load_model
from carbon_vep.suite.rollouts import (
    _generation_config,
    decode_cache_note,
    generate_continuations,
    static_cache_length,
)

BASES = "ACGT"
NEW = 24  # tokens: long enough for the cache to matter, short enough for two cores


@pytest.fixture(scope="module")
def loaded(demo_model_dir):
    """The demo model made to depend on its context (support.context_model), its own load."""
    return context_dependent(demo_model_dir)


def test_the_model_under_test_depends_on_its_context(loaded):
    """What makes the equalities below worth something: dropping the far half of a prompt
    changes its continuation, and so does a left-padded batch decoded without its mask."""
    prompt = _prompts((300,))[0]
    settings = RecoverySettings(new_tokens=NEW, score_bp=NEW * 6)
    near, far = generate_continuations(loaded, [prompt, prompt[150:]], settings, 1)
    assert near != far
    ids, mask = _left_padded(loaded, _prompts((60, 300, 180, 30), seed=9))
    run = _runner(loaded, settings)
    assert not torch.equal(run(ids, mask), run(ids, torch.ones_like(mask)))


def _prompts(lengths, seed=5):
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(BASES), n)) for n in lengths]


class CacheSeen:
    """The cache class (and static size) of every forward call of `model`."""

    def __init__(self, model):
        self.calls: list[tuple[str, int | None]] = []
        self.hook = model.register_forward_pre_hook(self.record, with_kwargs=True)

    def record(self, _module, _args, kwargs):
        cache = kwargs.get("cache")
        size = cache.layers[0].max_cache_len if isinstance(cache, StaticCache) else None
        self.calls.append((type(cache).__name__, size))

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.hook.remove()

    @property
    def kinds(self) -> set[str]:
        return {kind for kind, _ in self.calls}


@pytest.mark.parametrize("decoder", ["token", "fns_marginal", "fns_conditional"])
def test_static_rollouts_equal_dynamic_ones_alone_and_batched(loaded, decoder):
    """Prompts of four token lengths (a group of three, batched, and lone ones), the species-tag
    lead of one prompt making a fifth: static and dynamic, batch 1 and batch 3, all the same."""
    prompts = _prompts((300, 300, 120, 300, 36, 600))
    leads = [()] * 5 + [(loaded.tokenizer.eos_token_id,)]  # any one-id lead: a longer prompt
    dynamic = RecoverySettings(decoder=decoder, new_tokens=NEW, score_bp=NEW * 6)
    static = replace(dynamic, decode_cache="static")
    expected = generate_continuations(loaded, prompts, dynamic, 3, leads=leads)
    with CacheSeen(loaded.model) as seen:
        batched = generate_continuations(loaded, prompts, static, 3, leads=leads)
    longest = 1 + 600 // 6 + 1  # prefix, 100 k-mers, the lead
    assert seen.kinds == {"StaticCache"}
    assert {size for _, size in seen.calls} == {static_cache_length([longest], static)}
    alone = [
        generate_continuations(loaded, [p], static, 1, leads=[lead])[0]
        for p, lead in zip(prompts, leads, strict=True)
    ]
    assert batched == expected and alone == expected
    assert all(len(c) == NEW * 6 for c in expected if decoder != "token")


def _left_padded(loaded, prompts):
    encoded = [loaded.vocab.encode(p, ()) for p in prompts]
    width = max(map(len, encoded))
    ids = torch.full((len(encoded), width), loaded.vocab.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, one in enumerate(encoded):
        ids[row, width - len(one) :] = torch.as_tensor(one)
        mask[row, width - len(one) :] = 1
    return ids, mask


def _runner(loaded, settings):
    """transformers' generate with the recipe's own generation config (suppression,
    min_new_tokens), on the static cache of `cache_length` slots when given."""

    def run(input_ids, attention_mask, cache_length=None):
        config = _generation_config(loaded, settings, cache_length)
        with torch.inference_mode():
            out = loaded.model.generate(
                input_ids=input_ids, attention_mask=attention_mask, generation_config=config
            )
        return out[:, input_ids.shape[1] :]

    return run


def test_left_padded_prompts_of_unequal_lengths_decode_the_same_on_both_caches(loaded):
    """The classic static-cache bug: left padding. One left-padded batch of four lengths,
    static against dynamic, and each row against its prompt alone."""
    settings = RecoverySettings(new_tokens=NEW, score_bp=NEW * 6)
    prompts = _prompts((60, 300, 180, 30), seed=9)
    ids, mask = _left_padded(loaded, prompts)
    run = _runner(loaded, settings)
    dynamic = run(ids, mask)
    with CacheSeen(loaded.model) as seen:
        static = run(ids, mask, ids.shape[1] + NEW - 1)
    assert seen.kinds == {"StaticCache"}
    assert torch.equal(static, dynamic)
    for row, prompt in enumerate(prompts):
        alone, _ = _left_padded(loaded, [prompt])
        assert torch.equal(
            run(alone, torch.ones_like(alone), alone.shape[1] + NEW - 1)[0], dynamic[row]
        )
    assert not hasattr(loaded.model, "_compiled_call")  # a CPU: transformers did not compile


def test_drafted_rollouts_verify_on_the_static_cache_with_the_same_output(loaded, tmp_path):
    """transformers 5.24 takes a static cache in assisted generation: the target verifies on
    it (cropped back after each rejection), the draft proposes on its own dynamic cache; the
    output is the plain greedy one."""
    draft_dir = build_demo_model(tmp_path / "draft", num_layers=1, seed=7)
    draft = load_model(ModelSettings(str(draft_dir), trust_remote_code=True))
    prompts = _prompts((300, 120))
    dynamic = RecoverySettings(new_tokens=NEW, score_bp=NEW * 6)
    static = replace(dynamic, decode_cache="static")
    plain = generate_continuations(loaded, prompts, dynamic, batch_size=2)
    record = Draft(draft, tokens=3)
    with CacheSeen(loaded.model) as target, CacheSeen(draft.model) as proposer:
        drafted = generate_continuations(loaded, prompts, static, 2, draft=record)
    assert drafted == plain
    assert target.kinds == {"StaticCache"} and proposer.kinds == {"DynamicCache"}
    assert record.new_tokens == 2 * NEW and record.calls["draft"] > 0
    assert record.record()["acceptance_rate"] < 1  # rejections: the static cache was cropped


def test_the_dynamic_default_the_flag_and_the_log_line(loaded):
    from carbon_vep.cli import build_parser

    assert RecoverySettings().decode_cache == "dynamic"
    with CacheSeen(loaded.model) as seen:
        generate_continuations(loaded, _prompts((36,)), RecoverySettings(new_tokens=2), 1)
    assert seen.kinds == {DynamicCache.__name__}
    base = ["score-recovery", "--tasks-file", "t", "--model", "m", "--out", "o"]
    base += ["--metrics", "j", "--task", "t", "--model-key", "m"]
    for cache in ("static", "captured"):
        args = build_parser().parse_args([*base, "--decode-cache", cache])
        assert from_args(args, RecoverySettings) == (RecoverySettings(decode_cache=cache),)
    settings = RecoverySettings(decode_cache="static")
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert "uncompiled on cpu" in decode_cache_note(settings, cpu, drafted=False)
    assert "CUDA graphs" in decode_cache_note(settings, cuda, drafted=False)
    assert "draft proposes on its own dynamic cache" in decode_cache_note(settings, cpu, True)
    assert "dynamic" in decode_cache_note(RecoverySettings(), cpu, drafted=False)
