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
(`make bench`). `full_log_probs` and `per_base_marginals` are plain full-logits helpers for other
checks (not a published script); `token_log_likelihoods` runs the engine itself, per token (what
the benchmark's model-throughput rows time).

The `per_item_*` and `masked_*` functions are the engine's loops as they were before the GPU
costs were removed: an attention mask on every batch, a host read (`float`, `int`, `.cpu()`)
and a blocking host-to-device copy per item. The tests check that the engine gives identical
values; the GPU check (benchmark.gpu) times both on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
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


# ---- the engine's loops before the GPU costs were removed ----------------------------------
def masked_hidden_states(engine: Any, batch: list[np.ndarray]) -> torch.Tensor:
    """Final hidden states with an attention mask even when no sequence is padded."""
    width = max(len(ids) for ids in batch)
    ids = torch.full((len(batch), width), engine.vocab.pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, seq in enumerate(batch):
        ids[row, : len(seq)] = torch.as_tensor(seq)
        mask[row, : len(seq)] = 1
    out = engine.body(input_ids=ids.to(engine.device), attention_mask=mask.to(engine.device))
    return out[0]


def _per_item_terms(engine: Any, rows, target_ids, target_codes, kind, normalization):
    """(sum, count) of one item, read back to the host at once (boolean-mask selection)."""
    if rows.shape[0] == 0:
        return 0.0, 0
    if kind == "bp":
        marginals = engine._marginal_terms(rows)
        codes = torch.as_tensor(target_codes, device=rows.device)
        picked = marginals.gather(2, codes.clamp(min=0)[..., None])[..., 0]
        keep = codes >= 0
        return float(picked[keep].sum()), int(keep.sum())
    targets = torch.as_tensor(target_ids, device=rows.device)
    terms = engine.token_log_probs(rows, targets, normalization)
    if normalization == "dna_block" and engine.vocab.oov_id is not None:
        keep = targets != engine.vocab.oov_id
        return float(terms[keep].sum()), int(keep.sum())
    return float(terms.sum()), int(terms.numel())


@torch.inference_mode()
def per_item_sequence_scores(
    engine: Any, sequences: list[str], kind: str, normalization: str
) -> list[tuple[float, int]]:
    """(total, count) per sequence, batched like `Engine.sequence_scores`, one host read per
    item."""
    from carbon_vep.model.tokens import base_codes

    encoded = [engine.vocab.encode(s) for s in sequences]
    codes = [base_codes(s, engine.k) for s in sequences]

    def work(batch_index):
        hidden, lengths = engine.hidden_states([encoded[i] for i in batch_index])
        return [
            _per_item_terms(
                engine, hidden[row, : n - 1], encoded[i][1:], codes[i], kind, normalization
            )
            for row, (n, i) in enumerate(zip(lengths, batch_index, strict=True))
        ]

    return engine.run_batched(range(len(sequences)), work, [len(e) for e in encoded])


@torch.inference_mode()
def per_item_window_group(
    engine: Any, ref: str, alts: list[str], kind: str, normalization: str
) -> tuple[tuple[float, int], list[tuple[float, int]]]:
    """`Engine.window_group_scores` with a host read per allele: (total, count) each."""
    import copy

    from carbon_vep.model.tokens import base_codes

    ref_ids = engine.vocab.encode(ref)
    alt_ids = np.stack([engine.vocab.encode(a) for a in alts])
    ref_codes = base_codes(ref, engine.k)
    differs = (alt_ids != ref_ids[None, :]).any(axis=0)
    split = int(np.argmax(differs)) if differs.any() else len(ref_ids) - 1
    from transformers import DynamicCache

    cache = DynamicCache(config=engine.model.config)
    prefix, cache = engine.forward(torch.as_tensor(ref_ids[None, :split]), cache=cache)
    prefix = prefix[0]
    shared = _per_item_terms(
        engine, prefix[:-1], ref_ids[1:split], ref_codes[: split - 1], kind, normalization
    )
    ref_suffix, _ = engine.forward(
        torch.as_tensor(ref_ids[None, split:]), cache=copy.deepcopy(cache)
    )
    rows = torch.cat([prefix[-1:], ref_suffix[0, :-1]])
    own = _per_item_terms(
        engine, rows, ref_ids[split:], ref_codes[split - 1 :], kind, normalization
    )
    ref_score = (shared[0] + own[0], shared[1] + own[1])
    cache.batch_repeat_interleave(len(alts))
    alt_suffix, _ = engine.forward(torch.as_tensor(alt_ids[:, split:]), cache=cache)
    alt_scores = []
    for row, alt in enumerate(alts):
        rows = torch.cat([prefix[-1:], alt_suffix[row, :-1]])
        codes = base_codes(alt, engine.k)[split - 1 :]
        own = _per_item_terms(engine, rows, alt_ids[row, split:], codes, kind, normalization)
        alt_scores.append((shared[0] + own[0], shared[1] + own[1]))
    return ref_score, alt_scores


@torch.inference_mode()
def per_tile_scan_batches(
    engine: Any, reference: Reference, cut: list, *, log: bool
) -> Iterator[list[np.ndarray]]:
    """The scan's loop as it was: batch by batch (equal-length tiles, as the scan cuts them),
    each tile's scored bases' [2, bases, 4] values (FNS marginal, conditional; ATCG order)
    copied to the host on their own (two copies a tile), the next batch started only when the
    caller is done with this one."""
    from carbon_vep.model.batching import in_batches
    from carbon_vep.model.tokens import base_codes

    def work(batch):
        seqs = [reference.fetch(chrom, t.start, t.end) for chrom, t in batch]
        hidden, _ = engine.hidden_states([engine.vocab.encode(s) for s in seqs])
        values = []
        for row, ((_, tile), seq) in enumerate(zip(batch, seqs, strict=True)):
            kmer_lp = engine.dna_log_probs(hidden[row, : len(seq) // engine.k], "dna_block")
            codes = torch.as_tensor(base_codes(seq, engine.k), device=kmer_lp.device)
            marginals = engine.kmer_base_marginals(kmer_lp)
            conditional = engine.within_token_conditionals(kmer_lp, codes, marginals)
            lo, hi = tile.score_start - tile.start, tile.score_end - tile.start
            pair = [x.reshape(-1, 4)[lo:hi] for x in (marginals, conditional)]
            values.append(np.stack([(x if log else x.exp()).cpu().numpy() for x in pair]))
        return values

    lengths = [t.end - t.start for _, t in cut]
    tokens = [n // engine.k + 1 for n in lengths]
    batches = in_batches(
        cut,
        work,
        engine.batch_size,
        engine.device,
        tokens=tokens,
        batch_tokens=engine.batch_tokens,
        keys=lengths,
    )
    for _, values in batches:
        yield values


def per_tile_scan_values(engine: Any, reference: Reference, cut: list, *, log: bool) -> list:
    """Every tile's values from the loop as it was (per_tile_scan_batches), in order."""
    return [v for values in per_tile_scan_batches(engine, reference, cut, log=log) for v in values]


def per_tile_scan_chunk(engine: Any, reference: Reference, cut: list, writer: Any) -> int:
    """The chunk job as it was: per batch, per-tile copies, the batch's rows built and written
    (one row group) before the next batch starts on the device. Returns the bases written."""
    import polars as pl

    from carbon_vep.columns import SCAN_BASES
    from carbon_vep.model.tokens import BASES
    from carbon_vep.scan.tiles import _base_frame

    to_acgt = [BASES.index(b) for b in SCAN_BASES]
    tiles = iter(cut)
    written = 0
    for values in per_tile_scan_batches(engine, reference, cut, log=True):
        frames = []
        for value in values:
            chrom, tile = next(tiles)
            seq = reference.fetch(chrom, tile.start, tile.end)
            lo, hi = tile.score_start - tile.start, tile.score_end - tile.start
            marginal, conditional = (v[:, to_acgt] for v in value)
            frames.append(
                _base_frame(chrom, tile, seq, marginal, conditional, lo, hi, engine.k, log=True)
            )
        frame = pl.concat(frames)
        writer.write(frame)
        written += frame.height
    return written
