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


# tabix's column options for a `#chrom pos ...` table with 1-based positions (CADD's layout)
TSV_TABIX = {"seq_col": 0, "start_col": 1, "end_col": 1, "meta_char": "#", "zerobased": False}


@contextmanager
def indexed_bgzf(path: str | Path, tabix: dict[str, Any] = TSV_TABIX) -> Iterator[Any]:
    """A bgzipped table written through the yielded handle under a temporary name, then
    tabix-indexed (`tabix`: pysam.tabix_index's column options) and renamed into place with its
    `.tbi`; nothing of a failed write survives."""
    import pysam
    from pysam.libcbgzf import BGZFile

    final = Path(path)
    with atomic_path(final) as tmp:
        work = tmp.with_name(f"{tmp.name}.gz")  # pysam decides compression by the suffix
        try:
            with BGZFile(str(work), "wb") as handle:
                yield handle
            pysam.tabix_index(str(work), force=True, **tabix)
            os.replace(f"{work}.tbi", f"{final}.tbi")
            os.replace(work, tmp)
        finally:
            work.unlink(missing_ok=True)
            Path(f"{work}.tbi").unlink(missing_ok=True)
