"""Speculative decoding with a draft model (the Carbon-3B card's `generate(..., assistant_model=
draft)`): the draft's compatibility with the target, and the acceptance it reached.

Greedy assisted generation is lossless: the target checks every proposed token against its own
argmax and keeps the proposal only where they agree, so the output is the target's greedy output
(docs/generation.md#speculative-decoding). transformers runs it one prompt at a time.

With recovery's `decode_cache` static the target verifies on transformers' static cache (its
`StaticLayer` can be cropped back after a rejection); the draft always proposes on its own
dynamic cache, uncompiled: transformers' AssistedCandidateGenerator clears the draft's
`cache_implementation` and `compile_config` (generation/candidate_generator.py). With
`decode_cache` captured both models run in our own loop instead (model.captured_drafting), and
its counts replace the forward hooks' (`Draft.accepted`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from carbon_vep.config.stages import DEFAULT_SPECULATIVE_TOKENS, ModelSettings
from carbon_vep.errors import InputError
from carbon_vep.model.loading import LoadedModel, load_model
from carbon_vep.model.tokens import DnaVocab


class DraftMismatchError(InputError):
    """A draft that does not share the target's tokenizer cannot propose the target's tokens."""


def check_draft(target: LoadedModel, draft: LoadedModel, target_name: str, draft_name: str) -> None:
    """Raise DraftMismatchError naming both models unless the draft has the target's vocabulary
    (every token at the same id) and the same DNA block (k, prefix, k-mer ids)."""
    check_tokenizers(
        target.tokenizer, target.vocab, draft.tokenizer, draft.vocab, target_name, draft_name
    )


def check_tokenizers(
    target_tokenizer: Any,
    target_vocab: DnaVocab,
    draft_tokenizer: Any,
    draft_vocab: DnaVocab,
    target_name: str,
    draft_name: str,
) -> None:
    """`check_draft` on the tokenizers alone (what a vLLM job has before its engine starts)."""
    problems = []
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        problems.append(
            f"vocabularies differ ({len(target_tokenizer)} and {len(draft_tokenizer)} tokens)"
        )
    t, d = target_vocab, draft_vocab
    if (t.k, t.prefix_token, t.prefix_id) != (d.k, d.prefix_token, d.prefix_id):
        problems.append(f"DNA prefix or k differ ({t.prefix_token}/{t.k}, {d.prefix_token}/{d.k})")
    elif not np.array_equal(t.kmer_ids, d.kmer_ids):
        problems.append("the k-mer tokens sit at different ids")
    if problems:
        raise DraftMismatchError(
            draft_name,
            f"cannot draft for {target_name}: {'; '.join(problems)}; a draft model "
            "must share the target's tokenizer (Carbon-500M drafts for Carbon-3B and -8B)",
        )


def draft_spec(spec: ModelSettings) -> ModelSettings:
    """How the draft `spec` names is loaded: as the target (dtype, device, remote code)."""
    return replace(spec, path=spec.draft_model, revision=spec.draft_revision, draft_model=None)


@dataclass
class Draft:
    """A loaded draft model, the tokens it proposes a step, and the calls counted so far."""

    loaded: LoadedModel
    tokens: int = DEFAULT_SPECULATIVE_TOKENS
    calls: dict[str, int] = field(default_factory=lambda: {"target": 0, "draft": 0})
    new_tokens: int = 0
    accepted: int | None = None  # proposals kept, where the loop counts them (captured)

    def generate_kwargs(self) -> dict:
        """What `generate` takes for assisted decoding. transformers reads the proposal settings
        from the draft's own generation config: a fixed number of proposals a step, no
        heuristic schedule and no confidence cut-off, so the acceptance rate reads plainly."""
        config = self.loaded.model.generation_config
        config.num_assistant_tokens = self.tokens
        config.num_assistant_tokens_schedule = "constant"
        config.assistant_confidence_threshold = 0.0
        return {"assistant_model": self.loaded.model}

    def counting(self, target: torch.nn.Module) -> list:
        """Forward hooks counting the calls of target and draft (remove them after)."""

        def counter(name: str):
            def hook(*_) -> None:
                self.calls[name] += 1

            return hook

        return [
            target.register_forward_pre_hook(counter("target")),
            self.loaded.model.register_forward_pre_hook(counter("draft")),
        ]

    def record(self) -> dict:
        """Acceptance of what was generated so far. Each target call verifies one step's
        proposals and adds one token of its own, so accepted = new tokens − target calls
        (unless the loop counted them: `accepted`); each draft call proposes one token."""
        target, proposed = self.calls["target"], self.calls["draft"]
        accepted = self.accepted if self.accepted is not None else max(0, self.new_tokens - target)
        return {
            "speculative_tokens": self.tokens,
            "new_tokens": self.new_tokens,
            "target_calls": target,
            "draft_calls": proposed,
            "tokens_per_target_call": self.new_tokens / target if target else None,
            "acceptance_rate": accepted / proposed if proposed else None,
        }


def load_draft(spec: ModelSettings, target: LoadedModel) -> Draft | None:
    """The draft `spec` names (None without one), loaded as the target is (dtype, device,
    remote code, attention) and checked against it."""
    if spec.draft_model is None:
        return None
    draft = load_model(draft_spec(spec), attention=target.model.config._attn_implementation)
    check_draft(target, draft, spec.path, spec.draft_model)
    return Draft(draft, tokens=spec.num_speculative_tokens)
