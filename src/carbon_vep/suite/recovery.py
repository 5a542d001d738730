"""Sequence recovery, GENERator's generative task (docs/suite-conventions.md#recipes).

Published recipe: prompt = DNA prefix + the rightmost ⌊min(len, 6144)/6⌋·6 bases of `sequence`;
greedy-generate 5 tokens (30 bp) with the tokenizer's special tokens suppressed; per row,
accuracy = bases equal to `label` among the first 30 / 30 (a short prediction counts its
missing bases as wrong); headline = mean over rows, plus per-`type` means.

The published evaluation script (huggingface/carbon `evaluation/sequence_recovery_eval.py`,
docs/suite-conventions.md#recipes) adds, and we follow it: `accuracy_mode` fixed_bp (the above)
or prediction_length (matches / min(len label, len prediction), 0 when that is 0); `label_source`
dataset, sequence_tail (the last rollout bp of `sequence` are the label, the rest the prompt,
cut before the prompt is truncated) or auto (the tail for the whole table when the rollout is
longer than its shortest label); `species_tags` (the `type`'s tag before the DNA prefix).

Generation runs through transformers `generate` (greedy, the model's KV cache); prompts of equal
token length are batched together, so no padding is ever involved. The KV cache is `decode_cache`:
transformers' dynamic one, or its static one sized once for the whole call (the longest prompt
+ new tokens − 1, what transformers sizes it to for that prompt), so every batch reuses one cache
shape and on CUDA transformers' compiled decode step is captured once per batch size
(docs/generation.md#static-kv-cache). Three greedy decoders:

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
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

import numpy as np
import polars as pl
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from carbon_vep.columns import Status
from carbon_vep.config.stages import EvaluationSettings, RecoverySettings
from carbon_vep.config.tasks import SEQUENCE_RECOVERY
from carbon_vep.errors import InputError, TokenizerMismatchError
from carbon_vep.evaluate.metrics import add_mean_interval, task_metrics
from carbon_vep.model.batching import FAILED_ALONE, in_batches, scatter
from carbon_vep.model.drafting import Draft
from carbon_vep.model.loading import LoadedModel
from carbon_vep.model.tokens import non_acgt_count, suppressed_token_ids
from carbon_vep.progress import Progress

CHANCE_ACCURACY = 0.25
# the published map from the dataset's `type` to the tag put before the DNA prefix
# (huggingface/carbon evaluation/sequence_recovery_eval.py, SPECIES_TAG_MAP); another type
# gets no tag there, and none here
SPECIES_TAGS = {
    "vertebrate_mammalian": "<mammalian_species>",
    "vertebrate_other": "<vertebrate_non_mammalian_species>",
    "fungi": "<fungi_species>",
    "plant": "<plant_species>",
    "protozoa": "<protozoan_species>",
    "invertebrate": "<invertebrate_species>",
}


def prompt_bases(sequence: str, max_bp: int, k: int) -> str:
    """The rightmost ⌊min(len, max_bp)/k⌋·k bases of `sequence` (the prompt without prefix)."""
    keep = (min(len(sequence), max_bp) // k) * k
    return sequence[len(sequence) - keep :]


def base_matches(prediction: str, label: str, score_bp: int) -> int:
    """Positions among the first `score_bp` where prediction and label have the same base."""
    return sum(a == b for a, b in zip(prediction[:score_bp], label[:score_bp], strict=False))


def rollout_bp(settings: RecoverySettings, k: int) -> int:
    """The scored window asked for: `score_bp` under fixed_bp, `new_tokens`·k under
    prediction_length. It is the length of a sequence_tail label and auto's yardstick."""
    return settings.score_bp if settings.accuracy_mode == "fixed_bp" else settings.new_tokens * k


def table_label_source(settings: RecoverySettings, k: int, label_lengths: list[int]) -> str:
    """`dataset` or `sequence_tail`, for the whole table. auto takes the tail when the rollout is
    longer than the shortest label (and when no row has a label at all)."""
    if settings.label_source != "auto":
        return settings.label_source
    longer = not label_lengths or rollout_bp(settings, k) > min(label_lengths)
    return "sequence_tail" if longer else "dataset"


