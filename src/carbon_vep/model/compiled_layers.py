"""The decoder layers' steps around attention compiled with torch.compile (inductor), in every
pass: `compile_layers` (docs/performance.md#compiled-decoder-layers).

Why: an eager Llama layer runs its two RMSNorms, the rotary embedding, the SwiGLU product and
the residual adds as some twenty element-wise kernels, each a whole pass over the activations
in memory. In the H200 profile of the product's scan job (2026-11-28, run 10) `aten::mul` alone
took 12.7% of the device time, and the kernels other than the matmuls and attention up to 31%.
Inductor fuses them into a few kernels (~3.4x less memory traffic for Carbon-3B by arithmetic,
docs/performance.md#compiled-decoder-layers), and a host-bound pass launches fewer kernels; the
matmuls stay the same library calls.

How: a Llama layer runs as its three steps (model.llama_layer): its attention inputs (input
norm, projections, rotary embedding) and its output projection and MLP half compiled, and
between them, eagerly, the cache's update and the attention function, whatever the mask. So a
pass with a cache compiles as one without: window groups' prefixes and suffixes (the centered
recipe), a chunked or whole prefill (Genomic-NIAH), scan tiles, right-end contexts and whole
windows alike. Compiling the whole layer instead (tried first, 2026-11-29) compiled a graph a
layer and a pass kind once a cache was in it (Dynamo specialises on the cache's per-layer
state), and hit the recompile limit long before Carbon-3B's 30 layers.

Regional: the two steps are functions of the layer, whose weights are inputs, so Dynamo
compiles one graph for each, for all layers (PyTorch's regional compilation recipe). The sizes
are dynamic from the first compile, so a job compiles each step once for every batch and length
it runs, and once more for a batch of one (Dynamo specialises sizes of 1). A pass of one token
a row (a decode step), a pass inside a CUDA graph's capture, a layer of another class and a
last layer run for the kept positions only (model.last_layer) stay eager, except for the
captured decode loops (`decode_steps`, model.captured_decode): there one-token passes compile in
the warm steps before the capture, and the capture records the kernels they compiled; a
recompile inside the capture is refused (it would be recorded with it), which fails the
capture, and the loop runs its steps eagerly instead.

If a compile fails, the step runs eagerly in place (the cache updated once, the same answers),
and so does every step after it in the job; the log says why. An out-of-memory error is the
caller's (its batcher halves the batch). The seconds of the passes that compiled (the first
one also imports Dynamo) and their tokens go to the job record's phase `compile_layers`, so a
rate can be read with and without them.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from carbon_vep.model import job_record
from carbon_vep.model.llama_layer import attend, attention_inputs, is_llama_layer, output_and_mlp
from carbon_vep.model.timing import drained

log = logging.getLogger("carbon_vep")
COMPILE_PHASE = "compile_layers"  # the job record's phase of the passes that compiled


class CompiledLayers:
    """The decoder layers of `body` run as their steps, two of them compiled (on first use),
    within a pass by `run`; with `decode_steps` one-token passes and captures too (the
    captured decode loops). `seconds`: the passes that compiled, as the job record has them."""

    def __init__(self, body: Any, decode_steps: bool = False) -> None:
        self.layers = list(body.layers)
        self.decode_steps = decode_steps
        self.seconds = 0.0
        # made by the first pass that runs them: torch.compile's first call imports Dynamo
        # (~1.8 s on a CPU), part of that pass's compile
        self.steps: tuple[Callable, Callable] | None = None
        other = next((type(x).__name__ for x in self.layers if not is_llama_layer(x)), None)
        self.failed: str | None = None if other is None else f"{other} is not a Llama layer"
        if other is not None:
            log.warning("compile_layers: the layers run eagerly (%s)", self.failed)

    def run(self, forward: Callable[[], Any], eager_last: bool) -> Any:
        """`forward()` with the layers run as their steps (the last one as it is when
        `eager_last`: model.last_layer has it), the pass timed to the job record's compile
        phase where it compiled."""
        if self.failed is not None:
            return forward()
        began = time.perf_counter()
        if self.steps is None:  # lazy: nothing compiles before the first pass that runs it
            self.steps = (
                torch.compile(attention_inputs, dynamic=True),
                torch.compile(output_and_mlp, dynamic=True),
            )
        graphs, tokens = _compiled_graphs(), job_record.tokens_counted()
        with self._installed(eager_last):
            out = forward()
        if _compiled_graphs() > graphs:
            drained(out[0].device)  # the compile's pass timed to its end, not its launch
            seconds = time.perf_counter() - began
            self.seconds += seconds
            job_record.add_phase(COMPILE_PHASE, seconds, job_record.tokens_counted() - tokens)
        return out

    @contextmanager
    def _installed(self, eager_last: bool) -> Iterator[None]:
        """Each chosen layer's forward is `_stepwise_forward` for this pass only (an instance
        attribute, as model.last_layer sets its own), so every other call stays the class's."""
        chosen = self.layers[:-1] if eager_last else self.layers
        for layer in chosen:
            layer.forward = functools.partial(_stepwise_forward, self, layer)
        try:
            yield
        finally:
            for layer in chosen:
                del layer.forward

    def step(self, which: int, layer: Any, *args: torch.Tensor) -> torch.Tensor:
        """Step `which` (0: attention inputs, 1: output and MLP) of `layer`, compiled unless
        compiling failed, or, without `decode_steps`, the pass decodes one token a row or a
        CUDA graph is being captured (a compile there would be captured with it)."""
        eager = (attention_inputs, output_and_mlp)[which]
        capturing = _capturing()  # asked once a step: 60 steps a Carbon-3B pass
        one_token_or_capture = args[0].shape[1] == 1 or capturing
        if self.failed is not None or (one_token_or_capture and not self.decode_steps):
            return eager(layer, *args)
        if capturing:  # only what the warm steps compiled; an error fails the capture
            with torch.compiler.set_stance("fail_on_recompile"):
                return self.steps[which](layer, *args)  # type: ignore[index]
        try:
            return self.steps[which](layer, *args)  # type: ignore[index] - set by `run`
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # noqa: BLE001 - the eager step gives the same answers
            self.failed = f"{type(error).__name__}: {error}"[:300]
            log.warning(
                "compile_layers: compiling failed, the layers run eagerly (%s)", self.failed
            )
            return eager(layer, *args)


def _stepwise_forward(
    compiled: CompiledLayers,
    layer: Any,
    hidden_states: torch.Tensor,
    attention_mask: Any = None,
    cache: Any = None,
    position_embeddings: Any = None,
    **kwargs: Any,
) -> torch.Tensor:
    """`LlamaDecoderLayer.forward` as its steps (model.llama_layer), the two around attention
    through `compiled.step`; the other arguments (position ids, use_cache, ...) go on to the
    attention function, as the layer passes them."""
    cos, sin = position_embeddings
    queries, keys, values = compiled.step(0, layer, hidden_states, cos, sin)
    attended = attend(layer, queries, keys, values, attention_mask, cache, kwargs)
    return compiled.step(1, layer, attended, hidden_states)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process (a pass that raised it compiled)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
