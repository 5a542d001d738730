"""Count the operations that make the host wait for the device.

On a GPU, reading a tensor's value on the host (`float(t)`, `int(t)`, `bool(t)`, `t.item()`),
selecting with a boolean mask (`nonzero`: the result's size is data-dependent) and a blocking
copy each stop the host until every queued kernel has run. On the CPU nothing waits, but the same
aten operations are dispatched, so counting them on the CPU tells how often the code would wait
on a GPU. Device-to-host copies are counted separately (`Engine.to_host` and friends are
patched by the tests), because on the CPU `.cpu()` is not an operation at all.
"""

from __future__ import annotations

import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HOST_READS = frozenset(
    {
        "aten::_local_scalar_dense",  # float(), int(), .item()
        "aten::item",  # the same under inference_mode
        "aten::is_nonzero",  # bool()
        "aten::nonzero",  # boolean-mask indexing
        "aten::masked_select",
        "aten::equal",
    }
)


class HostReads(TorchDispatchMode):
    """`with HostReads() as reads: ...`; then `reads.total` and `reads.by_op`."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name in HOST_READS or (name == "aten::index" and _has_bool_index(args)):
            self.by_op[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.by_op.values())


def _has_bool_index(args) -> bool:
    """t[mask] with a boolean mask: its size depends on the mask's values."""
    indices = args[1] if len(args) > 1 else ()
    return any(i is not None and i.dtype == torch.bool for i in indices)
