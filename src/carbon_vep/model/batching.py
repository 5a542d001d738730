"""Batches that survive running out of GPU memory: the one out-of-memory backoff.

Every model stage (variant scoring, scans, sequence recovery, perturbation pairs) feeds its
items through `in_batches`: a batch that raises `torch.OutOfMemoryError` is retried at half the
size, down to one item; an item that still fails alone yields `None` for that item, and the
caller marks it `failed` (or, where one item cannot fail alone, stops with the error).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import torch

from carbon_vep.progress import Progress

FAILED_ALONE = "out of memory even at batch size 1"  # the reason of a row that failed alone
T = TypeVar("T")
R = TypeVar("R")


def in_batches(
    items: Sequence[T],
    work: Callable[[Sequence[T]], list[R]],
    batch_size: int,
    device: torch.device | None = None,
    progress: Progress | None = None,
) -> Iterator[tuple[list[int], list[R | None]]]:
    """(indices, results) for consecutive batches of `items`, in order, halving on OOM.

    The halved size is kept for the rest of the items (memory that ran out once will again).
    `progress` counts the items done.
    """
    start, size = 0, max(1, batch_size)
    while start < len(items):
        index = list(range(start, min(start + size, len(items))))
        try:
            values: list[R | None] = list(work([items[i] for i in index]))
        except torch.OutOfMemoryError:
            release_memory(device)
            if size > 1:
                size = max(1, size // 2)
                continue
            values = [None]
        if progress is not None:
            progress.update(len(index))
        yield index, values
        start += len(index)


def run_sorted(
    items: Sequence[T],
    work: Callable[[Sequence[T]], list[R]],
    batch_size: int,
    lengths: Sequence[int],
    device: torch.device | None = None,
    unit: str = "items",
) -> list[R | None]:
    """`work` over batches of items of similar length (sorted), results in the input order;
    progress is logged in `unit`s."""
    order = sorted(range(len(items)), key=lengths.__getitem__)
    results: list[R | None] = [None] * len(items)
    progress = Progress(len(items), unit, "scoring")
    for index, values in in_batches([items[i] for i in order], work, batch_size, device, progress):
        for i, value in zip(index, values, strict=True):
            results[order[i]] = value
    progress.close()
    return results


def release_memory(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.empty_cache()
