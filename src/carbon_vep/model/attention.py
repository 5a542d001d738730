"""Attention for a prompt prefilled in chunks, as a transformers attention implementation.

A chunk of a long prompt attends to the cache before it and causally to itself: query i of q
sees keys 0 .. kv - q + i, a causal mask aligned to the lower right. transformers' `sdpa`
builds that mask as a boolean (chunk x context) tensor, and a mask rules out PyTorch's fused
flash kernel: on an H100, Genomic-NIAH at 128k ran at half the whole-prompt speed with the
default 8,192-token chunks (docs/gpu.md). PyTorch's `causal_lower_right` bias reaches the flash
kernel (whose causal mode is lower-right aligned) or the memory-efficient one without ever
holding the mask.

`LOWER_RIGHT_SDPA` gives exactly that case (no padding mask, a plain causal model, more than
one query, the queries being the last keys) this bias; every other case (padding, one query
token, a prompt without a cache) is transformers' own `sdpa`, mask and kernel alike.

`without_cudnn` keeps SDPA off its cuDNN kernel for passes whose shapes change from batch to
batch (the window groups) or come once (the start-up probe): cuDNN builds an execution plan for
every new shape, ~0.5 s of host time each on the H200 (docs/gpu.md, the prefix-sharing
section). `for_planned_passes` applies the same rule to batches cut by model.batching: cuDNN
only for a shape the job will run at least `CUDNN_PLAN_PASSES` times.

`branch_mask` lets one pass carry several short runs of tokens after a cache, each seeing the
cache and its own earlier tokens only (Genomic-NIAH's guess at the generation and both value
continuations, suite.niah). Under `LOWER_RIGHT_SDPA` such a mask, with few queries, runs with
the grouped query heads packed into the query rows (`PACKED_QUERIES`): the keys and values are
read as cached, never repeated per query head, which transformers' sdpa does for any mask on
CUDA (a transient copy of a layer's keys and values times the group: Carbon-3B has 8 query
heads a key head, 4 key heads of 96, so 1.6 GB a layer at 128k tokens, against the 9.4 MB of
the packed mask for 9 queries).

A decode step on a static cache (recovery's `decode_cache: static` and `captured`) is one query
a row under a mask a row (the cache's empty slots hidden). transformers' sdpa packs that case
itself in eager mode, but not while torch.compile traces it, and the CUDA paths compile the
step: there it repeated every layer's whole cache per query head each step (Carbon-3B: 8x the
cache written and read again; docs/generation.md). `LOWER_RIGHT_SDPA` packs it in both, as
transformers' eager code does (the same reshape, the mask as it is).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import CausalBias, causal_lower_right

LOWER_RIGHT_SDPA = "sdpa_lower_right"
# Passes of one shape from which cuDNN's attention plan pays (arithmetic, not measured): a plan
# cost 0.36-0.5 s of host time on the H200 (docs/gpu.md); a right-end batch at the profiles'
# budget (32 contexts of 4,001 tokens, Carbon-3B) computes ~9.4e13 FLOP of attention, ~0.27 s
# at ~350 TFLOP/s (PyTorch's flash kernel on Hopper, others' figures) and ~0.18 s if cuDNN's
# kernel runs it 1.5x faster: ~0.09 s saved a pass, 4-6 passes to pay a plan.
CUDNN_PLAN_PASSES = 4
# Query tokens of a pass up to which a boolean mask runs with the grouped heads packed into the
# query rows (the mask repeated per head of a group: groups x queries x keys booleans).
PACKED_QUERIES = 64


def register() -> str:
    """Make `LOWER_RIGHT_SDPA` a name transformers accepts (`attn_implementation=`); its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(LOWER_RIGHT_SDPA, chunk_attention)
    AttentionMaskInterface.register(LOWER_RIGHT_SDPA, chunk_mask)
    return LOWER_RIGHT_SDPA


def without_cudnn() -> Any:
    """A context in which scaled-dot-product attention chooses among flash, memory-efficient
    and the plain kernel but not cuDNN's. A cuDNN plan is built for each new (batch, query,
    key) shape and cached; passes of one fixed shape (the scan's tiles) pay it once, but
    window groups make new shapes batch after batch: in the H200 check's profile of a centered
    job (2026-11-28), 4 passes of 3 shapes (the probe's, a prefix, a suffix) spent 1.43 s of
    host time in cuDNN attention against 81 ms of its kernels. The CPU has no cuDNN kernel: no
    change there."""
    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )


def for_planned_passes(passes: int) -> AbstractContextManager:
    """The attention context of a batch whose shape the job's plan holds `passes` times
    (model.batching.in_batches' shape_context): SDPA's own choice, cuDNN included, from
    CUDNN_PLAN_PASSES on; below it (the last, partial batch of a run; the single batch of a
    small job) `without_cudnn`, so no plan is built for a shape that cannot pay it back."""
    return nullcontext() if passes >= CUDNN_PLAN_PASSES else without_cudnn()


