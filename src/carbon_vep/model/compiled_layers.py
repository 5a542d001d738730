"""The decoder layers compiled with torch.compile (inductor) for the passes without a cache:
`compile_layers` (docs/performance.md#compiled-decoder-layers).

Why: an eager Llama layer runs its two RMSNorms, the rotary embedding, the SwiGLU product and
the residual adds as some twenty element-wise kernels, each a whole pass over the activations
in memory. In the H200 profile of the product's scan job (2026-11-28, run 10) `aten::mul` alone
took 12.7% of the device time, and the kernels other than the matmuls and attention up to 31%.
Inductor fuses them into a few kernels (~3.4x less memory traffic for Carbon-3B by arithmetic,
docs/performance.md#compiled-decoder-layers); the matmuls and attention stay the same library
calls.

Regional: each layer's call is compiled, not the body. The layers run one code object with their
weights as inputs, so Dynamo compiles one graph for all of them (PyTorch's regional compilation
recipe): the cost of one layer, not thirty. The sizes are dynamic from the first compile, so a
job compiles once for every batch and length it runs (a chunk's last, smaller batch of tiles, a
contig's shorter last tile) and once more if a batch of one comes (Dynamo specialises sizes of 1).

Where: passes without a cache only (scan tiles, right-end contexts, whole windows). A pass with a
cache (prefix sharing's suffixes, a chunked prefill, generation) runs eagerly: the cache grows
from pass to pass, and Dynamo would compile again for it. A last layer run for the kept
positions only (model.last_layer) runs eagerly too: it builds a bias object Dynamo cannot trace,
and it is one layer of thirty.

If a compile fails, the pass runs again eagerly and so does the rest of the job: the same
answers, and the log says why. The seconds of the passes that compiled (the first one also
imports Dynamo) and their tokens go to the job record's phase `compile_layers`, so a rate can be
read with and without them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from carbon_vep.model import job_record
from carbon_vep.model.timing import drained

log = logging.getLogger("carbon_vep")
COMPILE_PHASE = "compile_layers"  # the job record's phase of the passes that compiled


class CompiledLayers:
    """One compiled call per decoder layer of `body` (compiled on first use), installed around
    a pass by `run`."""

    def __init__(self, body: Any) -> None:
        self.layers = list(body.layers)
        # made by the first pass that runs them: torch.compile's first call imports Dynamo
        # (~1.8 s on a CPU), part of that pass's compile, and a job with no pass without a cache
        # (Genomic-NIAH) pays nothing
        self.calls: list[Callable] | None = None
        self.failed: str | None = None

    def run(self, forward: Callable[[], Any], eager_last: bool) -> Any:
        """`forward()` with the layers compiled (the last one eager when `eager_last`); after a
        failed compile, `forward()` eagerly, now and for the rest of the job. An out-of-memory
        error is the caller's (it halves its batch)."""
        if self.failed is not None:
            return forward()
        began = time.perf_counter()
        if self.calls is None:  # lazy: nothing compiles before the first pass that runs it
            self.calls = [torch.compile(layer._call_impl, dynamic=True) for layer in self.layers]
        graphs, tokens = _compiled_graphs(), job_record.tokens_counted()
        try:
            with self._installed(eager_last):
                out = forward()
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # noqa: BLE001 - the eager pass gives the same answers
            self.failed = f"{type(error).__name__}: {error}"[:300]
            log.warning(
                "compile_layers: compiling failed, the layers run eagerly (%s)", self.failed
            )
            return forward()
        if _compiled_graphs() > graphs:
            drained(out[0].device)  # the compile's pass timed to its end, not its launch
            seconds = time.perf_counter() - began
            job_record.add_phase(COMPILE_PHASE, seconds, job_record.tokens_counted() - tokens)
        return out

    @contextmanager
    def _installed(self, eager_last: bool) -> Iterator[None]:
        """nn.Module.__call__ runs `_compiled_call_impl` where one is set (what nn.Module.compile
        sets); set for this pass only, so every other pass of the job is eager."""
        chosen = self.layers[:-1] if eager_last else self.layers
        for layer, call in zip(chosen, self.calls or [], strict=False):
            layer._compiled_call_impl = call
        try:
            yield
        finally:
            for layer in self.layers:
                layer._compiled_call_impl = None


def _compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process (a pass that raised it compiled)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
