"""Sequence recovery's rollouts on our engine (the recipe and its scoring: suite.recovery).

Greedy generation of equal-length prompts, batched together so no padding is ever involved.
Three greedy decoders:

- `token` (published): argmax over the whole vocabulary with special tokens suppressed (the
  tokenizer's special ids, its `special_tokens` list as Carbon's tokenizer has, and its DNA tags
  `<dna>`/`</dna>`/`<oov>`); the new ids are turned into text by `tokenizer.decode`, as the
  published script does (a text token, should one win, decodes to its text).
- `fns_marginal` (the Carbon report's base-pair-level generation, eqs. S15-S16): softmax over
  the 4**k k-mer logits, the k per-position base marginals m_j(b), each base the argmax of its
  own marginal independently; the k-mer spelled by the k chosen bases is appended.
- `fns_conditional`: from the same 4**k distribution, base j is the argmax of the exact
  within-token conditional P(b_j | context, chosen b_0..b_{j-1}), left to right; it always
  yields a k-mer whose bases are consistent with one another under the model.

The loop is `decode_cache` (docs/generation.md): transformers' `generate` on its dynamic
cache, or on its static cache sized once for the whole call (the longest prompt + new tokens −
1, what transformers sizes it to for that prompt: every batch reuses one cache shape, and on
CUDA transformers compiles the decode step), or `captured`: our own loop on that static cache
(model.captured_decode), the decoder's choice inside a step that never waits for the host, on
CUDA compiled and replayed as a CUDA graph.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import polars as pl
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from carbon_vep.config.stages import RecoverySettings
from carbon_vep.model.batching import in_batches, scatter
from carbon_vep.model.captured_decode import CapturedDecoder, Choose
from carbon_vep.model.captured_drafting import CapturedSpeculation
from carbon_vep.model.drafting import Draft
from carbon_vep.model.loading import LoadedModel
from carbon_vep.model.tokens import suppressed_token_ids
from carbon_vep.progress import Progress
from carbon_vep.suite.recovery import recover_with
from carbon_vep.suite.tasks import Part


# ---- FNS greedy decoders as logits processors ------------------------------------------
def fns_marginal_choice(kmer_log_probs: torch.Tensor, k: int) -> torch.Tensor:
    """k-mer index whose base j is argmax_b m_j(b), each position on its own: [N, 4**k] -> [N]."""
    grid = kmer_log_probs.reshape(-1, *([4] * k))
    index = torch.zeros(grid.shape[0], dtype=torch.long, device=grid.device)
    axes = list(range(1, k + 1))
    for j in range(k):
        marginal = torch.logsumexp(grid, dim=[a for a in axes if a != j + 1])  # [N, 4]
        index = index * 4 + marginal.argmax(dim=-1)
    return index


def fns_conditional_choice(kmer_log_probs: torch.Tensor, k: int) -> torch.Tensor:
    """k-mer index chosen base by base: argmax of P(b_j | b_0..b_{j-1}) under the k-mer
    distribution (left-to-right greedy walk through the [4]*k grid): [N, 4**k] -> [N]."""
    n = kmer_log_probs.shape[0]
    rows = torch.arange(n, device=kmer_log_probs.device)
    current = kmer_log_probs.reshape(n, 4, -1)
    index = torch.zeros(n, dtype=torch.long, device=kmer_log_probs.device)
    for j in range(k):
        base = torch.logsumexp(current, dim=-1).argmax(dim=-1)  # conditional argmax = joint's
        index = index * 4 + base
        if j + 1 < k:
            current = current[rows, base].reshape(n, 4, -1)
    return index


class FnsGreedy(LogitsProcessor):
    """Replaces the scores by a one-hot on the k-mer the FNS decoder picks (greedy then takes
    it). The 4**k logits are normalised over the k-mer block, as FNS is defined."""

    def __init__(self, kmer_ids: np.ndarray, k: int, conditional: bool, device=None) -> None:
        self.kmer_ids = torch.as_tensor(kmer_ids, dtype=torch.long, device=device)
        self.k = k
        self.choose = fns_conditional_choice if conditional else fns_marginal_choice

    def pick(self, scores: torch.Tensor) -> torch.Tensor:
        """The chosen k-mer's id of each row of `scores` [rows, vocab]: [rows]."""
        kmer_ids = self.kmer_ids.to(scores.device)  # a no-op where built on that device
        block = torch.log_softmax(scores[:, kmer_ids].float(), dim=-1)
        return kmer_ids[self.choose(block, self.k)]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        chosen = self.pick(scores)
        out = torch.full_like(scores, -torch.inf)
        out[torch.arange(scores.shape[0], device=scores.device), chosen] = 0.0
        return out


