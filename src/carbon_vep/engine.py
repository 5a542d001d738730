"""Forward passes and the quantities the recipes need, without full-vocabulary logit tensors.

The model body gives hidden states; the output layer is applied only where needed:
- the 4,096 k-mer rows give FNS marginals and block-normalised log-probs;
- a full-vocabulary normaliser, where a published recipe needs one, is a log-sum-exp computed
  in vocabulary chunks and never stored as [batch, length, vocabulary].
Batches are right-padded with an attention mask; results do not depend on the batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from .tokens import DnaVocab

T = TypeVar("T")
NORMALIZATIONS = ("full_vocab", "dna_block", "acgt_strings")


class Engine:
    def __init__(
        self,
        model: Any,
        vocab: DnaVocab,
        device: torch.device,
        batch_size: int = 8,
        vocab_chunk: int = 16384,
        position_chunk: int = 2048,
    ) -> None:
        self.model, self.vocab, self.device = model, vocab, device
        self.batch_size = batch_size
        self.vocab_chunk, self.position_chunk = vocab_chunk, position_chunk
        head = model.get_output_embeddings()
        self.out_weight = head.weight  # [V, H], used in chunks only
        self.out_bias = getattr(head, "bias", None)
        kmer_ids = torch.as_tensor(vocab.kmer_ids, device=device)
        self.dna_weight = self.out_weight[kmer_ids]  # [4**k, H]
        self.dna_bias = None if self.out_bias is None else self.out_bias[kmer_ids]
        self.k = vocab.k

    # ---- forward -------------------------------------------------------------------------
    @torch.inference_mode()
    def hidden_states(self, batch: Sequence[np.ndarray]) -> tuple[torch.Tensor, list[int]]:
        """Final hidden states [B, T, H] of right-padded id sequences, and their lengths."""
        lengths = [len(ids) for ids in batch]
        width = max(lengths)
        ids = torch.full((len(batch), width), self.vocab.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = torch.as_tensor(seq)
            mask[row, : len(seq)] = 1
        body = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model
        out = body(input_ids=ids.to(self.device), attention_mask=mask.to(self.device))
        return out[0], lengths

    def _logits(self, hidden: torch.Tensor, weight: torch.Tensor, bias: Any) -> torch.Tensor:
        logits = (hidden @ weight.T).float()  # matmul in model dtype, softmax maths in fp32
        return logits if bias is None else logits + bias.float()

    def full_logsumexp(self, hidden: torch.Tensor) -> torch.Tensor:
        """log Σ_v exp(logit_v) over the whole vocabulary, chunked; hidden [N, H] -> [N]."""
        total = torch.full((hidden.shape[0],), -torch.inf, device=hidden.device)
        vocab_rows = self.out_weight.shape[0]
        for lo in range(0, vocab_rows, self.vocab_chunk):
            hi = min(lo + self.vocab_chunk, vocab_rows)
            bias = None if self.out_bias is None else self.out_bias[lo:hi]
            chunk = self._logits(hidden, self.out_weight[lo:hi], bias)
            total = torch.logaddexp(total, torch.logsumexp(chunk, dim=-1))
        return total

    def dna_log_probs(self, hidden: torch.Tensor, normalization: str) -> torch.Tensor:
        """log p(k-mer) for all 4**k k-mers at each position: hidden [N, H] -> [N, 4**k]."""
        logits = self._logits(hidden, self.dna_weight, self.dna_bias)
        if normalization == "dna_block":
            return torch.log_softmax(logits, dim=-1)
        return logits - self.full_logsumexp(hidden)[:, None]

    def kmer_base_marginals(self, kmer_log_probs: torch.Tensor) -> torch.Tensor:
        """FNS marginals log m_j(b): [N, 4**k] -> [N, k, 4] (bases in ATCG order)."""
        grid = kmer_log_probs.reshape(-1, *([4] * self.k))
        axes = list(range(1, self.k + 1))
        return torch.stack(
            [torch.logsumexp(grid, dim=[a for a in axes if a != j + 1]) for j in range(self.k)],
            dim=1,
        )

    # ---- batching ------------------------------------------------------------------------
    def run_batched(self, items: Sequence[T], work: Callable[[Sequence[T]], list]) -> list:
        """Apply `work` to batches of items sorted by length; an OOM halves the batch and retries.

        Results come back in the input order. An item that fails alone raises.
        """
        order = sorted(range(len(items)), key=lambda i: len(items[i]))  # type: ignore[arg-type]
        results: list = [None] * len(items)
        start, size = 0, self.batch_size
        while start < len(order):
            chunk = order[start : start + size]
            try:
                values = work([items[i] for i in chunk])
            except torch.OutOfMemoryError:
                if size == 1:
                    raise
                size = max(1, size // 2)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            for i, value in zip(chunk, values, strict=True):
                results[i] = value
            start += len(chunk)
        return results

    def _target_rows(self, hidden: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
        """Hidden states that predict tokens 1..n-1 of each sequence (padding excluded)."""
        return [hidden[row, : n - 1] for row, n in enumerate(lengths)]

    # ---- quantities used by the recipes ---------------------------------------------------
    @torch.inference_mode()
    def token_log_likelihoods(
        self, sequences: Sequence[np.ndarray], normalization: str
    ) -> list[np.ndarray]:
        """Per-token log p(token_t | tokens_<t) for t = 1..n-1 of each id sequence."""

        def work(batch: Sequence[np.ndarray]) -> list[np.ndarray]:
            hidden, lengths = self.hidden_states(batch)
            out = []
            for rows, ids in zip(self._target_rows(hidden, lengths), batch, strict=True):
                targets = torch.as_tensor(ids[1:], device=self.device)
                out.append(self._target_log_probs(rows, targets, normalization).cpu().numpy())
            return out

        return self.run_batched(sequences, work)

    def _target_log_probs(
        self, rows: torch.Tensor, targets: torch.Tensor, normalization: str
    ) -> torch.Tensor:
        pieces = []
        for lo in range(0, rows.shape[0], self.position_chunk):
            h = rows[lo : lo + self.position_chunk]
            t = targets[lo : lo + self.position_chunk]
            bias = None if self.out_bias is None else self.out_bias[t]
            target_logit = (h * self.out_weight[t]).sum(-1).float()
            if bias is not None:
                target_logit = target_logit + bias.float()
            if normalization == "dna_block":
                norm = torch.logsumexp(self._logits(h, self.dna_weight, self.dna_bias), dim=-1)
            else:
                norm = self.full_logsumexp(h)
            pieces.append(target_logit - norm)
        return torch.cat(pieces)

    @torch.inference_mode()
    def base_log_marginals(self, sequences: Sequence[np.ndarray]) -> list[np.ndarray]:
        """FNS marginals [n_tokens-1, k, 4] (6-mer block softmax) at every target position."""

        def work(batch: Sequence[np.ndarray]) -> list[np.ndarray]:
            hidden, lengths = self.hidden_states(batch)
            out = []
            for rows in self._target_rows(hidden, lengths):
                parts = [
                    self.kmer_base_marginals(
                        self.dna_log_probs(rows[lo : lo + self.position_chunk], "dna_block")
                    )
                    for lo in range(0, rows.shape[0], self.position_chunk)
                ]
                out.append(torch.cat(parts).cpu().numpy())
            return out

        return self.run_batched(sequences, work)

    @torch.inference_mode()
    def next_base_log_probs(
        self, sequences: Sequence[np.ndarray], normalization: str
    ) -> list[np.ndarray]:
        """log P(first base of the next token = b), b in ATCG order, after each sequence: [4]."""

        def work(batch: Sequence[np.ndarray]) -> list[np.ndarray]:
            hidden, lengths = self.hidden_states(batch)
            last = torch.stack([hidden[row, n - 1] for row, n in enumerate(lengths)])
            if normalization == "acgt_strings":
                return list(self._acgt_string_first_base(last).cpu().numpy())
            first = self.kmer_base_marginals(self.dna_log_probs(last, normalization))[:, 0]
            return list(first.cpu().numpy())

        return self.run_batched(sequences, work)

    def _acgt_string_first_base(self, last: torch.Tensor) -> torch.Tensor:
        """The published right-end normaliser: full-vocabulary softmax summed over every pure-ACGT
        vocabulary string by its first base (text tokens included, as `get_vocab()` lists them)."""
        log_z = self.full_logsumexp(last)
        columns = []
        for base in "ATCG":
            ids = torch.as_tensor(self.vocab.acgt_string_ids[base], device=self.device)
            bias = None if self.out_bias is None else self.out_bias[ids]
            logits = self._logits(last, self.out_weight[ids], bias)
            columns.append(torch.logsumexp(logits, dim=-1) - log_z)
        return torch.stack(columns, dim=1)


def verify_output_layer(engine: Engine, ids: np.ndarray, atol: float = 1e-3) -> None:
    """Our body + k-mer rows must reproduce the model's own logits (catches logit scaling,
    a `get_decoder` that is not the body, or a head we do not understand)."""
    with torch.inference_mode():
        batch = torch.as_tensor(ids[None, :], device=engine.device)
        reference = engine.model(input_ids=batch).logits[0, :, engine.vocab.kmer_ids].float()
        hidden, _ = engine.hidden_states([ids])
        ours = engine._logits(hidden[0], engine.dna_weight, engine.dna_bias)
    scale = reference.abs().max().clamp_min(1.0)
    if not torch.allclose(ours, reference, atol=atol * float(scale), rtol=0):
        raise RuntimeError(
            "the model's output layer does not match hidden @ lm_head.T on a probe; "
            "this architecture is not supported by the chunked scorer"
        )
