"""Genomic-NIAH's published grid (the HuggingFaceBio/genomic-niah dataset's configs,
docs/suite-conventions.md#genomic-niah): its 4 tasks and 6 contexts in tokens, and the Hub's
name of each cell's config (niah_4k, niah_neardup_d4_32k, ...), both ways.
"""

from __future__ import annotations

NIAH_TASKS = ("niah", "neardup_d4", "neardup_d2", "neardup_d1")
NIAH_CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072)


def niah_context_label(tokens: int) -> str:
    """4096 -> '4k' (the Hub's config suffix)."""
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def niah_config_name(task: str, tokens: int) -> str:
    """The Hub config of a cell: niah_4k, niah_neardup_d4_32k, ..."""
    if task not in NIAH_TASKS:
        raise ValueError(f"unknown Genomic-NIAH task {task!r}; one of {', '.join(NIAH_TASKS)}")
    prefix = "niah" if task == "niah" else f"niah_{task}"
    return f"{prefix}_{niah_context_label(tokens)}"


def parse_niah_config_name(name: str) -> tuple[str, int] | None:
    """(task, tokens) of a cell's config name (niah_neardup_d2_32k -> neardup_d2, 32768), or
    None when `name` is not one."""
    prefix, _, label = name.rpartition("_")
    if label.endswith("k") and label[:-1].isdigit():
        tokens = int(label[:-1]) * 1024
    elif label.isdigit():
        tokens = int(label)
    else:
        return None
    task = "niah" if prefix == "niah" else prefix.removeprefix("niah_")
    return (task, tokens) if task in NIAH_TASKS and prefix.startswith("niah") else None
