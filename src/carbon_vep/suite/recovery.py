"""Sequence recovery, GENERator's generative task (docs/suite-conventions.md#recipes).

Published recipe: prompt = DNA prefix + the rightmost ⌊min(len, 6144)/6⌋·6 bases of `sequence`;
greedy-generate 5 tokens (30 bp) with the tokenizer's special tokens suppressed; per row,
accuracy = bases equal to `label` among the first 30 / 30 (a short prediction counts its
missing bases as wrong); headline = mean over rows, plus per-`type` means.

Generation runs through transformers `generate` (greedy, the model's KV cache); prompts of equal
token length are batched together, so no padding is ever involved. Three greedy decoders:

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

from collections import Counter
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
import polars as pl
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from carbon_vep.columns import Status
from carbon_vep.config.stages import EvaluationSettings, RecoverySettings
from carbon_vep.evaluate.metrics import bootstrap_mean_interval
from carbon_vep.model.batching import FAILED_ALONE, in_batches
from carbon_vep.model.loading import LoadedModel
from carbon_vep.model.tokens import non_acgt_count, suppressed_token_ids
from carbon_vep.progress import Progress

CHANCE_ACCURACY = 0.25
ACCURACY_DEFINITION = (
    "mean over rows of (bases equal to the label among the first {bp} of prediction and label) "
    "/ {bp}; a prediction shorter than {bp} bp counts its missing bases as wrong"
)


def prompt_bases(sequence: str, max_bp: int, k: int) -> str:
    """The rightmost ⌊min(len, max_bp)/k⌋·k bases of `sequence` (the prompt without prefix)."""
    keep = (min(len(sequence), max_bp) // k) * k
    return sequence[len(sequence) - keep :]


def base_matches(prediction: str, label: str, score_bp: int) -> int:
    """Positions among the first `score_bp` where prediction and label have the same base."""
    return sum(a == b for a, b in zip(prediction[:score_bp], label[:score_bp], strict=False))


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
def _generation_config(loaded: LoadedModel, settings: RecoverySettings) -> GenerationConfig:
    suppress = suppressed_token_ids(loaded.tokenizer) if settings.decoder == "token" else None
    return GenerationConfig(
        max_new_tokens=settings.new_tokens,
        min_new_tokens=settings.new_tokens,
        do_sample=False,
        num_beams=1,
        suppress_tokens=suppress,
        pad_token_id=loaded.vocab.pad_id,
    )


def _processors(loaded: LoadedModel, settings: RecoverySettings) -> LogitsProcessorList:
    if settings.decoder == "token":
        return LogitsProcessorList()
    conditional = settings.decoder == "fns_conditional"
    return LogitsProcessorList([FnsGreedy(loaded.vocab.kmer_ids, loaded.vocab.k, conditional)])


@torch.inference_mode()
def generate_continuations(
    loaded: LoadedModel, prompts: list[str], settings: RecoverySettings, batch_size: int,
    batch_tokens: int = 0,
) -> list[str | None]:  # fmt: skip
    """Greedy continuation text of each prompt (bases only, prefix added here); None where a
    prompt ran out of memory even alone. A batch holds `batch_size` prompts, or as many as fit
    in `batch_tokens` (prompt and generated tokens) when that is set."""
    encoded = [loaded.vocab.encode(p) for p in prompts]
    config = _generation_config(loaded, settings)
    processors = _processors(loaded, settings)
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(i)
    out: list[str | None] = [None] * len(prompts)

    def work(batch: list[int]) -> list[str]:
        ids = torch.as_tensor(np.stack([encoded[i] for i in batch]), device=loaded.device)
        generated = loaded.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            generation_config=config,
            logits_processor=processors,
        )
        new_ids = generated[:, ids.shape[1] :].cpu().tolist()  # one copy per batch
        return [loaded.tokenizer.decode(row) for row in new_ids]

    progress = Progress(len(prompts), "prompts", "sequence recovery")
    for length, members in sorted(by_length.items()):  # equal lengths: no padding in a batch
        tokens = [length + settings.new_tokens] * len(members)
        batches = in_batches(members, work, batch_size, loaded.device, progress, tokens=tokens,
                             batch_tokens=batch_tokens)  # fmt: skip
        for index, values in batches:
            for i, value in zip(index, values, strict=True):
                out[members[i]] = value
    progress.close()
    return out


# ---- the task ----------------------------------------------------------------------------
def recover(
    table: pl.DataFrame, loaded: LoadedModel, settings: RecoverySettings, batch_size: int,
    batch_tokens: int = 0,
) -> pl.DataFrame:  # fmt: skip
    """One output row per input row: prompt size, prediction, matches, accuracy, status.

    Rows without a sequence or label are kept with status `invalid` and no accuracy. Bases
    other than ACGT in a prompt go to the tokenizer as `<oov>`, as in the published script,
    and are counted in `prompt_non_acgt`.
    """

    def generate(prompts: list[str]) -> list[str | None]:
        return generate_continuations(loaded, prompts, settings, batch_size, batch_tokens)

    return recover_with(table, loaded.vocab.k, settings, generate)


def recover_with(
    table: pl.DataFrame,
    k: int,
    settings: RecoverySettings,
    generate: Callable[[list[str]], list[str | None]],
) -> pl.DataFrame:
    """`recover` with the continuations from `generate` (prompts -> texts, None where a prompt
    failed): our engine's, or vLLM's (suite.recovery_vllm)."""
    if "type" not in table.columns:
        table = table.with_columns(pl.lit(None, pl.Utf8).alias("type"))
    rows = table.select(
        "row_id",
        "source",
        pl.col("sequence").cast(pl.Utf8).str.to_uppercase(),
        pl.col("label").cast(pl.Utf8).str.to_uppercase(),
        pl.col("type").cast(pl.Utf8),
    ).to_dicts()
    prompt_of = {
        r["row_id"]: prompt_bases(r["sequence"], settings.max_prompt_bp, k)
        for r in rows
        if r["sequence"] and r["label"]
    }
    generated = generate(list(prompt_of.values()))
    predictions = dict(zip(prompt_of, generated, strict=True))
    out = []
    for r in rows:
        record = {**r, "status": Status.INVALID.value, "reason": "missing sequence or label"}
        record.update(dict.fromkeys(("prompt_bp", "prompt_non_acgt", "n_match", "accuracy")))
        record.update(prediction=None)
        if r["row_id"] in predictions and predictions[r["row_id"]] is None:
            record.update(status=Status.FAILED.value, reason=FAILED_ALONE)
        elif r["row_id"] in predictions:
            pred, prompt = predictions[r["row_id"]], prompt_of[r["row_id"]]
            matches = base_matches(pred, r["label"], settings.score_bp)
            record.update(
                status=Status.SCORED.value,
                reason="",
                prompt_bp=len(prompt),
                prompt_non_acgt=non_acgt_count(prompt),
                prediction=pred,
                n_match=matches,
                accuracy=matches / settings.score_bp,
            )
        out.append(record)
    return (
        pl.DataFrame(out, infer_schema_length=None)
        .drop("sequence")
        .with_columns(
            pl.col("label").str.slice(0, settings.score_bp),
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
    by_type = {
        str(t): {"n": part.height, "accuracy": float(part["accuracy"].mean())}
        for (t,), part in scored.group_by("type", maintain_order=True)
    }
    definition = ACCURACY_DEFINITION.format(bp=settings.score_bp)
    result: dict = {
        "kind": "sequence_recovery",
        "n_rows": predictions.height,
        "n_scored": scored.height,
        "status_counts": dict(sorted(Counter(predictions["status"].to_list()).items())),
        "metrics": {"accuracy": float(accuracy.mean()) if len(accuracy) else None},
        "by_type": dict(sorted(by_type.items())),
        "confidence_intervals": {},
        "chance_accuracy": CHANCE_ACCURACY,
        "definitions": {
            "accuracy": definition,
            "by_type": "the same accuracy averaged over the rows of each `type`",
            "chance_accuracy": "expected accuracy of uniformly random bases",
        },
        "parameters": asdict(settings),
        "warnings": [],
    }
    interval = bootstrap_mean_interval(accuracy, evaluation.bootstrap, evaluation.seed)
    if interval:
        result["confidence_intervals"]["accuracy"] = interval
    short = scored.filter(pl.col("label").str.len_chars() < settings.score_bp).height
    if short:
        result["warnings"].append(
            f"{short} labels are shorter than {settings.score_bp} bp: their missing bases count "
            "as wrong (published denominator)"
        )
    with_n = scored.filter(pl.col("prompt_non_acgt") > 0).height
    if with_n:
        result["warnings"].append(f"{with_n} prompts contain non-ACGT bases (sent as <oov>)")
    return result
