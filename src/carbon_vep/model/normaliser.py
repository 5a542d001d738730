"""The output layer's full-vocabulary normaliser: log Σ_v exp(logit_v) for each row of hidden
states, computed without ever holding the [rows, vocabulary] logits (the published recipes'
log-softmax needs it; model.engine's `full_logsumexp`). On a GPU in vocabulary chunks of all the
rows at once, each chunk reduced in one read by model.lse_kernel; on a CPU in cache-sized tiles,
one Python thread per torch thread. Both give a row's value independently of the other rows.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import torch

from carbon_vep.model import lse_kernel

if TYPE_CHECKING:
    from carbon_vep.model.engine import Engine

# The CPU's tile (rows, vocabulary entries): 2 MB of float32 logits, within one core's L2 cache
# on the machines measured (docs/performance.md)
CPU_LSE_TILE = (256, 2048)


def full_logsumexp(engine: Engine, hidden: torch.Tensor) -> torch.Tensor:
    """log Σ_v exp(logit_v) over `engine`'s whole vocabulary; hidden [N, H] -> [N]. On a CPU
    in cache-sized tiles (`in_tiles`); on a GPU in vocabulary chunks of all the rows at once
    (`in_vocabulary_chunks`: few, large kernels)."""
    if hidden.device.type == "cpu":
        return in_tiles(engine, hidden)
    return in_vocabulary_chunks(engine, hidden)


def in_vocabulary_chunks(engine: Engine, hidden: torch.Tensor) -> torch.Tensor:
    """The GPU's full-vocabulary log-sum-exp: each vocabulary chunk's logits (as `logits`
    makes them: the product in the head's dtype, a bias added in float32) reduced to each
    row's (maximum, sum of exponentials) by model.lse_kernel (where Triton runs, in one
    read: two kernels a chunk where a cast and torch's log-sum-exp took seven), the chunks'
    pairs combined at the end."""
    rows = hidden.to(engine.head_dtype)
    vocab_rows = engine.out_weight.shape[0]
    starts = range(0, vocab_rows, engine.vocab_chunk)
    maxes = torch.empty(rows.shape[0], len(starts), device=rows.device)
    sums = torch.empty_like(maxes)
    for j, lo in enumerate(starts):
        hi = min(lo + engine.vocab_chunk, vocab_rows)
        weight = engine.out_weight[lo:hi]
        if engine.out_bias is None:  # read by the kernel in the head's dtype, not cast
            chunk = engine.head_product(rows, weight)
        else:
            chunk = engine.logits(rows, weight, engine.out_bias[lo:hi])
        lse_kernel.max_and_sumexp(chunk, maxes[:, j], sums[:, j])
    return lse_kernel.combine(maxes, sums)


def in_tiles(engine: Engine, hidden: torch.Tensor) -> torch.Tensor:
    """The CPU's full-vocabulary log-sum-exp, in tiles of the engine's `cpu_tile` (rows x
    vocabulary entries, CPU_LSE_TILE: 2 MB of float32 logits, within a core's cache from the
    product to the sum): each tile's logits written into its thread's buffer, shifted by their row
    maxima and exponentiated in place, and summed; the tiles' (maximum, sum) pairs combined
    per row at the end. The same value as one log-softmax's normaliser to float rounding,
    and a row's value does not depend on the other rows (the vocabulary tiles are fixed).

    The row tiles go to one Python thread per torch thread, each running its ops on one
    core (torch's thread count is 1 during the call, restored after): no op waits for a
    second core, so a core taken by another process slows the call by its share instead of
    stalling every op. Measured 4x faster on 2 idle cores than vocabulary chunks of all the
    rows (docs/performance.md), which allocate each chunk's logits (up to 134 MB) afresh and
    stream them through memory five times."""
    tile_rows, tile_vocab = engine.cpu_tile
    n, vocab_rows = hidden.shape[0], engine.out_weight.shape[0]
    chunks = range(0, vocab_rows, tile_vocab)
    maxes = torch.empty(n, len(chunks))
    sums = torch.empty(n, len(chunks))
    in_place = engine.head_dtype == engine.out_weight.dtype == torch.float32
    rows_all = hidden.detach().to(engine.head_dtype)
    local = threading.local()

    @torch.inference_mode()  # grad mode is per thread: no autograd in the workers either
    def row_tile(lo: int) -> None:
        rows = rows_all[lo : lo + tile_rows]
        if in_place and not hasattr(local, "buffer"):
            local.buffer = torch.empty(min(n, tile_rows) * tile_vocab)
        for j, start in enumerate(chunks):
            stop = min(start + tile_vocab, vocab_rows)
            bias = None if engine.out_bias is None else engine.out_bias[start:stop]
            if in_place:
                tile = local.buffer[: rows.shape[0] * (stop - start)].view(rows.shape[0], -1)
                torch.mm(rows, engine.out_weight[start:stop].T, out=tile)
                if bias is not None:
                    tile.add_(bias.float())
            else:
                tile = engine.logits(rows, engine.out_weight[start:stop], bias)
            top = tile.amax(dim=1, keepdim=True)
            torch.sum(tile.sub_(top).exp_(), dim=1, out=sums[lo : lo + rows.shape[0], j])
            maxes[lo : lo + rows.shape[0], j] = top[:, 0]

    starts = range(0, n, tile_rows)
    threads = torch.get_num_threads()
    if threads == 1 or len(starts) == 1:
        for lo in starts:
            row_tile(lo)
    else:
        torch.set_num_threads(1)
        try:
            with ThreadPoolExecutor(min(threads, len(starts))) as pool:
                list(pool.map(row_tile, starts))
        finally:
            torch.set_num_threads(threads)
    return torch.logsumexp(maxes + sums.log(), dim=1)
