"""Scoring code that is not part of the pipeline, for tests and `make bench` only.

`centered_scores` and `nexttoken_scores` do what the official Carbon evaluation scripts do
(huggingface/carbon `evaluation/vep_eval.py` and `evaluation/clinvar_vep_eval.py`, with the flags
their `evaluation/slurm/*/` files pass: `--bf16`, `--add_dna_tag` / the `<dna>` prefix, no
`--batch_size`, so the scripts' defaults), restated here, not copied:

- centered (`vep_eval.py`, token-level branch): the reference and alternate windows of every
  variant (and their reverse complements under `rc_average`, the script's `--rev_comp_avg`),
  identical sequences scored once (the first request of a sequence is kept, in request order),
  batches of 2 (`--batch_size` default), `<dna>` + each sequence cut to whole 6-mers, padded by
  the tokenizer, one full forward pass with the attention mask, a log-softmax over the whole
  vocabulary in the logits' own dtype (bf16 for a bf16 model), and the mask-weighted mean of
  the target tokens' log-probabilities. The script scores a model with a `score_sequence`
  method at the base level instead; a Llama checkpoint (the demo's, the GPU check's) has none.
- right-end (`clinvar_vep_eval.py`): one context per variant (no deduplication), `<dna>` +
  context, batches of 4 (`--batch_size` default) tokenized with the tokenizer's defaults and
  padding, full logits, the softmax of the last real position in the logits' dtype, P(b) = that
  softmax summed over every pure-ACGT vocabulary string starting with b (ids past the model's
  output size left out), and score = log(P(ref) / (P(alt) + 1e-10)).

They are the yardstick the pipeline's engine is checked against (tests) and timed against
(`make bench` and the GPU check, through benchmark.reference_job). `full_log_probs` and
`per_base_marginals` are plain full-logits helpers for other checks (not a published script);
`token_log_likelihoods` runs the engine itself, per token, for the tests. (The engine's loops as
they were before its GPU costs were removed live with the tests that use them:
tests/support/engine_as_it_was.py.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from carbon_vep.genome.reference import Reference

K = 6  # the scripts' k-mer size for Carbon (`kmer_size = 6`, the NIAH `value_len_bp // 6`)
CENTERED_BATCH = 2  # vep_eval.py `--batch_size` default; no sbatch file passes another
NEXTTOKEN_BATCH = 4  # clinvar_vep_eval.py `--batch_size` default; no sbatch file passes another
P_ALT_EPSILON = 1e-10  # clinvar_vep_eval.py: score = log(p_ref / (p_alt + 1e-10))
_COMPLEMENT = str.maketrans("ACGTacgtNn", "TGCAtgcaNn")  # vep_eval.py's reverse complement


def full_log_probs(
    model: Any, tokenizer: Any, prefix: str, seq: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-vocabulary log-softmax (float32) at every position of prefix+seq, and the token ids:
    a plain helper for checks that need every position's distribution."""
    ids = tokenizer(prefix + seq, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids.to(model.device)).logits[0].float()
    return torch.log_softmax(logits, dim=-1), ids[0].to(model.device)


