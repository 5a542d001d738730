"""Write outputs under a temporary name and rename on success, so nothing half-written survives:
files (also one held open across calls: `PendingFile`), directories (also one several processes
build at once: `shared_dir`), and a data file with its tabix index. Every output of the package
is written through here: no other module renames a temporary file."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

# A temporary file of another machine (a shared filesystem: two nodes writing one file) is
# removed only once untouched this long: its writer's pid means nothing here.
FOREIGN_STALE_S = 24 * 3600
_HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname().split(".")[0]) or "host"
_OWNER = re.compile(r"(\d+)(?:@([A-Za-z0-9_]+))?")


def temporary_sibling(path: str | Path, suffix: str = "") -> Path:
    """A temporary name beside `path` (`.name.tmp-<pid>@<host><suffix>`: a writer that wants a
    file suffix, such as `.bw`, keeps it), after removing the temporary files of an earlier
    writer of `path` that was killed. A file whose writer may still be running is left alone:
    two jobs writing the same file at once (two jobs indexing one FASTA) must not delete each
    other's half-written file. Renamed onto `path` when complete by `atomic_path` or
    `PendingFile` (no other module renames), or removed when only a scratch file."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{final.name}.tmp-"
    for stale in final.parent.glob(f"{glob.escape(prefix)}*"):
        if _writer_may_run(stale, stale.name[len(prefix) :]):
            continue
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    return final.with_name(f"{prefix}{os.getpid()}@{_HOST}{suffix}")


def _writer_may_run(file: Path, tail: str) -> bool:
    """Whether the writer named by a temporary file's `<pid>[@<host>]<suffix>` may be running:
    another live process of this machine, or one of another machine that touched it lately
    (a name without a host is this machine's, as written before hosts were named)."""
    owner = _OWNER.match(tail)
    if owner is None:
        return False
    pid, host = int(owner.group(1)), owner.group(2) or _HOST
    if host != _HOST:
        try:
            return time.time() - file.lstat().st_mtime < FOREIGN_STALE_S
        except FileNotFoundError:
            return False
    return pid != os.getpid() and _process_alive(pid)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OverflowError:
        return False
    return True


class PendingFile:
    """A file written at a temporary sibling name (`temporary_sibling`) by a writer held open
    across calls (a Parquet writer fed a row group at a time): `publish` renames it onto `path`
    once the writer is closed; `discard` removes it (a no-op once published)."""

    def __init__(self, path: str | Path, suffix: str = "") -> None:
        self.path = Path(path)
        self.tmp = temporary_sibling(self.path, suffix)

    def publish(self) -> None:
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)


@contextmanager
def atomic_path(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary sibling path (`temporary_sibling`); rename it onto `path` only if the
    block succeeds."""
    pending = PendingFile(path, suffix)
    try:
        yield pending.tmp
        pending.publish()
    finally:
        pending.discard()


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary sibling directory; when the block succeeds it replaces `path`
    (an earlier directory there is removed first), else it is removed."""
    final = Path(path)
    tmp = temporary_sibling(final)
    tmp.mkdir()
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def shared_dir(path: str | Path, is_complete: Callable[[Path], bool]) -> Iterator[Path]:
    """Yield a private staging directory to build `path` in, when several processes may build
    the same `path` at once (test workers building one demo model); on success it replaces an
    incomplete `path`, and the staging is always removed. The first complete build wins: one
    finished meanwhile (`is_complete(path)`) is kept, and losing the rename race to one is no
    error. (Not `atomic_dir`: it replaces a complete `path` too, under a reader of the first
    build, and its temporary name is one per process, not one per build.)"""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    staging.chmod(0o755)  # mkdtemp's is private (0700); the published directory is not
    try:
        yield staging
        _publish_dir(staging, final, is_complete)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _publish_dir(staging: Path, final: Path, is_complete: Callable[[Path], bool]) -> None:
    if is_complete(final):  # a concurrent build finished first
        return
    if final.exists():
        shutil.rmtree(final)
    try:
        os.replace(staging, final)
    except OSError:  # another build published between the removal and the rename
        if not is_complete(final):
            raise


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

# The last position a .tbi can hold: 2^29 (htslib's hts_idx_check_range; 14 + 5 x 3 bits of
# bins). Past it (wheat, barley, conifers, axolotl: contigs over 536,870,912 bp) only a CSI can.
TBI_MAX_POSITION = 1 << 29
INDEX_SUFFIXES = (".tbi", ".csi")


def index_suffix(longest: int) -> str:
    """The index a tabix-indexed file gets, from its longest contig (or its last position):
    `.tbi`, which tools expect, unless a position passes `TBI_MAX_POSITION`; then `.csi`."""
    return ".csi" if longest > TBI_MAX_POSITION else ".tbi"


def index_of(path: str | Path) -> Path:
    """The index beside a tabix-indexed file: its `.csi` where there is one, else its `.tbi`
    (which may not exist). pysam.TabixFile looks for the .tbi only: pass this as `index`."""
    csi = Path(f"{path}.csi")
    return csi if csi.exists() else Path(f"{path}.tbi")


def indexed_bytes(path: str | Path) -> int:
    """A tabix-indexed file's size with its index's."""
    return Path(path).stat().st_size + index_of(path).stat().st_size


@contextmanager
def indexed_file(
    path: str | Path, tabix: dict[str, Any] | None = TSV_TABIX, longest: int = 0
) -> Iterator[Path]:
    """Yield a temporary path with `path`'s own suffix (pysam decides compression by it) to
    write the file to; then tabix-index it (`tabix`: pysam.tabix_index's column options; None:
    no index) and rename it and its index into place: a `.tbi`, or a `.csi` where `longest`
    (the longest contig the file may hold, or its last position) passes what a .tbi can hold
    (`index_suffix`). An index of the other kind left by an earlier write is removed (htslib
    would read a stale .csi before the .tbi). Nothing of a failed write survives."""
    import pysam

    final = Path(path)
    suffix = index_suffix(longest)
    with atomic_path(final, suffix=f"-{final.name}") as work:
        index = Path(f"{work}{suffix}")
        try:
            yield work
            if tabix is not None:
                pysam.tabix_index(
                    str(work), force=True, keep_original=True, csi=suffix == ".csi", **tabix
                )
                os.replace(index, f"{final}{suffix}")
                for other in INDEX_SUFFIXES:
                    if other != suffix:
                        Path(f"{final}{other}").unlink(missing_ok=True)
        finally:
            index.unlink(missing_ok=True)


@contextmanager
def indexed_bgzf(
    path: str | Path, tabix: dict[str, Any] = TSV_TABIX, longest: int = 0
) -> Iterator[Any]:
    """A bgzipped table written through the yielded handle, then tabix-indexed and renamed into
    place with its `.tbi` or `.csi` (`indexed_file`)."""
    from pysam.libcbgzf import BGZFile

    with indexed_file(path, tabix, longest) as work, BGZFile(str(work), "wb") as handle:
        yield handle