# ---- generation ------------------------------------------------------------------------
class StepClock(LogitsProcessor):
    """Host times of the decode steps. A plain greedy `generate` calls its processors once a
    step, after the step's forward (the first call after the prompt's prefill), and this one
    only notes the time and the batch's rows, scores untouched. Each step also waits for the
    device (transformers' StopCheck reads the stop flag every step, generation/utils.py), so
    the gaps are the steps' times. The first gaps hold the one-off costs (on CUDA with the
    static cache, the compile and the CUDA-graph capture); the median does not. The captured
    loop (model.captured_decode) waits only at a batch's end: it gives its replayed steps as
    one `span` (the warm-up and capture left out), each step at the span's mean."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[float]]] = []  # (rows, times) a generate call
        self.spans: list[tuple[int, int, float]] = []  # (rows, steps, seconds) timed together
        self.how: dict[str, Any] = {}  # what the captured loop ran (CapturedDecoder.how)

    def start(self) -> None:
        self.calls.append((0, []))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows, times = self.calls[-1]
        times.append(time.perf_counter())
        self.calls[-1] = (scores.shape[0], times)
        return scores

    def span(self, rows: int, steps: int, seconds: float) -> None:
        self.spans.append((rows, steps, seconds))

    def record(self) -> dict | None:
        """generate calls (or captured batches), steps timed, the median and slowest step
        (ms), and the steady rate: each call's steps at its median step time (output
        tokens/s). None without two steps."""
        timed = [(rows, np.diff(times)) for rows, times in self.calls if len(times) > 1]
        timed += [(rows, np.full(steps, seconds / steps)) for rows, steps, seconds in self.spans]
        if not timed:
            return None
        gaps = np.concatenate([g for _, g in timed])
        tokens = sum(rows * len(g) for rows, g in timed)
        seconds = sum(len(g) * statistics.median(g) for _, g in timed)
        return {
            "generate_calls": len(timed),
            "steps_timed": int(gaps.size),
            "steps_timed_together": sum(steps for _, steps, _ in self.spans),
            "median_step_ms": round(1000 * float(np.median(gaps)), 3),
            "slowest_step_ms": round(1000 * float(gaps.max()), 3),
            "steady_tokens_per_s": tokens / seconds if seconds > 0 else None,
            **({"captured": self.how} if self.how else {}),
        }


def static_cache_length(prompt_tokens: Iterable[int], settings: RecoverySettings) -> int:
    """Slots of the static cache for prompts of these token lengths: the longest prompt + new
    tokens − 1 (the last new token is never fed back), as transformers sizes it for that prompt
    (`generate`: max_cache_length = max_length − 1)."""
    return max(prompt_tokens) + settings.new_tokens - 1


def _generation_config(
    loaded: LoadedModel, settings: RecoverySettings, cache_length: int | None = None
) -> GenerationConfig:
    """Greedy, exactly `new_tokens`, the published suppression (decoder token); with
    `cache_length`, transformers' static cache of that many slots (`cache_implementation`
    static, `max_cache_len`): transformers compiles the decode step on CUDA by itself
    (generation/utils.py, `_valid_auto_compile_criteria`) and runs it eagerly on a CPU."""
    suppress = suppressed_token_ids(loaded.tokenizer) if settings.decoder == "token" else None
    static = {"cache_implementation": "static", "max_cache_len": cache_length}
    return GenerationConfig(
        max_new_tokens=settings.new_tokens,
        min_new_tokens=settings.new_tokens,
        do_sample=False,
        num_beams=1,
        suppress_tokens=suppress,
        pad_token_id=loaded.vocab.pad_id,
        **(static if cache_length is not None else {}),
    )


def _processors(loaded: LoadedModel, settings: RecoverySettings) -> LogitsProcessorList:
    if settings.decoder == "token":
        return LogitsProcessorList()
    return LogitsProcessorList([_fns_decoder(loaded, settings)])


def _fns_decoder(loaded: LoadedModel, settings: RecoverySettings) -> FnsGreedy:
    conditional = settings.decoder == "fns_conditional"
    return FnsGreedy(loaded.vocab.kmer_ids, loaded.vocab.k, conditional, loaded.device)


def step_choice(loaded: LoadedModel, settings: RecoverySettings) -> Choose:
    """The decoder's pick from a step's float32 scores, what `generate`'s processors and its
    greedy argmax pick (the captured loop's choice, run inside its step): an FNS decoder's
    k-mer; for `token`, the argmax with the suppressed ids and the end-of-sequence ids (which
    min_new_tokens = new_tokens keeps out, as transformers' MinNewTokensLength does) at −inf.
    Its tensors are on the model's device, so a captured step copies nothing from the host."""
    if settings.decoder != "token":
        return _fns_decoder(loaded, settings).pick
    eos = loaded.model.generation_config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    vocabulary = loaded.model.get_output_embeddings().weight.shape[0]
    forbidden = torch.zeros(vocabulary, dtype=torch.bool, device=loaded.device)
    forbidden[[*suppressed_token_ids(loaded.tokenizer), *eos]] = True

    def choose(scores: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(forbidden, -torch.inf).argmax(dim=-1)

    return choose


def decode_cache_note(settings: RecoverySettings, device: torch.device, drafted: bool) -> str:
    """What the job's rollouts decode with (its log line; the captured loop's outcome, compiled
    and captured or not, is logged after the rollouts: CapturedDecoder.how)."""
    if settings.decode_cache == "dynamic":
        return "decode cache: dynamic (transformers' DynamicCache, eager decode steps)"
    if settings.decode_cache == "captured":
        how = (
            "the layers' steps compiled (torch.compile) and the step captured as a CUDA graph"
            if device.type == "cuda"
            else f"eager steps on {device.type} (CUDA graphs need CUDA)"
        )
        note = f"decode cache: captured (our loop on transformers' StaticCache), {how}"
        if drafted:
            note += (
                "; with the draft, both models on static caches, an iteration (the draft's "
                "proposals, the target's verification) one step (model.captured_drafting)"
            )
        return note
    how = (
        "the decode step compiled by transformers (torch.compile, reduce-overhead: CUDA graphs)"
        if device.type == "cuda"
        else f"uncompiled on {device.type} (transformers compiles only on accelerators)"
    )
    note = f"decode cache: static (transformers' StaticCache), {how}"
    if drafted:
        note += (
            "; with the draft, the target verifies on the static cache and the draft proposes "
            "on its own dynamic cache, uncompiled (transformers' assisted generation)"
        )
    return note


@torch.inference_mode()
def generate_continuations(
    loaded: LoadedModel,
    prompts: list[str],
    settings: RecoverySettings,
    batch_size: int,
    batch_tokens: int = 0,
    draft: Draft | None = None,
    leads: list[tuple[int, ...]] | None = None,
    clock: StepClock | None = None,
) -> list[str | None]:
    """Greedy continuation text of each prompt (bases only, prefix added here, after the
    prompt's `leads` ids: its species tag, if any); None where a
    prompt ran out of memory even alone. A batch holds `batch_size` prompts, or as many as fit
    in `batch_tokens` (prompt and generated tokens) when that is set. With a `draft`, decoding
    is speculative (model.drafting), one prompt at a time as transformers requires, and the
    draft's counters grow by what this call generated. With `decode_cache` static the cache is
    sized once for the call (`static_cache_length`), and a batch is planned at that many tokens
    a prompt, the cache it holds (the draft keeps its own dynamic cache); with `captured` the
    same, decoded by our loop (model.captured_decode; with a draft model.captured_drafting,
    both models on static caches). A `clock` times the decode steps (not with transformers'
    draft: assisted generation calls the processors per proposal) and keeps what the captured
    loop ran (`how`)."""
    leads = leads or [()] * len(prompts)  # a lead changes the length: still grouped, no padding
    encoded = [loaded.vocab.encode(p, lead) for p, lead in zip(prompts, leads, strict=True)]
    static = settings.decode_cache in ("static", "captured") and bool(encoded)
    cache_length = static_cache_length(map(len, encoded), settings) if static else None
    config = _generation_config(loaded, settings, cache_length)
    captured = None
    if static and settings.decode_cache == "captured":
        captured = _captured_loop(loaded, settings, cache_length, draft, clock)
    assisted_by = None if captured else draft  # transformers' assisted generation
    processors = _processors(loaded, settings)
    clock = None if assisted_by else clock
    if clock and not captured:
        processors.append(clock)
    assisted = assisted_by.generate_kwargs() if assisted_by else {}
    if draft:
        batch_size, batch_tokens = 1, 0
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(i)
    out: list[str | None] = [None] * len(prompts)

    def work(batch: list[int]) -> list[str]:
        ids = torch.as_tensor(np.stack([encoded[i] for i in batch]), device=loaded.device)
        if captured:
            new_ids = captured.generate(ids).cpu().tolist()  # one copy per batch
        else:
            if clock:
                clock.start()
            generated = loaded.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                generation_config=config,
                logits_processor=processors,
                **assisted,
            )
            new_ids = generated[:, ids.shape[1] :].cpu().tolist()  # one copy per batch
        if draft:
            draft.new_tokens += sum(map(len, new_ids))
        return [loaded.tokenizer.decode(row) for row in new_ids]

    progress = Progress(len(prompts), "prompts", "sequence recovery")
    hooks = assisted_by.counting(loaded.model) if assisted_by else []
    try:
        for length, members in sorted(by_length.items()):  # equal lengths: no padding in a batch
            tokens = [cache_length or length + settings.new_tokens] * len(members)
            batches = in_batches(
                members,
                work,
                batch_size,
                loaded.device,
                progress,
                tokens=tokens,
                batch_tokens=batch_tokens,
            )
            scatter(batches, members, out)
    finally:
        for hook in hooks:
            hook.remove()
        if captured and clock:
            clock.how = dict(captured.how)
        if isinstance(captured, CapturedSpeculation):
            _count_speculation(draft, captured)
    progress.close()
    return out


def _captured_loop(
    loaded: LoadedModel,
    settings: RecoverySettings,
    cache_length: int,
    draft: Draft | None,
    clock: StepClock | None,
) -> CapturedDecoder | CapturedSpeculation:
    """Our loop on static caches: plain, or speculative with `draft` (one prompt a call)."""
    choose = step_choice(loaded, settings)
    if draft is None:
        return CapturedDecoder(loaded.model, cache_length, settings.new_tokens, choose, clock=clock)
    return CapturedSpeculation(
        loaded.model,
        draft.loaded.model,
        cache_length,
        settings.new_tokens,
        draft.tokens,
        choose,
        draft_choose=step_choice(draft.loaded, settings),
        clock=clock,
    )


def _count_speculation(draft: Draft, loop: CapturedSpeculation) -> None:
    """The draft's counters from the captured loop (whose replays no forward hook sees): a
    target call a prompt and an iteration, a draft call a proposal, the proposals kept."""
    draft.calls["target"] += loop.prompts + loop.iterations
    draft.calls["draft"] += loop.proposed
    draft.accepted = (draft.accepted or 0) + loop.accepted


# ---- the task ----------------------------------------------------------------------------
def recover(
    table: pl.DataFrame,
    loaded: LoadedModel,
    settings: RecoverySettings,
    batch_size: int,
    batch_tokens: int = 0,
    draft: Draft | None = None,
    clock: StepClock | None = None,
    part: Part | None = None,
) -> pl.DataFrame:
    """One output row per input row (of a `part`'s share of them): prompt size, prediction,
    matches, accuracy, status. A `clock` times the decode steps (StepClock).

    Rows without a sequence (or, with dataset labels, a label) are kept with status `invalid`
    and no accuracy. Bases
    other than ACGT in a prompt go to the tokenizer as `<oov>`, as in the published script,
    and are counted in `prompt_non_acgt`.
    """

    def generate(prompts: list[str], leads: list[tuple[int, ...]]) -> list[str | None]:
        return generate_continuations(
            loaded, prompts, settings, batch_size, batch_tokens, draft, leads, clock
        )

    positions = getattr(loaded.model.config, "max_position_embeddings", None)
    k = loaded.vocab.k
    return recover_with(table, k, settings, generate, loaded.tokenizer, part, positions)
