"""Genomic-NIAH on the model: one prefill per row, generation and both value likelihoods from
its KV cache (docs/suite-conventions.md#genomic-niah).

The published evaluation runs three full forward passes over every prompt (generate, then the
positive and the negative sequence's log-likelihoods). Here a batch of rows whose prompts have
one token length is prefilled once (`prefill_chunk` tokens at a time when set, so the
activations of a 128k-token prompt never exist at once; nothing of a chunk is kept once its
keys and values are in the cache but the last position's hidden state); that hidden state gives
the first generated token and the first value token's log-probability of both continuations.
The first decode step's pass then also carries each continuation's value tokens but the last
(the positive and the negative value) and a guess at the generation (the first greedy token,
then the value's own later tokens: a model that retrieves the needle generates the value), as
three runs under a branch mask (model.attention.branch_mask: each run sees the prompt's cache
and its own earlier tokens, positions as if alone). The guess is checked as speculative
decoding checks a draft: its tokens are kept while each is the greedy pick after the ones
before it (`greedy_prefix`), the cache is cropped back to the prompt and the kept tokens, and
greedy generation feeds one token at a time from there. With a value of n tokens, 1 pass
follows the prefill when the model generates the value and n - 1 at most, instead of n + 1
(the value is 4 tokens in the published cells): these passes are small and bound by the
host's per-layer work on a GPU (docs/gpu.md), and the predictions are the greedy ones either
way. These passes run without cuDNN's attention (model.attention.without_cudnn): their shapes
(a few queries over this batch's prompt length) come once, and cuDNN builds a plan for each new
shape (~0.4 s of host time on the H200) where the flash or memory-efficient kernel needs none;
in the H200 check of 2026-11-29 a job's generation phase took 0.36-1.29 s for 3-5 such
passes a batch. Where the attention cannot take such a mask without copying the keys and values
(FlashAttention-2, transformers' sdpa on CUDA; `takes_branch_masks`), greedy generation goes a
token a pass and each continuation has its own pass after it, the cache cropped back to the
prompt between them. Either way the prompt's keys and values exist once,
never repeated per continuation, and the output layer is applied only where a value is read:
never to prompt positions.

Memory, against the official script (huggingface/carbon `evaluation/genome_niah_eval.py`, one
row at a time, each pass over the whole prompt at once): a batch holds several rows only while
their prompts fit in one prefill chunk (`rows_per_batch`), so from a chunk's length on a row is
alone and its peak is the weights, its prompt's KV cache and one chunk's activations, where the
script's is the weights, the same cache and the whole prompt's activations (docs/benchmarks.md,
bench-niah).

Published semantics kept: `<dna>` prefix (the tokenizer adapter's prefix), `value_len_bp / k`
greedy tokens, every special id suppressed, logits restricted to the 6-mer block of the model's
dna_config.json (none without one), prediction = `tokenizer.decode` of the new ids with special
tokens kept, cut to value_len_bp characters; the likelihoods are mean full-vocabulary token
log-probabilities of the value's tokens.

Each batch adds its phases' seconds, on the device's timeline, to the job's record
(`model.job_record.add_phase`): the prefill, the generation (with the continuations' tokens
where they share its first pass), the likelihoods (the continuations' own passes where they
do not, and the output layer); the GPU check sets them beside the official script's
(benchmark/gpu/product_reference.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import polars as pl
import torch

from carbon_vep.columns import FAILED_ALONE, Status
from carbon_vep.model import job_record
from carbon_vep.model.attention import branch_mask, takes_branch_masks, without_cudnn
from carbon_vep.model.batching import in_batches, scatter
from carbon_vep.model.engine import Engine, new_cache
from carbon_vep.model.timing import DeviceClock
from carbon_vep.model.tokens import dna_block_ids, suppressed_token_ids
from carbon_vep.progress import Progress
from carbon_vep.suite.niah_cells import ROW_COLUMNS, base_accuracy

PHASES = ("prefill", "generate", "likelihood")  # a batch's parts, in order (job_record phases)


@dataclass(frozen=True)
class RowResult:
    """The model's answers for one row."""

    pred: str
    target_ll: float
    negative_ll: float


