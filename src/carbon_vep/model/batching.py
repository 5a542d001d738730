"""Batches that survive running out of GPU memory: the one out-of-memory backoff.

Every model stage (variant scoring, scans, sequence recovery, perturbation pairs) feeds its
items through `in_batches`: a batch that raises `torch.OutOfMemoryError` is retried smaller
(half the windows and half the token budget), down to one item; an item that still fails alone
yields `None` for that item, and the caller marks it `failed` (or, where one item cannot fail
alone, stops with the error).

A batch holds at most `batch_size` items and, with a token budget (`batch_tokens`, set per GPU
class by the profiles), at most `batch_tokens // (its longest item's tokens)` items, so one
budget fits every window length. `run_sorted` orders items by length and cuts equal-length
batches wherever the data allows: such a batch needs no padding and no attention mask, so
scaled-dot-product attention can run its fused causal kernel. It also knows, before the first
pass, how many batches of each shape (items, longest item) it will cut: `shape_context` runs
each batch in a context chosen from that count (model.attention.for_planned_passes: cuDNN's
attention only where its per-shape plan is paid back).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

import torch

from carbon_vep.progress import Progress

T = TypeVar("T")
R = TypeVar("R")
Shape = tuple[int, int]  # a batch's items and its longest item's tokens
# a batch's context, from how many batches of its shape the plan holds (0: not planned, cut
# smaller after running out of memory)
ShapeContext = Callable[[int], AbstractContextManager]
_MIXED = object()  # the key of the pooled remainders of run_sorted's length buckets


def batch_end(
    start: int,
    stop: int,
    batch_size: int,
    tokens: Sequence[int] | None = None,
    batch_tokens: int = 0,
    keys: Sequence[Hashable] | None = None,
) -> int:
    """End (exclusive, at most `stop`) of the batch that starts at `start`: at most `batch_size`
    items and at most `batch_tokens` tokens, counted as items x the longest item's tokens
    (padding included), never across a change of `keys`; at least one item."""
    end, longest = start + 1, tokens[start] if tokens is not None else 0
    limit = min(start + batch_size, stop)
    while end < limit:
        if keys is not None and keys[end] != keys[start]:
            break
        if batch_tokens and tokens is not None:
            longest = max(longest, tokens[end])
            if (end - start + 1) * longest > batch_tokens:
                break
        end += 1
    return end


def in_batches(
    items: Sequence[T],
    work: Callable[[Sequence[T]], list[R]],
    batch_size: int,
    device: torch.device | None = None,
    progress: Progress | None = None,
    *,
    tokens: Sequence[int] | None = None,
    batch_tokens: int = 0,
    keys: Sequence[Hashable] | None = None,
    shape_context: ShapeContext | None = None,
) -> Iterator[tuple[list[int], list[R | None]]]:
    """(indices, results) for consecutive batches of `items`, in order, shrinking on OOM.

    `tokens` are the items' token counts: with a token budget `batch_tokens` (> 0) a batch holds
    as many items as fit in it, and `batch_size` is not used. `keys` keep a batch within a run
    of equal keys (batch_end). On OOM both limits halve until the batch is smaller, and stay
    halved for the rest of the items (memory that ran out once will again). `progress` counts
    the items done. `shape_context`: each batch runs inside `shape_context(n)`, n the number
    of batches of its shape in the plan of the items left (planned_shapes; made again after
    the limits halve).
    """
    start, size, budget = 0, _window_cap(batch_size, batch_tokens, len(items)), batch_tokens

    def plan_from(first: int) -> Counter[Shape]:
        if shape_context is None:
            return Counter()
        return planned_shapes(first, len(items), size, tokens, budget, keys)

    plan = plan_from(0)
    while start < len(items):
        end = batch_end(start, len(items), size, tokens, budget, keys)
        index = list(range(start, end))
        context = shape_context(plan[_shape(index, tokens)]) if shape_context else nullcontext()
        try:
            with context:
                values: list[R | None] = list(work([items[i] for i in index]))
        except torch.OutOfMemoryError:
            release_memory(device)
            if len(index) > 1:
                while batch_end(start, end, size, tokens, budget, keys) == end:
                    size, budget = max(1, size // 2), budget and max(1, budget // 2)
                plan = plan_from(start)
                continue
            values = [None]
        if progress is not None:
            progress.update(len(index))
        yield index, values
        start += len(index)


def planned_shapes(
    start: int,
    n_items: int,
    batch_size: int,
    tokens: Sequence[int] | None = None,
    batch_tokens: int = 0,
    keys: Sequence[Hashable] | None = None,
) -> Counter[Shape]:
    """How many batches of each shape (items, longest item's tokens) `in_batches` cuts from
    items `start` to `n_items` of these token counts when nothing runs out of memory."""
    plan: Counter[Shape] = Counter()
    while start < n_items:
        end = batch_end(start, n_items, batch_size, tokens, batch_tokens, keys)
        plan[_shape(range(start, end), tokens)] += 1
        start = end
    return plan


def _shape(index: Sequence[int], tokens: Sequence[int] | None) -> Shape:
    return len(index), max(tokens[i] for i in index) if tokens is not None else 0


def length_buckets(lengths: Sequence[int], batch_size: int, batch_tokens: int = 0):
    """Run order and batch keys for items of these lengths: for each length (ascending) as many
    whole batches of that length as it fills, then the remainders (fewer than a batch of their
    length) pooled, sorted by length. As many batches as sorting alone gives, and every batch
    but the pooled ones holds one length (no padding)."""
    by_length: dict[int, list[int]] = {}
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        by_length.setdefault(lengths[i], []).append(i)
    order: list[int] = []
    keys: list[Hashable] = []
    pooled: list[int] = []
    for length, members in by_length.items():
        cap = _window_cap(batch_size, batch_tokens, len(members))
        per_batch = batch_end(0, cap, cap, [length] * cap, batch_tokens)
        whole = len(members) - len(members) % per_batch
        order += members[:whole]
        keys += [length] * whole
        pooled += members[whole:]
    return order + pooled, keys + [_MIXED] * len(pooled)


def scatter(
    batches: Iterable[tuple[list[int], list[R | None]]], positions: Sequence[int], out: list
) -> None:
    """Each result of in_batches' `batches` into `out` at its item's position: item i of the
    batched sequence came from `positions[i]`."""
    for index, values in batches:
        for i, value in zip(index, values, strict=True):
            out[positions[i]] = value


def _window_cap(batch_size: int, batch_tokens: int, n_items: int) -> int:
    """Items per batch before the token budget: a token budget replaces `batch_size`."""
    return max(1, n_items) if batch_tokens > 0 else max(1, batch_size)


def run_sorted(
    items: Sequence[T],
    work: Callable[[Sequence[T]], list[R]],
    batch_size: int,
    lengths: Sequence[int],
    device: torch.device | None = None,
    unit: str = "items",
    batch_tokens: int = 0,
    shape_context: ShapeContext | None = None,
) -> list[R | None]:
    """`work` over batches of items of equal length where the data allows (length_buckets),
    results in the input order; progress is logged in `unit`s; `shape_context` as in
    in_batches."""
    order, keys = length_buckets(lengths, batch_size, batch_tokens)
    results: list[R | None] = [None] * len(items)
    progress = Progress(len(items), unit, "scoring")
    batches = in_batches(
        [items[i] for i in order],
        work,
        batch_size,
        device,
        progress,
        tokens=[lengths[i] for i in order],
        batch_tokens=batch_tokens,
        keys=keys,
        shape_context=shape_context,
    )
    scatter(batches, order, results)
    progress.close()
    return results


def release_memory(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.empty_cache()
