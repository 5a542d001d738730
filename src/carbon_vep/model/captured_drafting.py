"""Greedy speculative decoding with both models' steps kept on the device: recovery's
`decode_cache: captured` with a draft model (docs/generation.md#captured-speculative-decoding).

transformers' assisted generation runs the draft on its own dynamic cache, uncompiled, and
decides on the host after every verification how many proposals to keep: on a GPU each draft
step costs a host-bound eager step, as dear as the target's (the H100 and H200 checks, docs/
generation.md), so a draft cannot pay. Here one iteration is fixed in shape and reads nothing
back, so on CUDA it is captured whole as one CUDA graph:

1. the draft is fed the last chosen token and then its own K proposals, one token a step
   (K + 1 steps: the last only puts the K-th proposal in the draft's cache);
2. the target verifies the K + 1 tokens in one pass: its pick after each;
3. n = how many leading proposals equal the target's picks; the new tokens are the target's
   first n + 1 picks (the proposals it agreed with, then its own), exactly the target's greedy
   rollout; all K + 1 picks are written from the output's next column, which moves by n + 1, so
   the extra ones are overwritten by the next iteration;
4. both caches' write positions (transformers' `StaticLayer` keeps its own, on the device) go
   back to the first position not kept, so the next iteration overwrites the rest.

The host queues iterations in runs it knows cannot pass the rollout's end by more than one
iteration (remaining tokens / (K + 1), rounded up), and reads the output column once a run.
One prompt at a time (the rows of a batch would keep different numbers of tokens), as
transformers' assisted generation runs. Elsewhere (a CPU) the same iteration runs eagerly.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from transformers import StaticCache

from carbon_vep.model.captured_decode import (
    WARM_STEPS,
    Choose,
    decode_layers,
    noted,
    stepwise,
    warmed_and_captured,
)
from carbon_vep.model.compiled_layers import CompiledLayers


class CapturedSpeculation:
    """Greedy rollouts of `new_tokens` tokens of one prompt at a time by `target`, with
    `proposals` tokens a step proposed by `draft`; each token picked by `choose`, the draft's
    proposals by `draft_choose` (the same decoder on the draft's logits). `slots`: the longest
    prompt + new tokens − 1 (room for what an iteration may write past the end is added).
    `accelerate` (default: on CUDA) compiles both models' layer steps (model.captured_decode:
    `decode_layers`) and captures an iteration; `clock` gets each prompt's replayed iterations
    as one span of its tokens. `prompts`, `iterations`, `proposed` and `accepted` count every
    prompt so far."""

    def __init__(
        self,
        target: Any,
        draft: Any,
        slots: int,
        new_tokens: int,
        proposals: int,
        choose: Choose,
        draft_choose: Choose | None = None,
        accelerate: bool | None = None,
        clock: Any = None,
    ) -> None:
        self.target, self.draft, self.choose = target, draft, choose
        self.draft_choose = draft_choose or choose
        self.new_tokens, self.k, self.clock = new_tokens, proposals, clock
        self.accelerate = target.device.type == "cuda" if accelerate is None else accelerate
        self.how: dict[str, Any] = {}
        if not self.accelerate:
            self.how["step"] = f"eager on {target.device.type} (no CUDA graph)"
        self.layers = self._compiled() if self.accelerate else None
        self.forwards = (target, draft)
        if self.layers is not None:
            self.forwards = (stepwise(target, self.layers[0]), stepwise(draft, self.layers[1]))
        room = 2 * proposals + 2  # what a last run may write past the end
        device = target.device
        self.caches = [
            StaticCache(config=model.config, max_cache_len=slots + room)
            for model in (target, draft)
        ]
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.last = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.out = torch.zeros((1, new_tokens + room), dtype=torch.long, device=device)
        self.kept = torch.zeros(1, dtype=torch.long, device=device)  # proposals accepted
        self.offsets = torch.arange(proposals + 1, device=device)
        self.slot = torch.arange(slots + room, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.iterations = self.prompts = 0

    def _compiled(self) -> tuple[CompiledLayers, CompiledLayers]:
        return decode_layers(self.target), decode_layers(self.draft)

    @property
    def accepted(self) -> int:
        return int(self.kept)

    @property
    def proposed(self) -> int:
        return self.k * self.iterations

    def start(self, ids: torch.Tensor) -> None:
        """Both prefills (uncompiled) and the target's first token."""
        where = torch.arange(ids.shape[1], device=ids.device)
        for cache in self.caches:
            cache.reset()
        self.draft(input_ids=ids, cache=self.caches[1], cache_position=where, logits_to_keep=1)
        logits = self.target(
            input_ids=ids, cache=self.caches[0], cache_position=where, logits_to_keep=1
        ).logits
        first = self.choose(logits[:, -1].float())
        self.out[:, 0] = first
        self.last[:, 0] = first
        self.position.fill_(ids.shape[1])
        self.column.fill_(1)

    def iterate(self) -> None:
        """One proposal and verification on device state only (what a capture records)."""
        target, draft = self.forwards
        token, proposed = self.last, []
        for j in range(self.k + 1):  # the last step only caches the K-th proposal
            logits = draft(input_ids=token, cache=self.caches[1], cache_position=self.position + j)
            if j < self.k:
                token = self.draft_choose(logits.logits[:, -1].float()).view(1, 1)
                proposed.append(token)
        fed = torch.cat([self.last, *proposed], dim=1)
        where = self.position + self.offsets
        # the verification's mask, built here: transformers' own reads the first position
        # back to the host for a pass of several tokens on a static cache (masking_utils)
        visible = (self.slot <= where[:, None])[None, None]  # [1, 1, K + 1, slots]
        logits = target(
            input_ids=fed, cache=self.caches[0], cache_position=where, attention_mask=visible
        ).logits
        picks = self.choose(logits[0].float())  # [K + 1]: the target's token after each
        agree = torch.cat(proposed, dim=1)[0] == picks[: self.k]
        n = agree.long().cumprod(0).sum()  # leading proposals the target agrees with
        self.out.index_copy_(1, self.column + self.offsets, picks.view(1, -1))
        self.last.copy_(picks.gather(0, n.view(1)).view(1, 1))
        self.column.add_(n + 1)
        self.position.add_(n + 1)
        self.kept.add_(n)
        for cache in self.caches:
            for layer in cache.layers:  # back to the first position not kept
                layer.cumulative_length.copy_(self.position.view(()))

    def generate(self, ids: torch.Tensor) -> torch.Tensor:
        """The new ids [1, new_tokens] of one prompt `ids` [1, length]."""
        self.start(ids)
        self.prompts += 1
        done, began, counted = 1, None, 1
        while done < self.new_tokens:
            run = math.ceil((self.new_tokens - done) / (self.k + 1))
            if self.accelerate and self.graph is None:
                warm = self._capture(run)
                run -= warm
                self.iterations += warm
                counted = done = int(self.column)
            if began is None:
                began = time.perf_counter()
            for _ in range(run):
                self.graph.replay() if self.graph is not None else self.iterate()
            self.iterations += run
            done = int(self.column)  # one read a run
        if self.clock is not None and began is not None and done > counted:
            tokens = min(done, self.new_tokens) - counted  # a step: a token kept
            self.clock.span(1, tokens, time.perf_counter() - began)
        return self.out[:, : self.new_tokens].clone()

    def _capture(self, run: int) -> int:
        """Up to WARM_STEPS real iterations (the compiles in them), then one captured
        (warmed_and_captured); the iterations run."""
        warm = min(WARM_STEPS, run)
        label = "an iteration captured as a CUDA graph, replayed"
        self.graph = warmed_and_captured(self.iterate, warm, self.how, label)
        noted(self.how, *self.layers)
        self.accelerate = self.graph is not None
        return warm