class NiahScorer:
    """Greedy retrieval and value likelihoods of NIAH rows from one prefill each."""

    def __init__(self, engine: Engine, tokenizer: Any, prefill_chunk: int = 0) -> None:
        self.engine, self.tokenizer, self.prefill_chunk = engine, tokenizer, prefill_chunk
        block = dna_block_ids(tokenizer, engine.vocab)
        suppressed = suppressed_token_ids(tokenizer)
        if block is None:  # no restriction: the whole vocabulary, special ids suppressed
            self.allowed = None
        else:
            self.allowed = engine.to_device(np.setdiff1d(block, suppressed))
        vocab_rows = engine.out_weight.shape[0]
        self.suppressed = engine.to_device([i for i in suppressed if i < vocab_rows])

    # ---- the model passes --------------------------------------------------------------
    def prefill(self, ids: np.ndarray, cache: Any) -> torch.Tensor:
        """Run the prompts [B, L] into `cache`; the last position's hidden state [B, H]. Only
        that position is read, so the last layer runs for it alone (the chunks before the last:
        for none), its keys and values for all (`Engine.forward`'s keep_last)."""
        step = self.prefill_chunk or ids.shape[1]
        starts = range(0, ids.shape[1], step)
        for lo in starts[:-1]:
            self.engine.forward(ids[:, lo : lo + step], cache=cache, keep_last=0)
        hidden, _ = self.engine.forward(ids[:, starts[-1] :], cache=cache, keep_last=1)
        return hidden[:, -1]

    def next_token(self, hidden: torch.Tensor) -> torch.Tensor:
        """The greedy token after each hidden state [B, H] -> [B], under the restriction."""
        engine = self.engine
        if self.allowed is not None:
            bias = None if engine.out_bias is None else engine.out_bias[self.allowed]
            logits = engine.logits(hidden, engine.out_weight[self.allowed], bias)
            return self.allowed[logits.argmax(dim=-1)]
        logits = engine.logits(hidden, engine.out_weight, engine.out_bias)
        logits[:, self.suppressed] = -torch.inf
        return logits.argmax(dim=-1)

    def generate(self, last: torch.Tensor, cache: Any, new_tokens: int) -> torch.Tensor:
        """Greedy `new_tokens` ids [B, n] after the prefilled prompts (the cache grows)."""
        return self.decode([self.next_token(last)], cache, new_tokens)

    def decode(self, chosen: list[torch.Tensor], cache: Any, new_tokens: int) -> torch.Tensor:
        """Greedy ids [B, new_tokens] continuing `chosen` (ids [B] each; the cache holds all
        but the last), one pass a token."""
        while len(chosen) < new_tokens:
            hidden, _ = self.engine.forward(chosen[-1][:, None], cache=cache)
            chosen.append(self.next_token(hidden[:, -1]))
        return torch.stack(chosen, dim=1)

    def continuation_rows(
        self, last: torch.Tensor, cache: Any, values: np.ndarray, prompt_len: int
    ) -> torch.Tensor:
        """The hidden states predicting each of a continuation's tokens (values [B, n]):
        [B, n, H]. The cache is cropped back to the prompt first (the generated tokens, or the
        other continuation's), never copied per row."""
        extra = cache.get_seq_length() - prompt_len  # a shape, no device sync
        if extra:
            cache.crop(-extra)  # transformers 5.24: a negative count removes that many tokens
        rows = last[:, None]
        if values.shape[1] > 1:
            hidden, _ = self.engine.forward(values[:, :-1], cache=cache)
            rows = torch.cat([rows, hidden], dim=1)
        return rows

    def generate_branched(
        self, last: torch.Tensor, cache: Any, values: np.ndarray, negatives: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy ids [B, n] and both continuations' rows [2, B, n, H] (n = values' tokens >
        1), the continuations in the first decode step's pass: three runs of n - 1 tokens under
        model.attention.branch_mask (none sees another), the positive's and the negative's
        tokens but the last, and a guess at the generation: the first greedy token, then the
        value's own tokens 2 .. n - 1 (a model that retrieves the needle generates the value).
        The guess is checked as speculative decoding checks a draft: its tokens are kept while
        each is the greedy pick after the ones before it, in every row of the batch; the first
        always is. The cache is cropped back to the prompt and the kept tokens, and greedy
        decoding goes on from the pick after them. After the prefill: 1 pass when the model
        generates the value, n - 1 at most (where `generate` and two `continuation_rows` take
        n + 1); the picks are greedy either way."""
        cached, (batch, n) = cache.get_seq_length(), values.shape
        first = self.next_token(last)
        guess = torch.cat([first[:, None], self.engine.to_device(values[:, 1:-1])], dim=1)
        runs = (guess, *(self.engine.to_device(v[:, :-1]) for v in (values, negatives)))
        mask, positions = branch_mask(cached, [n - 1] * 3, self.engine.device)
        hidden, _ = self.engine.forward(torch.cat(runs, dim=1), mask, cache, positions)
        picks = self.next_token(hidden[:, : n - 1].reshape(batch * (n - 1), -1))
        picks = picks.reshape(batch, n - 1)  # the greedy token after each guessed one
        kept = greedy_prefix(guess, picks)  # the host waits for the pass here
        cache.crop(-(3 * (n - 1) - kept))
        chosen = [*guess[:, :kept].unbind(dim=1), picks[:, kept - 1]]
        generated = self.decode(chosen, cache, n)
        starts = (n - 1, 2 * (n - 1))  # the positive's run, then the negative's
        parts = [torch.cat([last[:, None], hidden[:, lo : lo + n - 1]], dim=1) for lo in starts]
        return generated, torch.stack(parts)

    def mean_log_likelihoods(self, rows: torch.Tensor, values: np.ndarray) -> torch.Tensor:
        """Mean full-vocabulary log p(token) of each continuation (rows [C, B, n, H], values
        [C, B, n]): [B, C], in one pass of the output layer."""
        flat = rows.reshape(-1, rows.shape[-1])
        terms = self.engine.token_log_probs(
            flat, self.engine.to_device(values.reshape(-1)), "full_vocab"
        )
        return terms.reshape(values.shape).mean(dim=2).T

    @torch.inference_mode()
    def score_batch(
        self, prompts: Sequence[str], values: Sequence[str], negatives: Sequence[str]
    ) -> list[RowResult]:
        """Rows whose prompts have one token length: one prefill, then generation and the
        positive and the negative value's rows off the prompt's one cache (in the first
        decode step's pass where the attention takes a branch mask), then both likelihoods."""
        vocab = self.engine.vocab
        ids = np.stack([vocab.encode(p) for p in prompts])
        continuations = np.stack(
            [np.stack([vocab.encode(v)[1:] for v in side]) for side in (values, negatives)]
        )
        n = continuations.shape[2]
        clock = DeviceClock(self.engine.device)
        marks = [clock.mark()]
        cache = new_cache(self.engine.model)
        last = self.prefill(ids, cache)
        marks.append(clock.mark())
        with without_cudnn():  # the small passes after the prefill: shapes of this batch alone
            if n > 1 and takes_branch_masks(self.engine.model):
                generated, rows = self.generate_branched(last, cache, *continuations)
                marks.append(clock.mark())
            else:
                generated = self.generate(last, cache, n)
                marks.append(clock.mark())
                rows = torch.stack(
                    [self.continuation_rows(last, cache, c, ids.shape[1]) for c in continuations]
                )
        ll = self.mean_log_likelihoods(rows, continuations)
        marks.append(clock.mark())
        ll_host = self.engine.to_host(ll)  # the batch's one wait for the device
        for phase, (start, end) in zip(PHASES, pairwise(marks), strict=True):
            job_record.add_phase(phase, clock.seconds(start, end))
        new_ids = generated.cpu().tolist()
        return [
            RowResult(
                pred=self.tokenizer.decode(row, skip_special_tokens=False)[: len(value)],
                target_ll=float(pair[0]),
                negative_ll=float(pair[1]),
            )
            for row, value, pair in zip(new_ids, values, ll_host, strict=True)
        ]


def greedy_prefix(guess: torch.Tensor, picks: torch.Tensor) -> int:
    """How many leading tokens of `guess` [B, m] are greedy in every row, given `picks` [B, m],
    the greedy token after each guessed one: the first always is (it is the first greedy
    pick); each later one while it equals the pick after the one before it, and all before it
    are kept."""
    agree = (picks[:, :-1] == guess[:, 1:]).all(dim=0).int()
    return 1 + int(torch.cumprod(agree, dim=0).sum())


def rows_per_batch(row_tokens: int, prefill_chunk: int, batch_size: int, batch_tokens: int) -> int:
    """Rows of `row_tokens` tokens a batch holds: what the model's settings allow (batch_tokens,
    else batch_size), and no more than fill one prefill chunk (prefill_chunk 0: the whole
    prompt, so one row); one at least. Every row of a batch holds its own KV cache and its
    chunk's activations, and the official script runs one row at a time: a second row of a
    chunk's length or more would make the peak larger than the script's."""
    allowed = batch_tokens // row_tokens if batch_tokens else batch_size
    return max(1, min(allowed, prefill_chunk // row_tokens))


def score_rows(
    cell: pl.DataFrame, scorer: NiahScorer, batch_size: int, batch_tokens: int = 0
) -> pl.DataFrame:
    """One output row per cell row (ROW_COLUMNS, + depth): prediction, exact match, base
    accuracy, both likelihoods; rows that ran out of memory alone are `failed`. Rows of one
    prompt length share a batch as `rows_per_batch` allows."""
    k = scorer.engine.vocab.k
    rows = cell.to_dicts()
    by_length: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        by_length.setdefault(len(row["prompt"]) // k, []).append(i)
    results: list[RowResult | None] = [None] * len(rows)
    progress = Progress(len(rows), "rows", "Genomic-NIAH")

    def work(members: list[int]) -> list[RowResult]:
        picked = [rows[i] for i in members]
        return scorer.score_batch(
            [r["prompt"] for r in picked],
            [r["value"] for r in picked],
            [r["negative_value"] for r in picked],
        )

    for length, members in sorted(by_length.items()):  # equal lengths: no padding in a batch
        row_tokens = length + 1 + len(rows[members[0]]["value"]) // k
        size = rows_per_batch(row_tokens, scorer.prefill_chunk, batch_size, batch_tokens)
        batches = in_batches(members, work, size, scorer.engine.device, progress)
        scatter(batches, members, results)
    progress.close()
    return pl.DataFrame(
        [niah_row(r, result) for r, result in zip(rows, results, strict=True)],
        schema=row_schema("depth" in cell.columns),
    )


def row_schema(with_depth: bool) -> dict[str, Any]:
    types = {
        "uid": pl.Utf8,
        "task": pl.Utf8,
        "context_length_tokens": pl.Int64,
        "status": pl.Utf8,
        "reason": pl.Utf8,
        "pred": pl.Utf8,
        "gen_exact_match": pl.Int64,
        "gen_base_accuracy": pl.Float64,
        "target_ll": pl.Float64,
        "negative_ll": pl.Float64,
        "ll_margin": pl.Float64,
        "ll_correct": pl.Boolean,
    }
    schema = {c: types[c] for c in ROW_COLUMNS}
    return schema | ({"depth": pl.Float64} if with_depth else {})


def niah_row(row: dict, result: RowResult | None) -> dict:
    """A cell row's output row: the model's answers and the flags, or `failed`."""
    out = {c: row.get(c) for c in ("uid", "task", "context_length_tokens", "depth") if c in row}
    if result is None:
        return out | {"status": Status.FAILED.value, "reason": FAILED_ALONE}
    return out | {
        "status": Status.SCORED.value,
        "reason": "",
        "pred": result.pred,
        "gen_exact_match": int(result.pred == row["value"]),
        "gen_base_accuracy": base_accuracy(result.pred, row["value"]),
        "target_ll": result.target_ll,
        "negative_ll": result.negative_ll,
        "ll_margin": result.target_ll - result.negative_ll,
        "ll_correct": result.target_ll > result.negative_ll,
    }
