"""Sequence recovery on vLLM (engine: vllm): the published `token` decoder — greedy over the
whole vocabulary with every special id taken out (vLLM's `allowed_token_ids`), the new ids
decoded by the tokenizer as our engine decodes them. The FNS decoders replace the scores by
their own k-mer choice, which only our engine does; they are refused here with the setting to
change."""

from __future__ import annotations

from typing import Any

import numpy as np

from carbon_vep.config.stages import RecoverySettings
from carbon_vep.errors import EngineError
from carbon_vep.model.tokens import DnaVocab, suppressed_token_ids
from carbon_vep.model.vllm import VllmEngine


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
