"""Genomic-NIAH on vLLM (engine: vllm): the same rows, answers and columns as `suite.niah`.

The job's rows go to the engine in groups whose prompts fit in its KV cache together (all rows
at once where they fit): vLLM batches a group continuously, prefills the long prompts in chunks
into its paged KV cache and, with prefix caching on, computes a prompt once for its generation
and both value likelihoods (the likelihood requests of a group come after its generation and
read the prompts' pages from the cache; a group sized past the cache would evict them first).
The published semantics are our engine's: `<dna>` + the prompt's 6-mers from our tokenizer
adapter, `value_len_bp / k` greedy tokens restricted to the 6-mer block with every special id
taken out (the whole vocabulary less the special ids without a dna_config.json), the prediction
decoded by the tokenizer with special tokens kept and cut to the value's length, and the
likelihoods the mean full-vocabulary log-probability of the value's tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from carbon_vep.errors import EngineError
from carbon_vep.model.tokens import DnaVocab, dna_block_ids, suppressed_token_ids
from carbon_vep.model.vllm import VllmEngine
from carbon_vep.progress import Progress
from carbon_vep.suite.niah import RowResult, niah_row, row_schema


def allowed_ids(tokenizer: Any, vocab: DnaVocab) -> list[int]:
    """The ids greedy generation may pick: the 6-mer block less the special ids, or, for a
    model without a dna_config.json, every id of the vocabulary less the special ids."""
    suppressed = suppressed_token_ids(tokenizer)
    block = dna_block_ids(tokenizer, vocab)
    if block is None:
        block = np.arange(vocab.vocab_size)
    return [int(i) for i in np.setdiff1d(block, suppressed)]


def engine_length(needed: int, configured: int, where: str) -> int:
    """The engine's max_model_len for prompts of up to `needed` tokens: the configured one, or
    (0) what the cell needs. A likelihood request asks vLLM for one token past the prompt (then
    dropped), so the cell needs `needed + 1`; a configured length below that stops the job
    before the engine starts (vLLM would refuse the requests after starting)."""
    length = needed + 1 if needed else 0
    if configured and configured < length:
        raise EngineError(
            f"{where}: its prompts need max_model_len {length} ({needed} tokens, + 1 for a "
            f"likelihood request), the model's vllm.max_model_len is {configured}; raise "
            "max_model_len (or leave it 0: what the cell needs)"
        )
    return configured or length


RESIDENT_SHARE = 0.9  # of the KV cache a group's prompts may fill (the rest: new tokens)


def row_groups(lengths: list[int], capacity_tokens: int | None) -> list[slice]:
    """Consecutive rows whose prompts (`lengths` tokens each) fit in `capacity_tokens` of KV
    cache together, at least one row a group; None (capacity unknown): one group."""
    if capacity_tokens is None or not lengths:
        return [slice(0, len(lengths))]
    groups, start, used = [], 0, 0
    for i, n in enumerate(lengths):
        if i > start and used + n > capacity_tokens * RESIDENT_SHARE:
            groups.append(slice(start, i))
            start, used = i, 0
        used += n
    return groups + [slice(start, len(lengths))]


class VllmNiahScorer:
    """NIAH rows through a vLLM engine started once for the job."""

    def __init__(self, engine: VllmEngine, tokenizer: Any, vocab: DnaVocab) -> None:
        self.engine, self.tokenizer, self.vocab = engine, tokenizer, vocab
        self.allowed = allowed_ids(tokenizer, vocab)

    def score_batch(
        self,
        prompts: list[str],
        values: list[str],
        negatives: list[str],
        progress: Progress | None = None,
    ) -> list[RowResult]:
        """Any rows, any prompt lengths (the engine pages and batches them itself)."""
        encode = self.vocab.encode
        ids = [encode(p) for p in prompts]
        value_ids = [encode(v)[1:] for v in values]
        negative_ids = [encode(v)[1:] for v in negatives]
        results = []
        for group in row_groups([len(i) for i in ids], self.engine.capacity_tokens):
            results += self._score_group(
                ids[group], value_ids[group], negative_ids[group], values[group]
            )
            if progress is not None:
                progress.update(len(values[group]))
        return results

    def _score_group(self, ids, value_ids, negative_ids, values) -> list[RowResult]:
        new = self.engine.greedy(ids, len(value_ids[0]), self.allowed)
        likelihoods = self.engine.mean_log_likelihoods(ids + ids, value_ids + negative_ids)
        n = len(ids)
        return [
            RowResult(
                pred=self.tokenizer.decode(row, skip_special_tokens=False)[: len(value)],
                target_ll=likelihoods[i],
                negative_ll=likelihoods[n + i],
            )
            for i, (row, value) in enumerate(zip(new, values, strict=True))
        ]


def score_rows_vllm(cell: pl.DataFrame, scorer: VllmNiahScorer) -> pl.DataFrame:
    """One output row per cell row, as `suite.niah.score_rows` writes them."""
    rows = cell.to_dicts()
    progress = Progress(len(rows), "rows", "Genomic-NIAH (vLLM)")
    prompts, values = [r["prompt"] for r in rows], [r["value"] for r in rows]
    negatives = [r["negative_value"] for r in rows]
    results = scorer.score_batch(prompts, values, negatives, progress) if rows else []
    progress.close()
    return pl.DataFrame(
        [niah_row(r, result) for r, result in zip(rows, results, strict=True)],
        schema=row_schema("depth" in cell.columns),
    )
