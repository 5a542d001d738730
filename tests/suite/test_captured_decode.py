"""Recovery's `decode_cache` captured: our own greedy loop on transformers' StaticCache
(model.captured_decode), and with a draft our speculative one (model.captured_drafting), give
exactly the predictions of transformers' `generate` on the CPU (float32), for each decoder,
alone and batched; a step or iteration reads nothing back from the device and copies nothing
from the host (what a CUDA graph needs); a failed compile or capture leaves the same answers.
The CUDA graph itself needs CUDA: the GPU check's `rollouts` step runs it
(docs/generation.md#captured-decode-steps)."""

import math
import types
from dataclasses import replace

import numpy as np
import pytest
import torch
from support.context_model import context_dependent
from support.host_reads import HostReads
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import StaticCache

from carbon_vep.config.stages import ModelSettings, RecoverySettings
from carbon_vep.model import captured_decode, compiled_layers, llama_layer
from carbon_vep.model.captured_decode import CapturedDecoder
from carbon_vep.model.captured_drafting import CapturedSpeculation
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.drafting import Draft
from carbon_vep.model.loading import load_model
from carbon_vep.suite.rollouts import (
    StepClock,
    decode_cache_note,
    generate_continuations,
    static_cache_length,
    step_choice,
)

BASES = "ACGT"
NEW = 24  # tokens


@pytest.fixture(scope="module")
def loaded(demo_model_dir):
    """The demo model made to depend on its context (support.context_model), its own load."""
    return context_dependent(demo_model_dir)


def _prompts(lengths, seed=5):
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(BASES), n)) for n in lengths]


class Passes:
    """The cache class and size of every forward call of `model`; `generate` refused."""

    def __init__(self, model, monkeypatch):
        self.calls: list[tuple[str, int | None, int]] = []
        self.hook = model.register_forward_pre_hook(self.record, with_kwargs=True)
        monkeypatch.setattr(model, "generate", self.refuse)

    def record(self, _module, _args, kwargs):
        cache = kwargs.get("cache")
        size = cache.layers[0].max_cache_len if isinstance(cache, StaticCache) else None
        self.calls.append((type(cache).__name__, size, kwargs["input_ids"].shape[1]))

    @staticmethod
    def refuse(*_args, **_kwargs):
        raise AssertionError("the captured loop called transformers' generate")

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.hook.remove()


@pytest.mark.parametrize("decoder", ["token", "fns_marginal", "fns_conditional"])
def test_captured_rollouts_equal_generates_alone_and_batched(loaded, decoder, monkeypatch):
    """Prompts of four token lengths and a species-tag lead (as test_static_cache), at batch
    3, batch 2 (batch sizes 2 and 1 in turn: the steppers change) and alone: every rollout
    equals transformers' generate on the dynamic cache, and only our loop ran, on one static
    cache size, one prefill a batch and new_tokens - 1 one-token steps."""
    prompts = _prompts((300, 300, 120, 300, 36, 600, 300))
    leads = [()] * 6 + [(loaded.tokenizer.eos_token_id,)]
    dynamic = RecoverySettings(decoder=decoder, new_tokens=NEW, score_bp=NEW * 6)
    captured = replace(dynamic, decode_cache="captured")
    expected = generate_continuations(loaded, prompts, dynamic, 3, leads=leads)
    with Passes(loaded.model, monkeypatch) as seen:
        batched = generate_continuations(loaded, prompts, captured, 3, leads=leads)
        pairs = generate_continuations(loaded, prompts, captured, 2, leads=leads)
    with Passes(loaded.model, monkeypatch):
        alone = [
            generate_continuations(loaded, [p], captured, 1, leads=[lead])[0]
            for p, lead in zip(prompts, leads, strict=True)
        ]
    assert batched == expected and pairs == expected and alone == expected
    longest = 1 + 600 // 6  # prefix, 100 k-mers (the lead is on a shorter one)
    assert {(kind, size) for kind, size, _ in seen.calls} == {
        ("StaticCache", static_cache_length([longest], captured))
    }
    steps = [width for _, _, width in seen.calls if width == 1]
    prefills = len(seen.calls) - len(steps)
    assert prefills == 5 + 6 and len(steps) == prefills * (NEW - 1)  # lengths: 3, 1, 1, 1, 1
    assert all(len(c) == NEW * 6 for c in expected if decoder != "token")


