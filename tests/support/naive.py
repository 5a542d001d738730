"""Scoring code that is not part of the pipeline, for tests and `make bench` only.

Mostly straightforward implementations of the published approaches: one window per variant,
full [length, vocabulary] logits from `model(ids).logits`, a log-softmax over everything, no
sharing or deduplication. The pipeline never calls these; they are the yardstick its engine
is checked and timed against. `token_log_likelihoods` runs the engine itself, per token (what
the benchmark's model-throughput rows time). scripts/bench.py imports this file from tests/.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from carbon_vep.genome.reference import Reference


def full_log_probs(
    model: Any, tokenizer: Any, prefix: str, seq: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-vocabulary log-softmax at every position of prefix+seq, and the token ids."""
    ids = tokenizer(prefix + seq, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids.to(model.device)).logits[0].float()
    return torch.log_softmax(logits, dim=-1), ids[0].to(model.device)


def window_mean_ll(model: Any, tokenizer: Any, prefix: str, seq: str) -> float:
    """Mean token log-prob of prefix + seq[:len - len % 6] (centered recipe sequence score)."""
    seq = seq[: len(seq) - len(seq) % 6]
    log_probs, ids = full_log_probs(model, tokenizer, prefix, seq)
    return log_probs[:-1].gather(-1, ids[1:, None]).mean().item()


def centered_scores(
    model: Any, tokenizer: Any, prefix: str, reference: Reference,
    variants: list[tuple[str, int, str, str]], window_bp: int = 8192,
) -> list[float]:  # fmt: skip
    """score = -(LL(alt window) - LL(ref window)); both windows scored for every variant."""
    scores = []
    flank = window_bp // 2
    for chrom, pos, ref, alt in variants:
        p = pos - 1
        start = max(0, p - flank)
        window = reference.fetch(chrom, start, min(reference.lengths[chrom], p + flank))
        i = p - start
        variant = window[:i] + alt + window[i + len(ref) :]
        delta = window_mean_ll(model, tokenizer, prefix, variant) - window_mean_ll(
            model, tokenizer, prefix, window
        )
        scores.append(-delta)
    return scores


def nexttoken_scores(
    model: Any, tokenizer: Any, prefix: str, reference: Reference,
    variants: list[tuple[str, int, str, str]], context_bp: int = 24_000,
) -> list[float]:  # fmt: skip
    """log P(ref)/P(alt) from the full softmax summed over every pure-ACGT vocabulary string."""
    first_base = {b: [] for b in "ACGT"}
    for string, idx in tokenizer.get_vocab().items():
        if string and set(string) <= set("ACGT"):
            first_base[string[0]].append(idx)
    scores = []
    for chrom, pos, ref, alt in variants:
        context = reference.fetch(chrom, max(0, pos - 1 - context_bp), pos - 1).lstrip("N")
        context = context[len(context) % 6 :]
        log_probs, _ = full_log_probs(model, tokenizer, prefix, context)
        probs = log_probs[-1].exp()
        mass = {b: probs[first_base[b]].sum().item() for b in "ACGT"}
        scores.append(float(np.log(mass[ref] / mass[alt])))
    return scores


def per_base_marginals(
    model: Any, tokenizer: Any, prefix: str, kmer_ids: list[int], reference: Reference,
    chrom: str, positions: list[int], context_bp: int,
) -> list[np.ndarray]:  # fmt: skip
    """One full forward per base: FNS first-base marginal (6-mer block softmax) after its left
    context trimmed to whole 6-mers — the per-variant way to score every SNV of a region."""
    out = []
    for pos in positions:
        context = reference.fetch(chrom, max(0, pos - 1 - context_bp), pos - 1)
        context = context[len(context) % 6 :]
        log_probs, _ = full_log_probs(model, tokenizer, prefix, context)
        block = torch.softmax(log_probs[-1, kmer_ids], dim=-1).reshape(4, -1).sum(-1)
        out.append(block.cpu().numpy())  # ATCG order
    return out


@torch.inference_mode()
def token_log_likelihoods(
    engine: Any, sequences: list[np.ndarray], normalization: str
) -> list[np.ndarray]:
    """Per-token log p(token_t | tokens_<t), t = 1..n-1, of each id sequence, through the
    engine's batching and chunked normaliser."""

    def work(batch: list[np.ndarray]) -> list[np.ndarray]:
        hidden, lengths = engine.hidden_states(batch)
        out = []
        for row, (n, ids) in enumerate(zip(lengths, batch, strict=True)):
            targets = torch.as_tensor(ids[1:], device=engine.device)
            terms = engine._token_terms(hidden[row, : n - 1], targets, normalization)
            out.append(terms.cpu().numpy())
        return out

    return engine.run_batched(sequences, work)
