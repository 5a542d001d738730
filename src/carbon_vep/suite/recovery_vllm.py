"""Sequence recovery on vLLM (engine: vllm): the published `token` decoder — greedy over the
whole vocabulary with every special id taken out (vLLM's `allowed_token_ids`), the new ids
decoded by the tokenizer as our engine decodes them. The FNS decoders replace the scores by
their own k-mer choice, which only our engine does; they are refused here with the setting to
change."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from carbon_vep.config.stages import ModelSettings, RecoverySettings
from carbon_vep.errors import EngineError
from carbon_vep.model.drafting import check_tokenizers, draft_spec
from carbon_vep.model.loading import load_tokenizer
from carbon_vep.model.tokens import DnaVocab, suppressed_token_ids
from carbon_vep.model.vllm import VllmEngine, speculative_record
from carbon_vep.suite.recovery import recover_with
from carbon_vep.suite.tasks import JobTimes, Part


def unsuppressed_ids(tokenizer: Any, vocab: DnaVocab) -> list[int]:
    """Every id of the vocabulary but the special ids (the published `suppress_tokens`)."""
    return [
        int(i) for i in np.setdiff1d(np.arange(vocab.vocab_size), suppressed_token_ids(tokenizer))
    ]


def check_decoder(settings: RecoverySettings, where: str) -> None:
    if settings.decoder != "token":
        raise EngineError(
            f"{where}: decoder {settings.decoder} runs on the transformers engine only (it "
            "replaces the scores by its own k-mer choice); set engine: transformers for this "
            "task, or decoder: token (published)"
        )


def vllm_continuations(
    engine: VllmEngine, tokenizer: Any, vocab: DnaVocab, settings: RecoverySettings
):
    """A `generate` for `suite.recovery.recover_with`: all prompts through the engine at once,
    each after its leading ids (its species tag, if any)."""
    allowed = unsuppressed_ids(tokenizer, vocab)

    def generate(prompts: list[str], leads: list[tuple[int, ...]]) -> list[str | None]:
        if not prompts:
            return []
        encoded = [vocab.encode(p, lead) for p, lead in zip(prompts, leads, strict=True)]
        new = engine.greedy(encoded, settings.new_tokens, allowed)
        return [tokenizer.decode(row) for row in new]

    return generate


def recover_on_vllm(
    table: pl.DataFrame,
    model: ModelSettings,
    settings: RecoverySettings,
    where: str,
    times: JobTimes,
    part: Part | None = None,
) -> tuple[pl.DataFrame, dict | None]:
    """The task's prompts (a `part`'s share of them) through one vLLM engine: the
    predictions, and the draft's record when the model names one (vLLM's draft-model
    speculative decoding); `times` is told when the engine has started."""
    check_decoder(settings, where)
    tokenizer, vocab = load_tokenizer(model)
    if model.draft_model:  # before the engine starts: a mismatch costs no start-up
        check_tokenizers(
            tokenizer, vocab, *load_tokenizer(draft_spec(model)), model.path, model.draft_model
        )
    tag = int(settings.species_tags)  # a species tag, <dna>, the prompt, the new tokens
    longest = tag + 1 + settings.max_prompt_bp // vocab.k + settings.new_tokens
    engine = VllmEngine(model, max_model_len=model.vllm.max_model_len or longest, what=where)
    times.ready()
    generate = vllm_continuations(engine, tokenizer, vocab, settings)
    predictions = recover_with(table, vocab.k, settings, generate, tokenizer, part)
    if not model.draft_model:
        return predictions, None
    return predictions, speculative_record(engine.llm.get_metrics(), model.num_speculative_tokens)