def test_the_model_wants_to_stop_and_neither_loop_lets_it(loaded):
    """An output layer that favours the end-of-sequence id: min_new_tokens and the published
    suppression keep it out of generate's rollouts; the captured choice keeps it out too."""
    eos = loaded.tokenizer.eos_token_id
    head = loaded.model.lm_head.weight
    kept = head[eos].clone()
    prompts = _prompts((120, 120))
    ids = torch.as_tensor(np.stack([loaded.vocab.encode(prompts[0], ())]))
    dynamic = RecoverySettings(new_tokens=NEW, score_bp=NEW * 6)
    try:
        with torch.no_grad():
            head[eos] = loaded.model.model.norm(loaded.model.model(ids).last_hidden_state)[0, -1]
            head[eos] *= 1000
        with torch.inference_mode():
            assert loaded.model(ids).logits[0, -1].argmax() == eos  # unsuppressed: it would stop
        expected = generate_continuations(loaded, prompts, dynamic, 2)
        captured = replace(dynamic, decode_cache="captured")
        assert generate_continuations(loaded, prompts, captured, 2) == expected
    finally:
        with torch.no_grad():
            head[eos] = kept


class FreshTensors(TorchDispatchMode):
    """Tensors made from host data inside the traced code (`torch.tensor(...)`: `lift_fresh`),
    which a CUDA graph would copy from the host once, at capture, and then never again."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func._schema.name in ("aten::lift_fresh", "aten::lift_fresh_copy")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("decoder", ["token", "fns_conditional"])
def test_a_step_reads_nothing_back_and_makes_nothing_from_host_data(loaded, decoder):
    """What a CUDA graph can replay: the step (the model's forward on the static cache, the
    decoder's choice, the writes) makes the host wait for nothing and builds no tensor from
    host data; and what it keeps is device state, so the same call advances the rollout."""
    settings = RecoverySettings(decoder=decoder, new_tokens=8)
    ids = torch.as_tensor([loaded.vocab.encode(p, ()) for p in _prompts((120, 120))])
    decoder_ = CapturedDecoder(loaded.model, ids.shape[1] + 7, 8, step_choice(loaded, settings))
    stepper = decoder_._stepper(2, ids.device)
    with torch.inference_mode():
        stepper.start(loaded.model, ids, decoder_.choose)
        before = stepper.out.clone()
        with HostReads() as reads, FreshTensors() as fresh:
            stepper.step()
            stepper.step()
    assert reads.total == 0, reads.by_op
    assert fresh.count == 0
    assert int(stepper.position) == ids.shape[1] + 2 and int(stepper.column) == 3
    assert torch.equal(stepper.out[:, :1], before[:, :1]) and not torch.equal(stepper.out, before)


def _without_cuda(monkeypatch, capture_fails=False):
    """The CUDA capture on the CPU: warm runs in place of the side stream, and a stand-in graph
    whose replay runs the step (or a capture that fails)."""

    def warm(step, times):
        for _ in range(times):
            step()

    def capture(step):
        if capture_fails:
            raise RuntimeError("operation not permitted when stream is capturing")
        return types.SimpleNamespace(replay=step)

    monkeypatch.setattr(captured_decode, "warm_on_a_side_stream", warm)
    monkeypatch.setattr(captured_decode, "captured", capture)


def _stand_in_layers(model, steps=None):
    """`model`'s layers as the captured loops compile them (decode_layers), `steps` in place of
    torch.compile's two (default: the eager steps: the stepwise path without inductor)."""
    layers = captured_decode.decode_layers(model)
    layers.steps = steps or (llama_layer.attention_inputs, llama_layer.output_and_mlp)
    return layers


def _accelerated(monkeypatch, steps=None, capture_fails=False, compile_=False):
    """The CUDA path on the CPU (_without_cuda), the layers' compiled steps `steps`
    (_stand_in_layers), or with `compile_` torch.compile's, as on CUDA."""
    _without_cuda(monkeypatch, capture_fails)
    if not compile_:
        stand_in = lambda self: _stand_in_layers(self.model, steps)  # noqa: E731
        monkeypatch.setattr(CapturedDecoder, "_compiled", stand_in)


def _refusing(calls):
    """A compiled step that fails when called (a compile refused), counted in `calls`."""

    def refuses(*_args):
        calls.append(1)
        raise RuntimeError("inductor: lowering failed")

    return refuses


def _decode(loaded, prompts, settings, clock=None):
    ids = torch.as_tensor([loaded.vocab.encode(p, ()) for p in prompts])
    slots = static_cache_length([ids.shape[1]], settings)
    decoder = CapturedDecoder(
        loaded.model,
        slots,
        settings.new_tokens,
        step_choice(loaded, settings),
        accelerate=True,
        clock=clock,
    )
    with torch.inference_mode():
        first = decoder.generate(ids)
        again = decoder.generate(ids)  # the stepper and its graph reused
    return decoder, first, again


def _expected(loaded, prompts, settings):
    texts = generate_continuations(loaded, prompts, settings, len(prompts))
    return texts


def _texts(loaded, ids):
    return [loaded.tokenizer.decode(row) for row in ids.tolist()]


def test_the_captured_path_warms_captures_and_replays_with_the_same_answers(loaded, monkeypatch):
    """With a (fake) graph: the first batch runs two warm steps then replays, the second only
    replays; the clock gets the replayed steps only; the answers are generate's."""
    _accelerated(monkeypatch)
    settings = RecoverySettings(new_tokens=NEW, score_bp=NEW * 6)
    prompts = _prompts((300, 300))
    clock = StepClock()
    decoder, first, again = _decode(loaded, prompts, settings, clock)
    expected = _expected(loaded, prompts, settings)
    assert _texts(loaded, first) == expected and _texts(loaded, again) == expected
    assert decoder.how["step"] == "captured as a CUDA graph, replayed"
    assert decoder.how["forward"] == captured_decode.COMPILED
    record = clock.record()
    warm = captured_decode.WARM_STEPS
    assert record["steps_timed_together"] == 2 * (NEW - 1) - warm


@pytest.fixture(scope="module")
def four_layers(tmp_path_factory):
    """A 4-layer demo model made to depend on its context, as `loaded`."""
    path = build_demo_model(tmp_path_factory.mktemp("four"), num_layers=4, seed=3)
    return context_dependent(path)


def test_the_layers_compile_once_for_all_and_give_the_same_answers(four_layers, monkeypatch):
    """torch.compile as the CUDA path compiles (inductor's CPU code here), on 4 layers: it is
    given the two steps around attention only, never the model or a layer, and compiles one
    graph for each, whatever the depth (a whole-model compile is 1 graph unrolling every
    layer, which took minutes for Carbon-3B's 30 on an H200; a graph a layer would be 8); no
    graph break; the attention, eager, reads the cache's key and value heads as they are (no
    repeat_kv); the compile's seconds are noted, and the rollouts are generate's."""
    from torch._dynamo.utils import counters
    from transformers.integrations import sdpa_attention

    repeats, compiled = [], []
    repeat_kv = sdpa_attention.repeat_kv
    monkeypatch.setattr(
        sdpa_attention, "repeat_kv", lambda states, n: repeats.append(n) or repeat_kv(states, n)
    )
    compile_ = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda fn, **kw: compiled.append(fn) or compile_(fn, **kw)
    )
    _accelerated(monkeypatch, compile_=True)
    torch._dynamo.reset()  # no step compiled before, by another test of this process
    counters.clear()
    settings = RecoverySettings(decoder="fns_conditional", new_tokens=8, score_bp=48)
    prompts = _prompts((300, 300))
    decoder, first, again = _decode(four_layers, prompts, settings)
    expected = _expected(four_layers, prompts, settings)
    assert _texts(four_layers, first) == expected and _texts(four_layers, again) == expected
    assert compiled == [llama_layer.attention_inputs, llama_layer.output_and_mlp]
    assert four_layers.model.config.num_hidden_layers == 4
    assert counters["stats"]["unique_graphs"] == 2 and dict(counters["graph_break"]) == {}
    assert decoder.how["forward"] == captured_decode.COMPILED
    assert decoder.how["compile_s"] > 0
    assert (
        four_layers.model.config.num_key_value_heads < four_layers.model.config.num_attention_heads
    )
    assert repeats == []


