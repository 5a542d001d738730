"""The full-vocabulary normaliser's reduction on a GPU: each row's maximum and sum of
exponentials of one vocabulary chunk's logits, in one read of them (a Triton kernel).

Why: the normaliser (log Σ exp over 155,776 entries at every scored position) computed a
chunk's logits in bf16, cast them to float32 and took `torch.logsumexp`, which PyTorch runs as
separate maximum, subtract, exponential and sum kernels: ~32 bytes of memory traffic a logit.
In the H200 profile of a centered job (2026-11-28) `aten::logsumexp` alone took 248 ms of
1.74 s of device time, ~1 TB/s. Here the chunk's logits are read once, as they are (2 bytes a
bf16 logit), each lane keeping a running maximum and a sum rescaled to it (the online
log-sum-exp), all in float32; the chunks' (maximum, sum) pairs are combined per row after the
last chunk. The same logits (the bf16 product, as before) and the same float32 maths, summed in
another order: the normaliser moves by float32 rounding only.

Used where Triton is (it comes with PyTorch's CUDA wheels) on a GPU of compute capability 8.0
or later (bf16), once the kernel has reproduced torch's reduction on a small input on that
device (`available`: the first use compiles it; a failure or a mismatch is logged and the job
goes on with torch's operations, as on a CPU). A call of fewer than KERNEL_MIN_ROWS rows runs
torch's operations: the kernel's first use costs more than such calls can save. The kernel is
defined on first use (importing Triton only then), so `TRITON_INTERPRET=1` set before it runs
the kernel on a CPU: how the tests check it without a GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from typing import Any

import torch

log = logging.getLogger("carbon_vep")
BLOCK = 1024  # lanes a row: each loads BLOCK logits an iteration
# Rows from which a call uses the kernel. Its first use in a process costs Triton's import, the
# compiles and the check (`_verified`): in the H200 check of 2026-11-29 a Genomic-NIAH job's
# likelihood phase, whose only device work is this normaliser on at most 16 rows, took 0.48-0.66
# s whatever the context. A row saves ~30 of ~32 bytes of traffic a logit (arithmetic: ~2 us a
# Carbon row at the H200's bandwidth), so a call of fewer rows loses at most ~0.6 ms in torch's
# operations, and a job whose calls are all small (NIAH's values) never starts Triton.
KERNEL_MIN_ROWS = 256
INTERPRET_ENV = "TRITON_INTERPRET"


def available(device: torch.device) -> bool:
    """Whether the kernel runs for tensors on `device`: Triton importable, and under the
    interpreter any device, else a CUDA device of compute capability 8.0 or later on which the
    kernel has reproduced torch's reduction (`_verified`, once a device)."""
    if not _triton_installed():
        return False
    if os.environ.get(INTERPRET_ENV) == "1":
        return True
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 0):
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _verified(torch.device("cuda", index))


@functools.cache
def _triton_installed() -> bool:
    # once a process: `available` is asked for every vocabulary chunk
    return importlib.util.find_spec("triton") is not None


@functools.cache
def _verified(device: torch.device) -> bool:
    """The kernel against torch's reduction on bf16 logits of three widths, on `device`; a
    compile failure or a mismatch is logged, and the kernel is then not used."""
    generator = torch.Generator(device=device).manual_seed(0)
    try:
        for width in (5, 3000, 16384):
            logits = torch.randn(3, width, device=device, generator=generator) * 8
            logits = logits.to(torch.bfloat16)
            maxes, sums = torch.empty(3, device=device), torch.empty(3, device=device)
            _launch(logits, maxes, sums)
            top, expected = _torch_max_and_sumexp(logits)
            if not (torch.equal(maxes, top) and torch.allclose(sums, expected, rtol=1e-5)):
                log.warning("the fused normaliser's kernel disagrees with torch: not used")
                return False
    except Exception as error:  # any failure of the kernel: torch's path instead, said so
        log.warning("the fused normaliser's kernel failed (%s): not used", error)
        return False
    return True


def max_and_sumexp(logits: torch.Tensor, maxes: torch.Tensor, sums: torch.Tensor) -> None:
    """Each row's max m and Σ exp(x - m) of `logits` [N, C] (any float dtype, read as it is)
    into `maxes` and `sums` ([N] float32 views, e.g. a column of [N, chunks]), with the kernel
    where `available` for a call of at least KERNEL_MIN_ROWS rows, else in torch operations."""
    if logits.shape[0] < KERNEL_MIN_ROWS or not available(logits.device):
        top, total = _torch_max_and_sumexp(logits)
        maxes.copy_(top)
        sums.copy_(total)
        return
    _launch(logits, maxes, sums)


def _torch_max_and_sumexp(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same reduction in torch's operations, in float32: where the kernel does not run,
    and what it is checked against."""
    values = logits.float()
    top = values.amax(dim=1)
    return top, (values - top[:, None]).exp().sum(dim=1)


def _launch(logits: torch.Tensor, maxes: torch.Tensor, sums: torch.Tensor) -> None:
    rows, cols = logits.shape
    if rows == 0:
        return
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    _kernel()[(rows,)](
        logits,
        maxes,
        sums,
        cols,
        logits.stride(0),
        maxes.stride(0),
        sums.stride(0),
        BLOCK=BLOCK,
    )


def combine(maxes: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
    """log Σ over chunks of sum_j · exp(max_j): [N, chunks] pairs -> [N] (float32)."""
    top = maxes.amax(dim=1, keepdim=True)
    return top[:, 0] + (sums * (maxes - top).exp()).sum(dim=1).log()


@functools.cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def row_max_sumexp(
        x_ptr,
        max_ptr,
        sum_ptr,
        n_cols,
        row_stride,
        max_stride,
        sum_stride,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0)
        base = x_ptr + row.to(tl.int64) * row_stride
        running_max = tl.full([BLOCK], float("-inf"), tl.float32)
        running_sum = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
            new_max = tl.maximum(running_max, x)
            # a lane that has seen nothing yet keeps max -inf and sum 0 (no -inf - -inf)
            keep = tl.where(running_max == float("-inf"), 0.0, tl.exp(running_max - new_max))
            add = tl.where(x == float("-inf"), 0.0, tl.exp(x - new_max))
            running_sum = running_sum * keep + add
            running_max = new_max
        top = tl.max(running_max, axis=0)
        weight = tl.where(running_max == float("-inf"), 0.0, tl.exp(running_max - top))
        tl.store(max_ptr + row * max_stride, top)
        tl.store(sum_ptr + row * sum_stride, tl.sum(running_sum * weight, axis=0))

    return row_max_sumexp
