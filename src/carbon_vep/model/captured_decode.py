"""Greedy decoding with the decode step kept on the device: recovery's `decode_cache: captured`
(docs/generation.md#captured-decode-steps).

transformers' `generate`, even on its static cache with the step compiled, runs each step's
input preparation, mask, logits processors, argmax and stop check in Python, and the stop
check reads a flag back from the device (StopCheck): the host waits for every step, so a step
costs the device's time and the host's one after the other. Our rollouts are forced to their
full length (min = max new tokens), so nothing has to come back before a batch ends:

- the cache is transformers' `StaticCache` (its write position is a device counter), sized once;
- a step reads and writes device tensors only: the token fed and its position in, the
  decoder's choice (`Choose`: the published suppression and argmax, or an FNS decoder) and the
  output's next column out, all in place, so replaying the same step advances the rollout;
- on CUDA the decoder layers' steps around attention are compiled (model.compiled_layers, its
  `decode_steps`: one graph a step for all layers, compiled in the warm steps; attention and
  the cache's update eager) and the step is captured once per batch size as a CUDA graph,
  which the loop replays: the host only queues replays and reads the new tokens once a batch.
  If a compile fails that step runs eagerly in place, if the capture fails the steps run
  eagerly: the same answers, and `how` says what ran. Elsewhere (a CPU) the same step runs
  eagerly.

Not the whole forward compiled: Dynamo then traces and inductor lowers every layer unrolled in
one graph, 30 for Carbon-3B. On an H200 (2026-11-29) a captured job so compiled had not
finished compile, capture and 127 steps in ~165 s; on a CPU at 30 layers its compile took
3.2x the regional one's (docs/generation.md#captured-decode-steps). The capture removes the
host's cost either way; the compile only fuses each layer's element-wise kernels.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from transformers import StaticCache

from carbon_vep.model.compiled_layers import CompiledLayers
from carbon_vep.model.timing import drained

Choose = Callable[[torch.Tensor], torch.Tensor]  # float32 scores [rows, vocab] -> ids [rows]
WARM_STEPS = 2  # real steps on a side stream before a capture (CUDA's rule; compiles done)
KEPT_BATCH_SIZES = 2  # steppers kept at once (a job's full batches and a remainder)
COMPILED = "the decoder layers' steps compiled (torch.compile, inductor; a graph a step for all)"


def warm_on_a_side_stream(step: Callable[[], None], times: int) -> None:
    """`step` run for real `times` times on a side stream, as CUDA asks before a capture
    (kernels chosen, a compile done)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(times):
            step()
    torch.cuda.current_stream().wait_stream(side)