def test_inside_a_capture_only_steps_compiled_before_run(loaded, monkeypatch):
    """The decode loops' layers in a CUDA graph's capture (faked: `_capturing`): a step that
    the warm steps compiled runs its compiled code and compiles nothing; a step that would
    compile (a batch of one after a batch of two: Dynamo specialises sizes of 1) raises
    instead, which fails the capture (a compile inside one would be recorded with it), and
    is not taken for a failed compile (compiling goes on after the capture)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    layers = captured_decode.decode_layers(loaded.model)
    layers.steps = (torch.compile(llama_layer.attention_inputs, dynamic=True), None)
    layer = layers.layers[0]

    def inputs(rows):
        hidden = torch.randn(rows, 1, loaded.model.config.hidden_size)
        cos, sin = loaded.model.model.rotary_emb(hidden, torch.zeros((rows, 1), dtype=torch.long))
        return hidden, cos, sin

    with torch.inference_mode():
        warm = inputs(2)
        layers.step(0, layer, *warm)  # the warm step: compiled
        graphs = counters["stats"]["unique_graphs"]
        monkeypatch.setattr(compiled_layers, "_capturing", lambda: True)
        ours = layers.step(0, layer, *warm)
        assert counters["stats"]["unique_graphs"] == graphs
        theirs = llama_layer.attention_inputs(layer, *warm)
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ours, theirs, strict=True))
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            layers.step(0, layer, *inputs(1))
    assert counters["stats"]["unique_graphs"] == graphs and layers.failed is None


def test_a_failed_capture_leaves_eager_steps_and_the_same_answers(loaded, monkeypatch):
    _accelerated(monkeypatch, capture_fails=True)
    settings = RecoverySettings(decoder="fns_marginal", new_tokens=NEW, score_bp=NEW * 6)
    prompts = _prompts((300, 300))
    decoder, first, again = _decode(loaded, prompts, settings)
    expected = _expected(loaded, prompts, settings)
    assert _texts(loaded, first) == expected and _texts(loaded, again) == expected
    assert decoder.how["step"].startswith("eager (capture failed: RuntimeError")
    assert not decoder.accelerate


def test_a_compile_failing_after_the_cache_is_written_runs_that_step_eagerly(loaded, monkeypatch):
    """The compiled step after attention refused, in the first warm step, after that step's
    attention wrote the cache (its counter moved): that step runs eagerly in place, the cache
    written once, and every step after it (a rerun of the layer, or a loop that went on from a
    cache written twice, would be a token off); the step is still captured, and the answers
    are generate's."""
    calls = []
    _accelerated(monkeypatch, steps=(llama_layer.attention_inputs, _refusing(calls)))
    settings = RecoverySettings(new_tokens=NEW, score_bp=NEW * 6)
    prompts = _prompts((300, 300))
    decoder, first, again = _decode(loaded, prompts, settings)
    expected = _expected(loaded, prompts, settings)
    assert calls == [1]
    assert _texts(loaded, first) == expected and _texts(loaded, again) == expected
    assert decoder.how["forward"].startswith("uncompiled (RuntimeError: inductor")
    assert decoder.how["step"] == "captured as a CUDA graph, replayed"


