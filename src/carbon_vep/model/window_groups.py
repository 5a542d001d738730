"""Many window groups a forward pass: the centered and FNS recipes' prefix sharing, on every
device.

A window group is a reference window and its alternates, which differ from one token on (the
variant's); the tokens before it are the group's shared prefix. Groups of one shape (window
tokens, the split token, the number of alleles) go through the model together: their prefixes in
one forward pass, the cache repeated for every allele, every allele's suffix in a second; the
per-target terms of the whole batch are computed in one go and summed per sequence on the device
in float64, and the batch's sums come back in one copy. Fewer, larger kernels and one host wait
a batch instead of one a group; the tokens the same 37% fewer than scoring every window whole.

The sums in float64 make a group's score independent of the batch it shares (the terms are
computed row by row; tests/model/test_window_groups.py); one group at a time, summed in float32,
was within 1.2e-6 of them on the demo model. Every device runs this path, so every CPU test and
workflow run exercises what a GPU job runs (docs/gpu.md, the prefix-sharing section).

The groups' passes have many shapes (each group's split token, alleles and window set the
shape, the budget how many share a pass), so they run without cuDNN's attention, whose plan is
built again for every new shape (model.attention.without_cudnn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from carbon_vep.model.attention import without_cudnn
from carbon_vep.model.engine import Engine, SequenceScore, new_cache
from carbon_vep.model.tokens import base_codes

GroupScores = tuple[SequenceScore | None, list[SequenceScore | None]]


@dataclass(frozen=True)
class EncodedGroup:
    ids: np.ndarray  # [1 + alleles, T]: the reference, then each alternate
    codes: list[np.ndarray]  # each sequence's base codes (for bp terms)
    split: int  # the first token where an alternate differs (the prefix is ids[:, :split])

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.ids.shape[1], self.split, self.ids.shape[0]


def encode_group(engine: Engine, ref: str, alts: Sequence[str]) -> EncodedGroup:
    ids = np.stack([engine.vocab.encode(s) for s in (ref, *alts)])
    differs = (ids[1:] != ids[:1]).any(axis=0)
    split = int(np.argmax(differs)) if differs.any() else ids.shape[1] - 1
    codes = [base_codes(s, engine.k) for s in (ref, *alts)]
    return EncodedGroup(ids, codes, split)


@torch.inference_mode()
def window_groups_scores(
    engine: Engine, groups: Sequence[tuple[str, Sequence[str]]], kind: str, normalization: str
) -> list[GroupScores]:
    """(reference score, alternate scores) of every group, in order; batched as the engine's
    token budget allows (a group's tokens: its alleles x its window; without a budget,
    batch_size windows), halved on OOM, a group failing alone scored None."""
    encoded = [encode_group(engine, ref, alts) for ref, alts in groups]

    def work(batch: Sequence[EncodedGroup]) -> list[GroupScores]:
        return _batch_scores(engine, batch, kind, normalization)

    sizes = [g.ids.size for g in encoded]  # a group's tokens: its alleles x its window
    # batch_size counts windows (ModelSettings): without a token budget a batch holds the
    # tokens of batch_size of the longest windows, so a group of 4 alleles counts 4
    widest = max((g.ids.shape[1] for g in encoded), default=1)
    budget = engine.batch_tokens or engine.batch_size * widest
    with without_cudnn():
        results = engine.run_batched(encoded, work, sizes, "window groups", budget)
    return [
        result if result is not None else (None, [None] * (len(alts)))
        for result, (_, alts) in zip(results, groups, strict=True)
    ]


def _batch_scores(
    engine: Engine, batch: Sequence[EncodedGroup], kind: str, normalization: str
) -> list[GroupScores]:
    """One batch: its groups of one shape together; every term of the batch summed per
    sequence in one pass; one device-to-host copy."""
    segments = _Segments()
    order: list[int] = []
    by_shape: dict[tuple[int, int, int], list[int]] = {}
    for i, group in enumerate(batch):
        by_shape.setdefault(group.shape, []).append(i)
    for members in by_shape.values():
        _forward_shape(engine, [batch[i] for i in members], segments)
        order += members
    totals, counts = segments.sums(engine, kind, normalization)
    totals_host = engine.to_host(totals)
    scores: list[GroupScores | None] = [None] * len(batch)
    cursor = 0
    for i in order:
        alleles = batch[i].ids.shape[0]
        # segment 0 of a group: its prefix terms (shared); then one segment an allele
        shared = (float(totals_host[cursor]), counts[cursor])
        own = [
            SequenceScore(
                shared[0] + float(totals_host[cursor + 1 + a]), shared[1] + counts[cursor + 1 + a]
            )
            for a in range(alleles)
        ]
        scores[i] = (own[0], own[1:])
        cursor += 1 + alleles
    return scores  # type: ignore[return-value]


def _forward_shape(engine: Engine, groups: Sequence[EncodedGroup], segments: _Segments) -> None:
    """Groups of one shape: the prefixes as one batch, every allele's suffix as a second off
    the prefixes' cache (repeated for each allele); their terms' rows into `segments`, per group
    the prefix's then each allele's."""
    _, split, alleles = groups[0].shape
    prefix_ids = np.stack([g.ids[0, :split] for g in groups])
    prefix_hidden, cache = engine.forward(prefix_ids, cache=new_cache(engine.model))
    cache.batch_repeat_interleave(alleles)
    suffix_ids = np.concatenate([g.ids[:, split:] for g in groups])
    suffix_hidden, _ = engine.forward(suffix_ids, cache=cache)
    for g, group in enumerate(groups):
        # targets 1..split-1 are predicted inside the prefix: identical for all alleles
        segments.add(prefix_hidden[g, :-1], group.ids[0, 1:split], group.codes[0][: split - 1])
        for a in range(alleles):
            row = g * alleles + a
            hidden = torch.cat([prefix_hidden[g, -1:], suffix_hidden[row, :-1]])
            segments.add(hidden, group.ids[a, split:], group.codes[a][split - 1 :])


class _Segments:
    """Hidden rows and their targets, segment by segment, for one pass over all of them."""

    def __init__(self) -> None:
        self.rows: list[torch.Tensor] = []
        self.ids: list[np.ndarray] = []
        self.codes: list[np.ndarray] = []

    def add(self, rows: torch.Tensor, ids: np.ndarray, codes: np.ndarray) -> None:
        self.rows.append(rows)
        self.ids.append(np.asarray(ids))
        self.codes.append(np.asarray(codes))  # [targets, k], as base_codes gives them

    def sums(self, engine: Engine, kind: str, normalization: str) -> tuple[torch.Tensor, list[int]]:
        """Each segment's sum of log-likelihood terms (on the device) and count, the terms as
        Engine.term_values selects them, for all segments' rows in one pass."""
        n = len(self.rows)
        segment = np.repeat(np.arange(n), [len(ids) for ids in self.ids])
        codes = np.concatenate(self.codes)  # [N, k]
        rows, ids = torch.cat(self.rows), np.concatenate(self.ids)
        values, kept = engine.term_values(rows, ids, codes, kind, normalization)
        per_target = codes.shape[1] if kind == "bp" else 1  # bp terms: k a target
        owner = np.repeat(segment, per_target)[kept]
        totals = torch.zeros(n, dtype=torch.float64, device=values.device)
        totals.index_add_(0, engine.to_device(owner.astype(np.int64)), values.double())
        return totals, np.bincount(owner, minlength=n).tolist()
