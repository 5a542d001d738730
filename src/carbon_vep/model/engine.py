"""Forward passes and the quantities the recipes need, without full-vocabulary logit tensors.

The model body gives hidden states; the output layer is applied only where needed:
- the 4**k k-mer rows give FNS marginals and block-normalised log-probs;
- a full-vocabulary normaliser, where a published recipe needs one, is a log-sum-exp computed
  in vocabulary chunks or tiles and never stored as [batch, length, vocabulary]
  (model.normaliser).
A batch of sequences of one length goes to the model without an attention mask (so
scaled-dot-product attention can take its fused causal kernel); mixed lengths are right-padded
with a mask. Results do not depend on the batch size. Reference/alternate windows that differ
only from one token on share the prefix's forward pass through the KV cache
(model.window_groups, many groups a forward pass).

The host waits for the device once per batch, not once per item: index arrays go to the
device without a host synchronisation (`to_device`), per-item sums stay on the device and come
back stacked in one copy (`to_host`). With `upcast_output_layer` every product with the output
layer runs in float32 (bf16 hidden states and weights cast up, as the official Carbon
evaluation's `--upcast_lm_head` does to reduce bf16 rounding of the logits).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from carbon_vep.model import normaliser
from carbon_vep.model.attention import for_planned_passes
from carbon_vep.model.batching import run_sorted
from carbon_vep.model.context import check_context
from carbon_vep.model.last_layer import kept, reading_last
from carbon_vep.model.normaliser import CPU_LSE_TILE
from carbon_vep.model.tokens import DnaVocab, base_codes

T = TypeVar("T")


@dataclass(frozen=True)
class SequenceScore:
    """Sum and count of per-target log-likelihood terms (tokens, or bases for `bp`)."""

    total: float
    count: int

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")


class Engine:
    def __init__(
        self,
        model: Any,
        vocab: DnaVocab,
        device: torch.device,
        batch_size: int,  # ModelSettings.batch_size: windows per forward pass
        vocab_chunk: int = 16384,
        position_chunk: int = 2048,
        *,
        batch_tokens: int = 0,  # ModelSettings.batch_tokens: tokens per forward pass (0: none)
        upcast_output_layer: bool = False,  # ModelSettings.upcast_output_layer
        cpu_tile: tuple[int, int] = CPU_LSE_TILE,  # the CPU normaliser's tile (rows, entries)
    ) -> None:
        self.model, self.vocab, self.device = model, vocab, device
        self.batch_size, self.batch_tokens = batch_size, batch_tokens
        self.vocab_chunk, self.position_chunk = vocab_chunk, position_chunk
        self.cpu_tile = cpu_tile
        head = model.get_output_embeddings()
        self.out_weight = head.weight  # [V, H], used in chunks only
        self.out_bias = getattr(head, "bias", None)
        self.upcast_output_layer = upcast_output_layer
        self.head_dtype = torch.float32 if upcast_output_layer else self.out_weight.dtype
        self.acgt_ids = {
            b: torch.as_tensor(ids, dtype=torch.long, device=device)
            for b, ids in vocab.acgt_string_ids.items()
        }
        self.k = vocab.k
        self.body = model.get_decoder() if hasattr(model, "get_decoder") else model
        self.compiled_layers: Any = None  # a CompiledLayers once compile_layers() is called

    # ---- the output layer's k-mer rows ---------------------------------------------------
    def kmer_rows(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A copy of the output layer's 4**k k-mer rows [4**k, H], in the head's dtype, and
        their bias (None without one): 25 MB for Carbon-3B in bf16."""
        kmer_ids = torch.as_tensor(self.vocab.kmer_ids, device=self.device)
        bias = None if self.out_bias is None else self.out_bias[kmer_ids]
        return self.out_weight[kmer_ids].to(self.head_dtype), bias

    @functools.cached_property
    def _dna_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        # built by the first path that needs it and kept; a path that never does (Genomic-NIAH,
        # the start-up probe, which takes its own copy) holds none: the 25 MB were the whole of
        # NIAH's GPU peak above the official script's on the H200 (2026-11-28)
        return self.kmer_rows()

    @property
    def dna_weight(self) -> torch.Tensor:
        return self._dna_head[0]

    @property
    def dna_bias(self) -> torch.Tensor | None:
        return self._dna_head[1]

    # ---- moving data: no host synchronisation inside a batch ----------------------------
    def to_device(self, values: Any) -> torch.Tensor:
        """Host values on the device without waiting for it (a copy from pageable memory is
        staged at once, so the source may change afterwards; a blocking copy would first wait
        for every kernel queued before it)."""
        return torch.as_tensor(values).to(self.device, non_blocking=True)

    @staticmethod
    def to_host(values: torch.Tensor) -> np.ndarray:
        """One device-to-host copy (the batch's one wait for the device)."""
        return values.cpu().numpy()

    @staticmethod
    def to_host_async(values: torch.Tensor) -> torch.Tensor:
        """A device-to-host copy that the host does not wait for: on a GPU it lands in pinned
        memory once the device gets there (wait on a DeviceClock mark placed after it)."""
        return values.to("cpu", non_blocking=True)

    @property
    def model_name(self) -> str:
        """The loaded model's path or Hub id (its config's `_name_or_path`), for messages."""
        return getattr(self.model.config, "_name_or_path", "") or "the model"

    def check_window_bp(self, window_bp: int, what: str, setting: str) -> None:
        """Refuse, before any forward pass, `what` of `window_bp` bases that need more positions
        than the loaded model has (model.context; `setting`: the config key to lower)."""
        check_context(
            window_bp,
            self.k,
            getattr(self.model.config, "max_position_embeddings", None),
            what=what,
            model=f"model {self.model_name} (max_position_embeddings of its loaded config)",
            setting=setting,
        )

    # ---- forward -------------------------------------------------------------------------
    def forward(
        self,
        ids: Any,
        mask: Any = None,
        cache: Any = None,
        positions: Any = None,
        keep_last: int | None = None,
    ):
        """The body on `ids` ([B, L]; `mask`: a 2D padding mask or a prepared 4D one,
        `positions`: [1 or B, L] position ids, default the cache's length on): the last hidden
        states and the cache. `keep_last` n: only the last n positions' hidden states are
        wanted ([B, n, H]; the last layer runs for them alone where it can,
        model.last_layer), so they must be the positions read in every row (no right
        padding before them). Once `compile_layers` is called, a pass runs the decoder layers'
        steps around attention compiled (model.compiled_layers)."""
        with reading_last(self.body, keep_last) as pruned:

            def body() -> Any:
                return self.body(
                    input_ids=self.to_device(ids),
                    attention_mask=None if mask is None else self.to_device(mask),
                    **({} if positions is None else {"position_ids": positions}),
                    cache=cache,  # transformers >= 5.24 (`past_key_values` goes in 5.40)
                    use_cache=cache is not None,
                )

            if self.compiled_layers is not None:
                out = self.compiled_layers.run(body, eager_last=pruned)
            else:
                out = body()
        return kept(out[0], keep_last), out.cache

    def compile_layers(self) -> None:
        """From now on, passes run the decoder layers' steps around attention compiled
        (model.compiled_layers; ModelSettings.compile_layers)."""
        from carbon_vep.model.compiled_layers import CompiledLayers

        self.compiled_layers = CompiledLayers(self.body)

    @torch.inference_mode()
    def hidden_states(self, batch: Sequence[np.ndarray]) -> tuple[torch.Tensor, list[int]]:
        """Final hidden states [B, T, H] of right-padded id sequences, and their lengths.

        Sequences of one length go without a mask: nothing is padded, and attention then runs
        SDPA's fused causal kernel (with a mask it cannot, and transformers would first read
        the mask back to the host to see whether it may drop it)."""
        lengths = [len(ids) for ids in batch]
        if len(set(lengths)) == 1:
            hidden, _ = self.forward(np.stack(batch))
            return hidden, lengths
        width = max(lengths)
        ids = np.full((len(batch), width), self.vocab.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        hidden, _ = self.forward(ids, mask)
        return hidden, lengths

    def last_hidden_states(self, batch: Sequence[np.ndarray]) -> torch.Tensor:
        """The final hidden state at each id sequence's last token: [B, H]. Sequences of one
        length run the last layer for that position alone (`forward`'s keep_last); mixed
        lengths are padded (`hidden_states`) and read at each one's end."""
        if len({len(ids) for ids in batch}) == 1:
            hidden, _ = self.forward(np.stack(batch), keep_last=1)
            return hidden[:, -1]
        hidden, lengths = self.hidden_states(batch)
        return torch.stack([hidden[row, n - 1] for row, n in enumerate(lengths)])

    def head_product(self, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """hidden @ weight.T in the output layer's dtype (the model's, or float32 when upcast)."""
        dtype = self.head_dtype
        return hidden.to(dtype) @ weight.to(dtype).T

    def logits(self, hidden: torch.Tensor, weight: torch.Tensor, bias: Any) -> torch.Tensor:
        """`head_product`, then softmax maths always in float32 (a bias added in float32)."""
        logits = self.head_product(hidden, weight).float()
        return logits if bias is None else logits + bias.float()

    def full_logsumexp(self, hidden: torch.Tensor) -> torch.Tensor:
        """log Σ_v exp(logit_v) over the whole vocabulary, without holding the logits; hidden
        [N, H] -> [N] (model.normaliser: vocabulary chunks on a GPU, cache-sized tiles on a
        CPU)."""
        return normaliser.full_logsumexp(self, hidden)

    def dna_log_probs(self, hidden: torch.Tensor, normalization: str) -> torch.Tensor:
        """log p(k-mer) for all 4**k k-mers at each position: hidden [N, H] -> [N, 4**k]."""
        logits = self.logits(hidden, self.dna_weight, self.dna_bias)
        if normalization == "dna_block":
            return torch.log_softmax(logits, dim=-1)
        return logits - self.full_logsumexp(hidden)[:, None]

    def kmer_base_marginals(self, kmer_log_probs: torch.Tensor) -> torch.Tensor:
        """FNS marginals log m_j(b): [N, 4**k] -> [N, k, 4] (bases in ATCG order): the
        log-sum-exp over the k-mers with base b at offset j, as one exp of the k-mer block
        (shifted by each row's maximum) and k sums over the other offsets (the same for a row
        whatever the batch; a marginal below e^-87 of the row's top k-mer is clamped there)."""
        lp = kmer_log_probs.float()
        shift = lp.amax(dim=-1, keepdim=True)
        grid = (lp - shift).exp().reshape(-1, *([4] * self.k))
        axes = list(range(1, self.k + 1))
        sums = torch.stack(
            [grid.sum(dim=[a for a in axes if a != j + 1]) for j in range(self.k)], dim=1
        )
        return sums.clamp_min(torch.finfo(torch.float32).tiny).log() + shift[:, :, None]

    def within_token_conditionals(
        self,
        kmer_log_probs: torch.Tensor,
        codes: torch.Tensor,
        marginals: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Exact log P(b_j = b | preceding tokens, b_0..b_{j-1}) for each position: [N, k, 4].

        `codes` [N, k] are the true bases (ATCG codes, -1 for non-ACGT); after a non-ACGT base
        the rest of that token's conditionals are NaN (the condition is undefined). The first
        base's joint is its FNS marginal: pass `marginals` (kmer_base_marginals) to reuse it.
        """
        n = kmer_log_probs.shape[0]
        current = kmer_log_probs.reshape(n, 4, -1)
        rows = torch.arange(n, device=kmer_log_probs.device)
        valid = torch.ones(n, dtype=torch.bool, device=kmer_log_probs.device)
        out = []
        for j in range(self.k):
            if j == 0 and marginals is not None:
                joint = marginals[:, 0].float()
            else:
                joint = torch.logsumexp(current, dim=-1)  # [N, 4] joint with the prefix bases
            conditional = joint - torch.logsumexp(joint, dim=-1, keepdim=True)
            out.append(torch.where(valid[:, None], conditional, torch.nan))
            if j + 1 < self.k:
                code = codes[:, j]
                valid = valid & (code >= 0)
                current = current[rows, code.clamp(min=0)].reshape(n, 4, -1)
        return torch.stack(out, dim=1)

    def run_batched(
        self,
        items: Sequence[T],
        work: Callable[[Sequence[T]], list],
        lengths: Sequence[int] | None = None,
        unit: str = "windows",
        batch_tokens: int | None = None,
    ) -> list:
        """`work` over batches of equal (else sorted) token lengths, results in input order; an
        OOM halves the batch and an item that fails alone gets `None` (batching.py); progress
        logged in `unit`s. `batch_tokens`: a token budget in place of the engine's. A batch
        whose shape the plan holds fewer than CUDNN_PLAN_PASSES times runs without cuDNN's
        attention (model.attention.for_planned_passes)."""
        sizes = list(lengths) if lengths is not None else [len(x) for x in items]  # type: ignore[arg-type]
        budget = self.batch_tokens if batch_tokens is None else batch_tokens
        return run_sorted(
            items, work, self.batch_size, sizes, self.device, unit, budget, for_planned_passes
        )

    # ---- per-target values ---------------------------------------------------------------
    def token_log_probs(self, rows: torch.Tensor, targets: torch.Tensor, normalization: str):
        """log p(target) for each row (hidden state predicting `target`): [N]."""
        pieces = []
        for lo in range(0, rows.shape[0], self.position_chunk):
            h = rows[lo : lo + self.position_chunk]
            t = targets[lo : lo + self.position_chunk]
            target_logit = h.to(self.head_dtype) * self.out_weight[t].to(self.head_dtype)
            target_logit = target_logit.sum(-1).float()
            if self.out_bias is not None:
                target_logit = target_logit + self.out_bias[t].float()
            if normalization == "dna_block":
                norm = torch.logsumexp(self.logits(h, self.dna_weight, self.dna_bias), dim=-1)
            else:
                norm = self.full_logsumexp(h)
            pieces.append(target_logit - norm)
        return torch.cat(pieces)

    def _marginal_terms(self, rows: torch.Tensor) -> torch.Tensor:
        """FNS marginals (6-mer block softmax) [N, k, 4] for each row."""
        parts = [
            self.kmer_base_marginals(
                self.dna_log_probs(rows[lo : lo + self.position_chunk], "dna_block")
            )
            for lo in range(0, rows.shape[0], self.position_chunk)
        ]
        return torch.cat(parts)

    def term_values(
        self,
        rows: torch.Tensor,
        target_ids: np.ndarray,
        target_codes: np.ndarray,
        kind: str,
        normalization: str,
    ) -> tuple[torch.Tensor, np.ndarray]:
        """The log-likelihood terms of hidden `rows` predicting the given targets (left on the
        device) and which they are (flat indices on the host; nothing here waits for the device).

        kind "token": log p(token) of each target, <oov> targets left out under the block
        normaliser (their block-normalised probability is meaningless); kind "bp": log FNS
        marginal of each ACGT base of the target tokens (index target x k + offset). Which terms
        count is decided on the host, from the targets, so selecting them needs no
        device-to-host read.
        """
        if kind == "bp":
            marginals = self._marginal_terms(rows)
            codes = self.to_device(target_codes)
            picked = marginals.gather(2, codes.clamp(min=0)[..., None])[..., 0]
            keep = np.flatnonzero(np.asarray(target_codes).reshape(-1) >= 0)
            return picked.reshape(-1)[self.to_device(keep)], keep
        terms = self.token_log_probs(rows, self.to_device(target_ids), normalization)
        if normalization == "dna_block" and self.vocab.oov_id is not None:
            keep = np.flatnonzero(np.asarray(target_ids) != self.vocab.oov_id)
            return terms[self.to_device(keep)], keep
        return terms, np.arange(len(target_ids))

    def _target_terms(
        self,
        rows: torch.Tensor,
        target_ids: np.ndarray,
        target_codes: np.ndarray,
        kind: str,
        normalization: str,
    ) -> tuple[torch.Tensor, int]:
        """Sum (a 0-d tensor, left on the device) and count of the terms (`term_values`)."""
        if rows.shape[0] == 0:
            return torch.zeros((), device=rows.device), 0
        values, kept = self.term_values(rows, target_ids, target_codes, kind, normalization)
        return values.sum(), len(kept)

    # ---- quantities used by the recipes ---------------------------------------------------
    @torch.inference_mode()
    def sequence_scores(
        self, sequences: Sequence[str], kind: str, normalization: str
    ) -> list[SequenceScore | None]:
        """Score whole sequences (batched, no prefix sharing): token or bp log-likelihood."""
        encoded = [self.vocab.encode(s) for s in sequences]
        codes = [base_codes(s, self.k) for s in sequences]

        def work(batch_index: Sequence[int]) -> list[SequenceScore]:
            hidden, lengths = self.hidden_states([encoded[i] for i in batch_index])
            terms = [
                self._target_terms(
                    hidden[row, : n - 1], encoded[i][1:], codes[i], kind, normalization
                )
                for row, (n, i) in enumerate(zip(lengths, batch_index, strict=True))
            ]
            totals = self.to_host(torch.stack([total for total, _ in terms]))
            return [SequenceScore(float(t), n) for t, (_, n) in zip(totals, terms, strict=True)]

        return self.run_batched(range(len(sequences)), work, [len(e) for e in encoded])

    @torch.inference_mode()
    def next_base_log_probs(
        self, sequences: Sequence[np.ndarray], normalization: str
    ) -> list[np.ndarray | None]:
        """log P(first base of the next token = b), b in ATCG order, after each sequence: [4]."""

        def work(batch: Sequence[np.ndarray]) -> list[np.ndarray]:
            last = self.last_hidden_states(batch)
            if normalization == "acgt_strings":
                return list(self.to_host(self._acgt_string_first_base(last)))
            first = self.kmer_base_marginals(self.dna_log_probs(last, normalization))[:, 0]
            return list(self.to_host(first))

        return self.run_batched(sequences, work, unit="contexts")

    def _acgt_string_first_base(self, last: torch.Tensor) -> torch.Tensor:
        """The published right-end normaliser: full-vocabulary softmax summed over every pure-ACGT
        vocabulary string by its first base (text tokens included, as `get_vocab()` lists them)."""
        log_z = self.full_logsumexp(last)
        columns = []
        for base in "ATCG":
            ids = self.acgt_ids[base]
            bias = None if self.out_bias is None else self.out_bias[ids]
            logits = self.logits(last, self.out_weight[ids], bias)
            columns.append(torch.logsumexp(logits, dim=-1) - log_z)
        return torch.stack(columns, dim=1)


def new_cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.config)