def test_the_log_line():
    """What the job logs (the flag itself: test_static_cache's flag test)."""
    captured = RecoverySettings(decode_cache="captured")
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert "eager steps on cpu" in decode_cache_note(captured, cpu, drafted=False)
    assert "captured as a CUDA graph" in decode_cache_note(captured, cuda, drafted=False)
    assert "both models on static caches" in decode_cache_note(captured, cuda, drafted=True)


# ---- with a draft: model.captured_drafting ------------------------------------------------
DRAFTED = 16  # tokens: four iterations or more a prompt at K = 3


@pytest.fixture(scope="module")
def random_draft(tmp_path_factory):
    """A 1-layer draft of its own random weights: most proposals rejected."""
    path = build_demo_model(tmp_path_factory.mktemp("draft"), num_layers=1, seed=7)
    return load_model(ModelSettings(str(path), trust_remote_code=True))


@pytest.mark.parametrize("decoder", ["token", "fns_conditional"])
@pytest.mark.parametrize("draft_kind", ["random", "itself"])
def test_captured_speculation_gives_the_targets_greedy_rollouts(
    loaded, random_draft, decoder, draft_kind, monkeypatch
):
    """Speculative rollouts, K = 3, one prompt at a time, equal the target's plain greedy ones
    (generate, dynamic cache): with a random draft (most proposals rejected: n = 0) and with
    the target as its own draft (every proposal kept: n = K, the draft's extra step). The
    draft's record counts what the loop kept; generate is never called."""
    draft = Draft(random_draft if draft_kind == "random" else loaded, tokens=3)
    prompts = _prompts((240, 120, 240))
    leads = [(), (), (loaded.tokenizer.eos_token_id,)]
    plain = RecoverySettings(decoder=decoder, new_tokens=DRAFTED, score_bp=DRAFTED * 6)
    expected = generate_continuations(loaded, prompts, plain, 3, leads=leads)
    captured = replace(plain, decode_cache="captured")
    clock = StepClock()
    with Passes(loaded.model, monkeypatch) as seen:
        drafted = generate_continuations(
            loaded, prompts, captured, 3, draft=draft, leads=leads, clock=clock
        )
    assert drafted == expected
    widths = [width for _, _, width in seen.calls]  # the target's (and itself as the draft's)
    verifications = widths.count(4)  # the last token and K proposals
    drafts = 2 if draft_kind == "itself" else 1
    assert len([w for w in widths if w > 4]) == 3 * drafts  # a prefill a prompt (and model)
    assert widths.count(1) == (4 * verifications if draft_kind == "itself" else 0)  # K + 1
    record = draft.record()
    assert record["target_calls"] == 3 + verifications and record["new_tokens"] == 3 * DRAFTED
    assert record["draft_calls"] == 3 * verifications  # proposals
    if draft_kind == "itself":
        assert record["acceptance_rate"] == 1.0
        assert verifications == 3 * math.ceil((DRAFTED - 1) / 4)
    else:
        assert record["acceptance_rate"] < 0.5
    steps = clock.record()
    assert steps["steps_timed_together"] == 3 * (DRAFTED - 1)  # a token a step
    assert clock.how == {"step": "eager on cpu (no CUDA graph)"}