def row_accuracy(prediction: str, label: str, settings: RecoverySettings) -> tuple[int, int, float]:
    """(matches, scored_bp, accuracy) of one row under `settings.accuracy_mode`."""
    if settings.accuracy_mode == "fixed_bp":
        scored = settings.score_bp
    else:
        scored = min(len(label), len(prediction))
    matches = base_matches(prediction, label, scored)
    return matches, scored, matches / scored if scored > 0 else 0.0


def species_tag_ids(tokenizer: Any, types: Iterable[str | None]) -> dict[str, int]:
    """The token id of the species tag of each of `types` that has one (SPECIES_TAGS). A tag the
    tokenizer does not encode as one token of its vocabulary is refused, naming it."""
    vocabulary = tokenizer.get_vocab()
    ids: dict[str, int] = {}
    for tag in sorted({SPECIES_TAGS[t] for t in types if t in SPECIES_TAGS}):
        encoded = list(tokenizer(tag, add_special_tokens=False)["input_ids"])
        if len(encoded) != 1 or vocabulary.get(tag) != encoded[0]:
            raise TokenizerMismatchError(
                f"species tag {tag} is not one token of the model's vocabulary (the tokenizer "
                f"encodes it as {len(encoded)} ids): species_tags needs a model trained with "
                "the species tags; set species_tags off for this model"
            )
        ids[tag] = int(encoded[0])
    return ids


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

    def __init__(self, kmer_ids: np.ndarray, k: int, conditional: bool) -> None:
        self.kmer_ids = torch.as_tensor(kmer_ids, dtype=torch.long)
        self.k = k
        self.choose = fns_conditional_choice if conditional else fns_marginal_choice

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        kmer_ids = self.kmer_ids.to(scores.device)
        block = torch.log_softmax(scores[:, kmer_ids].float(), dim=-1)
        chosen = kmer_ids[self.choose(block, self.k)]
        out = torch.full_like(scores, -torch.inf)
        out[torch.arange(scores.shape[0], device=scores.device), chosen] = 0.0
        return out


