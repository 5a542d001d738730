"""Write outputs under a temporary name and rename on success, so nothing half-written survives."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling path; rename it onto `path` only if the block succeeds. The
    temporary files of an earlier writer of `path` that was killed are removed first."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{glob.escape(final.name)}.tmp-*"):
        stale.unlink(missing_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_parquet(frame: pl.DataFrame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp)


def write_json(payload: Any, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def write_text(text: str, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