def test_a_speculative_iteration_reads_nothing_back(loaded, random_draft):
    """An iteration (K + 1 draft steps, the verification, the acceptance, both caches moved
    back) makes the host wait for nothing and builds no tensor from host data."""
    settings = RecoverySettings(new_tokens=12)
    ids = torch.as_tensor(np.stack([loaded.vocab.encode(_prompts((120,))[0], ())]))
    loop = CapturedSpeculation(
        loaded.model, random_draft.model, ids.shape[1] + 11, 12, 3, step_choice(loaded, settings)
    )
    with torch.inference_mode():
        loop.start(ids)
        with HostReads() as reads, FreshTensors() as fresh:
            loop.iterate()
            loop.iterate()
    assert reads.total == 0, reads.by_op
    assert fresh.count == 0
    kept = int(loop.column) - 1
    assert 2 <= kept <= 8 and int(loop.position) == ids.shape[1] + kept
    for cache in loop.caches:  # both caches write next where the rollout stands
        assert {int(layer.cumulative_length) for layer in cache.layers} == {ids.shape[1] + kept}


def _speculating_on_cuda(monkeypatch, capture_fails=False, target_steps=None):
    """CapturedSpeculation's CUDA path on the CPU (_without_cuda), both models' layers with
    stand-in compiled steps (_stand_in_layers; the target's `target_steps`)."""
    _without_cuda(monkeypatch, capture_fails)

    def compiled(loop):
        return _stand_in_layers(loop.target, target_steps), _stand_in_layers(loop.draft)

    monkeypatch.setattr(CapturedSpeculation, "_compiled", compiled)


@pytest.mark.parametrize("case", ["captured", "capture fails", "compile fails"])
def test_the_speculative_cuda_path_and_its_fallbacks(loaded, random_draft, monkeypatch, case):
    """Warm iterations then replays; a failed capture (eager iterations); the target's
    compiled step after attention refused, after its attention wrote the cache (that step, and
    every later one, eager in place). The same rollouts each time."""
    refused = (llama_layer.attention_inputs, _refusing([]))
    _speculating_on_cuda(
        monkeypatch,
        capture_fails=case == "capture fails",
        target_steps=refused if case == "compile fails" else None,
    )
    settings = RecoverySettings(new_tokens=DRAFTED, score_bp=DRAFTED * 6)
    prompts = _prompts((240, 120))
    expected = generate_continuations(loaded, prompts, settings, 1)
    ids = [torch.as_tensor(np.stack([loaded.vocab.encode(p, ())])) for p in prompts]
    slots = static_cache_length([i.shape[1] for i in ids], settings)
    choose = step_choice(loaded, settings)
    loop = CapturedSpeculation(
        loaded.model, random_draft.model, slots, DRAFTED, 3, choose, accelerate=True
    )
    with torch.inference_mode():
        got = [_texts(loaded, loop.generate(one))[0] for one in ids]
    assert got == expected
    if case == "captured":
        assert loop.how["step"] == "an iteration captured as a CUDA graph, replayed"
        assert loop.how["forward"] == captured_decode.COMPILED
    elif case == "capture fails":
        assert loop.how["step"].startswith("eager (capture failed")
    else:
        assert loop.how["forward"].startswith("uncompiled (RuntimeError: inductor")