def with_pad_token(tokenizer: Any) -> Any:
    """The scripts' `if tok.pad_token is None: tok.pad_token = tok.eos_token`."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@torch.no_grad()
def sequence_mean_lls(
    model: Any, tokenizer: Any, prefix: str, seqs: list[str], batch_size: int = CENTERED_BATCH
) -> list[float]:
    """vep_eval.py's token-level sequence score of each sequence, `batch_size` at a time: the mean
    log-probability of the tokens of prefix + seq[:len - len % 6] after the first, under a
    full-vocabulary log-softmax in the logits' dtype."""
    tokenizer = with_pad_token(tokenizer)
    out = []
    for lo in range(0, len(seqs), batch_size):
        texts = [prefix + s[: len(s) // K * K] for s in seqs[lo : lo + batch_size]]
        encoded = tokenizer(
            texts, return_tensors="pt", padding=True, truncation=False, add_special_tokens=False
        )
        ids = encoded["input_ids"].to(model.device)
        mask = encoded["attention_mask"].to(model.device)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1, :]
        log_probs = torch.log_softmax(logits, dim=-1)
        picked = log_probs.gather(2, ids[:, 1:, None])[..., 0]
        weights = mask[:, 1:].float()
        means = (picked * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)
        out += [float(m) for m in means.tolist()]
    return out


def window_mean_ll(model: Any, tokenizer: Any, prefix: str, seq: str) -> float:
    """One sequence's centered score (`sequence_mean_lls` of it alone)."""
    return sequence_mean_lls(model, tokenizer, prefix, [seq], 1)[0]


def centered_window(
    reference: Reference, chrom: str, pos: int, ref: str, alt: str, window_bp: int
) -> tuple[str, str]:
    """(ref_seq, var_seq) as the published prep scripts cut them (data_prep/prep_brca2.py,
    prep_traitgym.py): genome[max(0, p - W/2) : min(length, p + W/2)], the variant at
    min(W/2, p), p = pos - 1."""
    p, flank = pos - 1, window_bp // 2
    start = max(0, p - flank)
    window = reference.fetch(chrom, start, min(reference.lengths[chrom], p + flank))
    i = p - start
    return window, window[:i] + alt + window[i + len(ref) :]


def centered_scores(
    model: Any,
    tokenizer: Any,
    prefix: str,
    reference: Reference,
    variants: list[tuple[str, int, str, str]],
    window_bp: int = 8192,
    batch_size: int = CENTERED_BATCH,
    rc_average: bool = False,
) -> list[float]:
    """score = -delta, delta = LL(var) - LL(ref) (with `rc_average`, the mean of the forward and
    the reverse-complement deltas), as vep_eval.py computes it: every request (ref, var, and
    their reverse complements) listed per variant, identical sequences scored once in the order
    first requested, `batch_size` sequences a forward pass."""
    pairs = [centered_window(reference, *v, window_bp) for v in variants]
    if rc_average:
        pairs = [(w, v, _revcomp(w), _revcomp(v)) for w, v in pairs]
    unique = list(dict.fromkeys(seq for group in pairs for seq in group))
    lls = sequence_mean_lls(model, tokenizer, prefix, unique, batch_size)
    ll = dict(zip(unique, lls, strict=True))
    scores = []
    for group in pairs:
        delta = ll[group[1]] - ll[group[0]]
        if rc_average:
            delta = (delta + (ll[group[3]] - ll[group[2]])) / 2
        scores.append(-delta)
    return scores


def _revcomp(seq: str) -> str:
    return seq.translate(_COMPLEMENT)[::-1]


def right_end_context(reference: Reference, chrom: str, pos: int, context_bp: int) -> str:
    """clinvar_vep_eval.py's context: genome[max(0, pos - 1 - ctx) : pos - 1], leading N
    stripped, trimmed from the left to a multiple of 6."""
    context = reference.fetch(chrom, max(0, pos - 1 - context_bp), pos - 1).lstrip("N")
    return context[len(context) % K :]


def first_base_ids(tokenizer: Any) -> dict[str, list[int]]:
    """Every vocabulary string made only of A, C, G, T, by its first base (`get_vocab()`: one id
    per string, as the script reads it)."""
    out: dict[str, list[int]] = {b: [] for b in "ACGT"}
    for string, idx in tokenizer.get_vocab().items():
        if isinstance(string, str) and string and set(string) <= set("ACGT"):
            out[string[0]].append(idx)
    return out


@torch.no_grad()
def nexttoken_scores(
    model: Any,
    tokenizer: Any,
    prefix: str,
    reference: Reference,
    variants: list[tuple[str, int, str, str]],
    context_bp: int = 24_000,
    batch_size: int = NEXTTOKEN_BATCH,
) -> list[float]:
    """log(P(ref) / (P(alt) + 1e-10)) as clinvar_vep_eval.py computes it: one context per
    variant, `batch_size` contexts a forward pass, the last real position's full-vocabulary
    softmax summed over every pure-ACGT string by first base."""
    tokenizer = with_pad_token(tokenizer)
    first_base = first_base_ids(tokenizer)
    sequences = [prefix + right_end_context(reference, c, p, context_bp) for c, p, _, _ in variants]
    probs = []
    for lo in range(0, len(sequences), batch_size):
        batch = sequences[lo : lo + batch_size]
        encoded = tokenizer(batch, return_tensors="pt", padding=True).to(model.device)
        logits = model(**encoded).logits
        for row, seq in enumerate(batch):
            ids = tokenizer(seq).get("input_ids", [])
            offset = 2 if ids and ids[-1] == tokenizer.eos_token_id else 1  # a trailing EOS
            last = logits[row, len(ids) - offset, :]
            probs.append(torch.softmax(last, dim=0).cpu().float().tolist())
    scores = []
    for (_, _, ref, alt), p in zip(variants, probs, strict=True):
        p_ref = sum(p[i] for i in first_base.get(ref, []) if i < len(p))
        p_alt = sum(p[i] for i in first_base.get(alt, []) if i < len(p))
        scores.append(float(np.log(p_ref / (p_alt + P_ALT_EPSILON))))
    return scores


def per_base_marginals(
    model: Any,
    tokenizer: Any,
    prefix: str,
    kmer_ids: list[int],
    reference: Reference,
    chrom: str,
    positions: list[int],
    context_bp: int,
) -> list[np.ndarray]:
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
            terms = engine.token_log_probs(hidden[row, : n - 1], targets, normalization)
            out.append(terms.cpu().numpy())
        return out

    return engine.run_batched(sequences, work)