def captured(step: Callable[[], None]) -> torch.cuda.CUDAGraph:
    """`step` recorded (not run) as a CUDA graph, to be replayed."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def warmed_and_captured(
    step: Callable[[], None], warm: int, how: dict[str, Any], label: str
) -> torch.cuda.CUDAGraph | None:
    """`warm` real runs of `step` (a compile's passes among them), then `step` captured: the
    graph, or None where the capture failed (eager steps give the same answers; `how["step"]`
    says why)."""
    warm_on_a_side_stream(step, warm)
    try:
        graph = captured(step)
    except Exception as error:  # noqa: BLE001 - eager steps give the same answers
        how["step"] = f"eager (capture failed: {type(error).__name__}: {error})"[:300]
        return None
    how.setdefault("step", label)
    return graph


def decode_layers(model: Any) -> CompiledLayers:
    """`model`'s decoder layers with their steps around attention compiled once for all of
    them, one-token passes and captures included (CompiledLayers' `decode_steps`)."""
    return CompiledLayers(model.get_decoder(), decode_steps=True)


def stepwise(model: Any, layers: CompiledLayers) -> Callable:
    """`model`'s forward with its layers run as `layers`' steps."""
    return lambda **inputs: layers.run(lambda: model(**inputs), eager_last=False)


def noted(how: dict[str, Any], *compiled: CompiledLayers) -> None:
    """What compiled (`how["forward"]`: the first failure of any model's layers, which then
    run eagerly) and the seconds of the passes that compiled (`how["compile_s"]`)."""
    failed = next((c.failed for c in compiled if c.failed is not None), None)
    how["forward"] = COMPILED if failed is None else f"uncompiled ({failed})"[:300]
    how["compile_s"] = round(sum(c.seconds for c in compiled), 3)


class _Stepper:
    """One batch size's cache, device state and step (captured once on CUDA)."""

    def __init__(self, forward: Callable, config: Any, rows: int, slots: int, new: int, device):
        self.forward, self.rows = forward, rows
        self.cache = StaticCache(config=config, max_cache_len=slots)
        self.token = torch.zeros((rows, 1), dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.column = torch.zeros(1, dtype=torch.long, device=device)
        self.out = torch.zeros((rows, new), dtype=torch.long, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.choose: Choose | None = None

    def start(self, model: Any, ids: torch.Tensor, choose: Choose) -> None:
        """The prompt's prefill (uncompiled: large matmuls) and the first new token."""
        self.choose = choose
        self.cache.reset()
        length = ids.shape[1]
        where = torch.arange(length, device=ids.device)
        logits = model(input_ids=ids, cache=self.cache, cache_position=where, logits_to_keep=1)
        first = choose(logits.logits[:, -1].float())
        self.out[:, 0] = first
        self.token[:, 0] = first
        self.position.fill_(length)
        self.column.fill_(1)

    def step(self) -> None:
        """One decode step on device state only (what a capture records)."""
        logits = self.forward(input_ids=self.token, cache=self.cache, cache_position=self.position)
        self.token.copy_(self.choose(logits.logits[:, -1].float()).unsqueeze(1))
        self.out.index_copy_(1, self.column, self.token)
        self.position.add_(1)
        self.column.add_(1)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.graph.replay() if self.graph is not None else self.step()


class CapturedDecoder:
    """Greedy rollouts of `new_tokens` tokens for batches of equal-length prompts, on a static
    cache of `slots` positions (the longest prompt + new tokens − 1), each token picked by
    `choose`. `accelerate` (default: on CUDA) compiles the layers' steps and captures the step;
    a `clock` (suite.rollouts.StepClock) gets each batch's replayed steps as one span."""

    def __init__(
        self,
        model: Any,
        slots: int,
        new_tokens: int,
        choose: Choose,
        accelerate: bool | None = None,
        clock: Any = None,
    ) -> None:
        self.model, self.slots, self.new_tokens, self.choose = model, slots, new_tokens, choose
        self.accelerate = model.device.type == "cuda" if accelerate is None else accelerate
        self.clock = clock
        # what ran: "forward", "step" -> how, and why not; "compile_s" -> seconds
        self.how: dict[str, Any] = {}
        if not self.accelerate:
            self.how["step"] = f"eager on {model.device.type} (no CUDA graph)"
        self.layers = self._compiled() if self.accelerate else None
        self.forward = model if self.layers is None else stepwise(model, self.layers)
        self._steppers: OrderedDict[int, _Stepper] = OrderedDict()

    def _compiled(self) -> CompiledLayers:
        return decode_layers(self.model)

    def generate(self, ids: torch.Tensor) -> torch.Tensor:
        """The new ids [rows, new_tokens] of prompts `ids` [rows, length] (one length)."""
        stepper = self._stepper(ids.shape[0], ids.device)
        stepper.start(self.model, ids, self.choose)
        steps = self.new_tokens - 1  # the last new token is never fed back
        if self.accelerate and stepper.graph is None and steps > 0:
            steps -= self._capture(stepper, min(WARM_STEPS, steps))
        drained(ids.device)
        began = time.perf_counter()
        stepper.run(steps)
        drained(ids.device)
        if self.clock is not None and steps > 0:
            self.clock.span(ids.shape[0], steps, time.perf_counter() - began)
        return stepper.out.clone()

    def _capture(self, stepper: _Stepper, warm: int) -> int:
        """`warm` real steps (a new batch size's compile in them), then the step captured
        (warmed_and_captured); the steps run."""
        label = "captured as a CUDA graph, replayed"
        stepper.graph = warmed_and_captured(stepper.step, warm, self.how, label)
        noted(self.how, self.layers)
        self.accelerate = stepper.graph is not None
        return warm

    def _stepper(self, rows: int, device: torch.device) -> _Stepper:
        if rows in self._steppers:
            self._steppers.move_to_end(rows)
            return self._steppers[rows]
        while len(self._steppers) >= KEPT_BATCH_SIZES:
            self._steppers.popitem(last=False)
        stepper = _Stepper(
            self.forward, self.model.config, rows, self.slots, self.new_tokens, device
        )
        self._steppers[rows] = stepper
        return stepper