# ---- generation ------------------------------------------------------------------------
class StepClock(LogitsProcessor):
    """Host times of the decode steps: a plain greedy `generate` calls its processors once a
    step, after the step's forward (the first call after the prompt's prefill), and this one
    only notes the time and the batch's rows, scores untouched. Each step also waits for the
    device (transformers' StopCheck reads the stop flag every step, generation/utils.py), so
    the gaps are the steps' times. The first gaps hold the one-off costs (on CUDA with the
    static cache, the compile and the CUDA-graph capture); the median does not."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[float]]] = []  # (rows, times) a generate call

    def start(self) -> None:
        self.calls.append((0, []))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        rows, times = self.calls[-1]
        times.append(time.perf_counter())
        self.calls[-1] = (scores.shape[0], times)
        return scores

    def record(self) -> dict | None:
        """generate calls, steps timed, the median and slowest step (ms), and the steady rate:
        each call's steps at its median step time (output tokens/s). None without two steps."""
        timed = [(rows, np.diff(times)) for rows, times in self.calls if len(times) > 1]
        if not timed:
            return None
        gaps = np.concatenate([g for _, g in timed])
        tokens = sum(rows * len(g) for rows, g in timed)
        seconds = sum(len(g) * statistics.median(g) for _, g in timed)
        return {
            "generate_calls": len(timed),
            "steps_timed": int(gaps.size),
            "median_step_ms": round(1000 * float(np.median(gaps)), 3),
            "slowest_step_ms": round(1000 * float(gaps.max()), 3),
            "steady_tokens_per_s": tokens / seconds if seconds > 0 else None,
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
    conditional = settings.decoder == "fns_conditional"
    return LogitsProcessorList([FnsGreedy(loaded.vocab.kmer_ids, loaded.vocab.k, conditional)])


def decode_cache_note(settings: RecoverySettings, device: torch.device, drafted: bool) -> str:
    """What the job's rollouts decode with (its log line)."""
    if settings.decode_cache == "dynamic":
        return "decode cache: dynamic (transformers' DynamicCache, eager decode steps)"
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
    a prompt, the cache it holds (the draft keeps its own dynamic cache). A `clock` times the
    decode steps (not with a draft: assisted generation calls the processors per proposal)."""
    leads = leads or [()] * len(prompts)  # a lead changes the length: still grouped, no padding
    encoded = [loaded.vocab.encode(p, lead) for p, lead in zip(prompts, leads, strict=True)]
    static = settings.decode_cache == "static" and bool(encoded)
    cache_length = static_cache_length(map(len, encoded), settings) if static else None
    config = _generation_config(loaded, settings, cache_length)
    processors = _processors(loaded, settings)
    clock = None if draft else clock
    if clock:
        processors.append(clock)
    assisted = draft.generate_kwargs() if draft else {}
    if draft:
        batch_size, batch_tokens = 1, 0
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(i)
    out: list[str | None] = [None] * len(prompts)

    def work(batch: list[int]) -> list[str]:
        ids = torch.as_tensor(np.stack([encoded[i] for i in batch]), device=loaded.device)
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
    hooks = draft.counting(loaded.model) if draft else []
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
    progress.close()
    return out


# ---- the task ----------------------------------------------------------------------------
def recover(
    table: pl.DataFrame,
    loaded: LoadedModel,
    settings: RecoverySettings,
    batch_size: int,
    batch_tokens: int = 0,
    draft: Draft | None = None,
    clock: StepClock | None = None,
) -> pl.DataFrame:
    """One output row per input row: prompt size, prediction, matches, accuracy, status.
    A `clock` times the decode steps (StepClock).

    Rows without a sequence (or, with dataset labels, a label) are kept with status `invalid`
    and no accuracy. Bases
    other than ACGT in a prompt go to the tokenizer as `<oov>`, as in the published script,
    and are counted in `prompt_non_acgt`.
    """

    def generate(prompts: list[str], leads: list[tuple[int, ...]]) -> list[str | None]:
        return generate_continuations(
            loaded, prompts, settings, batch_size, batch_tokens, draft, leads, clock
        )

    return recover_with(table, loaded.vocab.k, settings, generate, loaded.tokenizer)


def recover_with(
    table: pl.DataFrame,
    k: int,
    settings: RecoverySettings,
    generate: Callable[[list[str], list[tuple[int, ...]]], list[str | None]],
    tokenizer: Any = None,
) -> pl.DataFrame:
    """`recover` with the continuations from `generate` (prompts and each prompt's leading ids
    -> texts, None where a prompt failed): our engine's, or vLLM's (suite.recovery_vllm).
    `tokenizer` resolves the species tags (needed with `species_tags`).

    The label source is decided for the whole table (`table_label_source`); with
    sequence_tail, a sequence not longer than the tail stops the run naming its row, as the
    published script stops (it has no per-row status for it)."""
    if "type" not in table.columns:
        if settings.species_tags and table.height:
            where = str(table["source"][0]).rsplit(":", 1)[0]
            raise InputError(where, "species_tags needs a `type` column; found none")
        table = table.with_columns(pl.lit(None, pl.Utf8).alias("type"))
    rows = table.select(
        "row_id",
        "source",
        pl.col("sequence").cast(pl.Utf8).str.to_uppercase(),
        pl.col("label").cast(pl.Utf8).str.to_uppercase(),
        pl.col("type").cast(pl.Utf8),
    ).to_dicts()
    label_lengths = [len(r["label"]) for r in rows if r["label"] is not None]
    source = table_label_source(settings, k, label_lengths)
    tail = rollout_bp(settings, k) if source == "sequence_tail" else 0
    short = [r for r in rows if r["sequence"] and len(r["sequence"]) <= tail]
    if short:
        raise InputError(
            short[0]["source"],
            f"sequence of {len(short[0]['sequence'])} bp is not longer than the {tail} bp "
            f"sequence_tail label (label_source {settings.label_source}; {len(short)} such "
            "row(s)): drop them, or use label_source dataset",
        )
    held_out: dict[int, tuple[str, str]] = {}  # row -> (what the prompt is cut from, label)
    for r in rows:
        if r["sequence"] and tail:  # the tail is cut first, then the prompt truncated
            held_out[r["row_id"]] = (r["sequence"][:-tail], r["sequence"][-tail:])
        elif r["sequence"] and r["label"]:
            held_out[r["row_id"]] = (r["sequence"], r["label"])
    prompt_of = {i: prompt_bases(s, settings.max_prompt_bp, k) for i, (s, _) in held_out.items()}
    if settings.species_tags and tokenizer is None:
        raise ValueError("recover_with: species_tags needs the model's tokenizer")
    tag_id = species_tag_ids(tokenizer, [r["type"] for r in rows]) if settings.species_tags else {}
    tags = {r["row_id"]: SPECIES_TAGS.get(r["type"] or "") for r in rows}
    leads = [(tag_id[tags[i]],) if tags[i] in tag_id else () for i in prompt_of]
    generated = generate(list(prompt_of.values()), leads)
    predictions = dict(zip(prompt_of, generated, strict=True))
    missing = "missing sequence" if tail else "missing sequence or label"
    out = []
    for r in rows:
        record = {**r, "status": Status.INVALID.value, "reason": missing, "label_source": source}
        record.update(dict.fromkeys(("prompt_bp", "prompt_non_acgt", "n_match", "scored_bp")))
        record.update(accuracy=None, prediction=None)
        if r["row_id"] in held_out:
            record["label"] = held_out[r["row_id"]][1]
        if r["row_id"] in predictions and predictions[r["row_id"]] is None:
            record.update(status=Status.FAILED.value, reason=FAILED_ALONE)
        elif r["row_id"] in predictions:
            pred, prompt = predictions[r["row_id"]], prompt_of[r["row_id"]]
            matches, scored_bp, accuracy = row_accuracy(pred, record["label"], settings)
            record.update(
                status=Status.SCORED.value,
                reason="",
                prompt_bp=len(prompt),
                prompt_non_acgt=non_acgt_count(prompt),
                prediction=pred,
                n_match=matches,
                scored_bp=scored_bp,
                accuracy=accuracy,
            )
        out.append(record)
    shown = settings.score_bp if settings.accuracy_mode == "fixed_bp" else None  # label shown
    return (
        pl.DataFrame(out, infer_schema_length=None)
        .drop("sequence")
        .with_columns(
            pl.col("label").str.slice(0, shown),
            pl.col("accuracy").cast(pl.Float64),
            pl.lit(settings.decoder).alias("decoder"),
        )
    )


def recovery_metrics(
    predictions: pl.DataFrame,
    settings: RecoverySettings,
    evaluation: EvaluationSettings | None = None,
) -> dict:
    """Headline accuracy, per-type means, interval, counts, parameters and definitions."""
    evaluation = evaluation or EvaluationSettings()
    scored = predictions.filter(pl.col("status") == Status.SCORED)
    accuracy = scored["accuracy"].to_numpy()
    has_bp = "scored_bp" in scored.columns
    by_type: dict[str, dict] = {}
    for (t,), part in scored.filter(pl.col("type").is_not_null()).group_by("type"):
        by_type[str(t)] = {"n": part.height, "accuracy": float(part["accuracy"].mean())}
        if has_bp:
            by_type[str(t)]["mean_scored_bp"] = float(part["scored_bp"].mean())
    sources = predictions["label_source"].drop_nulls() if "label_source" in predictions else None
    result = task_metrics(
        SEQUENCE_RECOVERY.name,
        predictions,
        scored,
        metrics={"accuracy": float(accuracy.mean()) if len(accuracy) else None},
        by_type=dict(sorted(by_type.items())),
        label_source=sources[0] if sources is not None and len(sources) else None,
        mean_scored_bp=float(scored["scored_bp"].mean()) if has_bp and scored.height else None,
        chance_accuracy=CHANCE_ACCURACY,
        definitions=SEQUENCE_RECOVERY.definitions(settings),
        parameters=asdict(settings),
    )
    add_mean_interval(result, "accuracy", accuracy, evaluation)
    if settings.label_source == "auto" and result["label_source"] == "sequence_tail":
        result["warnings"].append(
            "label_source auto took the sequence tail: the rollout is longer than the shortest "
            "label, so every row's label is the end of its sequence (published rule)"
        )
    if settings.species_tags:
        tagged = pl.col("type").is_in(list(SPECIES_TAGS)).fill_null(False)
        untagged = scored.filter(~tagged).height
        if untagged:
            result["warnings"].append(
                f"{untagged} rows have a type without a species tag: prompted without one, as "
                "published"
            )
    short = scored.filter(pl.col("label").str.len_chars() < settings.score_bp).height
    if short and settings.accuracy_mode == "fixed_bp":
        result["warnings"].append(
            f"{short} labels are shorter than {settings.score_bp} bp: their missing bases count "
            "as wrong (published denominator)"
        )
    with_n = scored.filter(pl.col("prompt_non_acgt") > 0).height
    if with_n:
        result["warnings"].append(f"{with_n} prompts contain non-ACGT bases (sent as <oov>)")
    return result