def takes_branch_masks(model: Any) -> bool:
    """Whether `model` runs a `branch_mask` pass without copying its keys and values: its
    attention is `LOWER_RIGHT_SDPA` (FlashAttention-2 takes no such mask; transformers' sdpa
    and eager repeat the keys and values per query head)."""
    return getattr(model.config, "_attn_implementation", None) == LOWER_RIGHT_SDPA


def branch_mask(
    cached: int, branches: Sequence[int], device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention mask [1, 1, q, cached + q] (True: attend) and positions [1, q] of runs of
    `branches` tokens fed in one pass after a cache of `cached` tokens, q = sum(branches): each
    token sees the whole cache and the tokens before it in its own run, none of another run,
    and each run's positions continue the cache's as if it were alone."""
    lengths = torch.as_tensor(list(branches))
    run = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    step = torch.cat([torch.arange(int(n)) for n in lengths])
    own = (run[:, None] == run[None, :]) & (step[:, None] >= step[None, :])
    seen = torch.ones(len(run), cached, dtype=torch.bool, device=device)
    mask = torch.cat([seen, own.to(device, non_blocking=True)], dim=1)
    return mask[None, None], (cached + step)[None].to(device, non_blocking=True)


def chunk_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: Any = 0,
    kv_offset: Any = 0,
    mask_function: Any = None,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> Any:
    """The lower-right causal bias where it is the whole mask, else transformers' sdpa mask."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    mask_function = mask_function or causal_mask_function
    if (
        attention_mask is None
        and mask_function is causal_mask_function
        and kwargs.get("local_size") is None
        and kwargs.get("allow_is_causal_skip", True)
        and isinstance(q_offset, int)
        and kv_offset == 0
        and q_offset > 0
        and q_length > 1
        and q_offset + q_length == kv_length
    ):
        return causal_lower_right(q_length, kv_length)
    return sdpa_mask(
        batch_size=batch_size,
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        **kwargs,
    )


def chunk_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Scaled-dot-product attention under the lower-right bias ([B, heads, q, d] in, [B, q,
    heads, d] out, as transformers' attention functions); any other mask: transformers' sdpa."""
    if not isinstance(attention_mask, CausalBias):
        if _packs(module, query, attention_mask, dropout):
            return _packed_attention(module, query, key, value, attention_mask, scaling)
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1 and not _flash(query, key, value):
        # Only the flash kernel reads fewer key/value heads than query heads; the
        # memory-efficient one needs them repeated (transformers' sdpa does the same).
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
        groups = 1
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        enable_gqa=groups > 1,
    )
    return out.transpose(1, 2).contiguous(), None


def _packs(module: Any, query: torch.Tensor, mask: Any, dropout: float) -> bool:
    """A boolean mask over a few queries of a grouped-query layer: shared by the batch's rows
    (a `branch_mask` pass, a draft's verification), or one a row over one query (a decode step
    on a static cache). A mask a row over more queries (padding) keeps transformers' sdpa."""
    if not (
        isinstance(mask, torch.Tensor)
        and mask.dtype == torch.bool
        and mask.dim() == 4
        and mask.shape[1] == 1
        and getattr(module, "num_key_value_groups", 1) > 1
        and dropout == 0.0
    ):
        return False
    queries = query.shape[2]
    return queries == 1 or (mask.shape[0] == 1 and queries <= PACKED_QUERIES)


def _packed_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    scaling: float | None,
) -> tuple[torch.Tensor, None]:
    """Attention with each key head's query heads as extra query rows ([B, heads, q, d] ->
    [B, key heads, group x q, d]; transformers' repeat_kv gives key head j the query heads
    j*group .. j*group + group - 1), the mask's rows repeated per head of a group (one query:
    the mask as it is, as transformers' eager sdpa packs a decode step)."""
    batch, heads, queries, _ = query.shape
    groups = module.num_key_value_groups
    packed = query.reshape(batch, heads // groups, groups * queries, query.shape[-1])
    rows = mask if queries == 1 else mask.repeat(1, 1, groups, 1)  # one query: it broadcasts
    out = torch.nn.functional.scaled_dot_product_attention(
        packed, key, value, attn_mask=rows, scale=scaling
    )
    return out.reshape(batch, heads, queries, -1).transpose(1, 2).contiguous(), None


def _flash(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether the bias reaches the flash kernel with these key/value heads as given."""
    if query.device.type != "cuda":
        return False
    from torch.backends.cuda import SDPAParams, can_use_flash_attention

    gqa = key.shape[1] != query.shape[1]
    return can_use_flash_attention(SDPAParams(query, key, value, None, 0.0, False, gqa))


def kernel(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> str:
    """The kernel `chunk_attention` reaches for these tensors: flash, efficient (key/value
    heads repeated first where there are fewer), or materialised (the mask built after all;
    the CPU's case)."""
    if _flash(query, key, value):
        return "flash"
    if query.device.type != "cuda":
        return "materialised"
    from torch.backends.cuda import SDPAParams, can_use_efficient_attention

    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    if can_use_efficient_attention(SDPAParams(query, key, value, None, 0.0, False, False)):
        return "efficient"
    return "materialised"
