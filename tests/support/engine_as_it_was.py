"""The engine's loops as they were before the GPU costs were removed, kept as references for
the tests that prove the changes left every value alone (tests/model/test_device_costs.py,
tests/scan/test_scan_overlap.py, tests/model/test_window_groups.py): an attention mask on every
batch, a host read (`float`, `int`, `.cpu()`) and a blocking host-to-device copy per item, the
scan's per-tile copies with its rows written before the next batch starts, and one window group
at a time (its prefix once, the reference's suffix off a copy of its cache, the alternates' off
the cache repeated; sums in float32), which the batched groups of model.window_groups replaced
on every device. No product code runs them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl
import torch
from transformers import DynamicCache

from carbon_vep.columns import SCAN_BASES
from carbon_vep.genome.reference import Reference
from carbon_vep.model.batching import in_batches
from carbon_vep.model.tokens import BASES, base_codes
from carbon_vep.scan.tiles import _base_frame


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
    """`one_window_group` with a host read per allele: (total, count) each."""
    ref_ids = engine.vocab.encode(ref)
    alt_ids = np.stack([engine.vocab.encode(a) for a in alts])
    ref_codes = base_codes(ref, engine.k)
    differs = (alt_ids != ref_ids[None, :]).any(axis=0)
    split = int(np.argmax(differs)) if differs.any() else len(ref_ids) - 1
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
def one_window_group(
    engine: Any, ref: str, alts: list[str], kind: str, normalization: str
) -> tuple[Any, list[Any]]:
    """A reference window and its alternates scored alone, sharing the common prefix: the
    prefix up to the first token where an alternate differs once, its KV cache feeding the
    reference's suffix (a copy) and every alternate's (repeated); one copy back per group."""
    from carbon_vep.model.engine import SequenceScore

    ref_ids = engine.vocab.encode(ref)
    alt_ids = np.stack([engine.vocab.encode(a) for a in alts])
    ref_codes = base_codes(ref, engine.k)
    differs = (alt_ids != ref_ids[None, :]).any(axis=0)
    split = int(np.argmax(differs)) if differs.any() else len(ref_ids) - 1
    prefix, cache = engine.forward(
        ref_ids[None, :split], cache=DynamicCache(config=engine.model.config)
    )
    prefix = prefix[0]
    terms = [  # targets 1..split-1 are predicted inside the prefix: the same for every allele
        engine._target_terms(
            prefix[:-1], ref_ids[1:split], ref_codes[: split - 1], kind, normalization
        )
    ]
    ref_suffix, _ = engine.forward(ref_ids[None, split:], cache=copy.deepcopy(cache))
    rows = torch.cat([prefix[-1:], ref_suffix[0, :-1]])
    terms.append(
        engine._target_terms(rows, ref_ids[split:], ref_codes[split - 1 :], kind, normalization)
    )
    cache.batch_repeat_interleave(len(alts))
    alt_suffix, _ = engine.forward(alt_ids[:, split:], cache=cache)
    for row, alt in enumerate(alts):
        rows = torch.cat([prefix[-1:], alt_suffix[row, :-1]])
        codes = base_codes(alt, engine.k)[split - 1 :]
        terms.append(engine._target_terms(rows, alt_ids[row, split:], codes, kind, normalization))
    totals = engine.to_host(torch.stack([total for total, _ in terms]))
    (shared, shared_n), *own = ((float(t), n) for t, (_, n) in zip(totals, terms, strict=True))
    scores = [SequenceScore(shared + total, shared_n + n) for total, n in own]
    return scores[0], scores[1:]


@torch.inference_mode()
def per_tile_scan_batches(
    engine: Any, reference: Reference, cut: list, *, log: bool
) -> Iterator[list[np.ndarray]]:
    """The scan's loop as it was: batch by batch (equal-length tiles, as the scan cuts them),
    each tile's scored bases' [2, bases, 4] values (FNS marginal, conditional; ATCG order)
    copied to the host on their own (two copies a tile), the next batch started only when the
    caller is done with this one."""

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
