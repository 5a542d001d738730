"""Write outputs under a temporary name and rename on success, so nothing half-written survives:
files (also one held open across calls: `PendingFile`), directories (also one several processes
build at once: `shared_dir`), a data file with its tabix index, and a tabix index of a file
written before (`index_tabix`: the workflow's own job, so the index is declared). Every output
of the package is written through here: no other module renames a temporary file."""

from __future__ import annotations

import glob
import gzip
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

from carbon_vep.bgzf import BgzfWriter

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
VCF_TABIX = {"preset": "vcf"}

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


def _remove_indexes(path: Path, keep: str | None = None) -> None:
    """Remove the indexes beside `path` but the `keep` kind: one of the other kind (htslib
    reads a .csi before a .tbi), or, for a file written without its index, both (they
    index the file it replaces)."""
    for suffix in INDEX_SUFFIXES:
        if suffix != keep:
            Path(f"{path}{suffix}").unlink(missing_ok=True)


@contextmanager
def indexed_file(
    path: str | Path,
    tabix: dict[str, Any] | None = TSV_TABIX,
    longest: int = 0,
    index: bool = True,
) -> Iterator[Path]:
    """Yield a temporary path with `path`'s own suffix (pysam decides compression by it) to
    write the file to; then tabix-index it (`tabix`: pysam.tabix_index's column options; None:
    no index) and rename it and its index into place: a `.tbi`, or a `.csi` where `longest`
    (the longest contig the file may hold, or its last position) passes what a .tbi can hold
    (`index_suffix`). An index of the other kind left by an earlier write is removed (htslib
    would read a stale .csi before the .tbi). `index=False`: the file alone, its index left to
    `index_tabix` (a workflow job of its own), any earlier index removed before the new file
    replaces the old. Nothing of a failed write survives."""
    import pysam

    final = Path(path)
    suffix = index_suffix(longest) if tabix is not None and index else None
    with atomic_path(final, suffix=f"-{final.name}") as work:
        work_index = Path(f"{work}{suffix}") if suffix is not None else None
        try:
            yield work
            if work_index is not None:
                pysam.tabix_index(
                    str(work), force=True, keep_original=True, csi=suffix == ".csi", **tabix
                )
                os.replace(work_index, f"{final}{suffix}")
            _remove_indexes(final, keep=suffix)
        finally:
            if work_index is not None:
                work_index.unlink(missing_ok=True)


@contextmanager
def indexed_bgzf(
    path: str | Path, tabix: dict[str, Any] = TSV_TABIX, longest: int = 0, index: bool = True
) -> Iterator[Any]:
    """A bgzipped table written through the yielded handle (`bgzf.BgzfWriter`: blocks
    compressed on worker threads), then tabix-indexed and renamed into place with its `.tbi`
    or `.csi` (`indexed_file`; `index=False`: without one)."""
    with indexed_file(path, tabix, longest, index) as work, BgzfWriter(work) as handle:
        yield handle


def tabix_columns(path: str | Path) -> dict[str, Any]:
    """The tabix column options of a bgzipped file of ours, by its name: a VCF's (`.vcf.gz`),
    else a `#chrom pos ...` table's (`TSV_TABIX`: a scan's TSVs, `export-tabix`'s)."""
    return VCF_TABIX if str(path).endswith(".vcf.gz") else TSV_TABIX


class TbiRangeError(ValueError):
    """A .tbi asked for a file with a position past what a .tbi holds (`index_tabix`)."""


def index_tabix(path: str | Path, out: str | Path) -> Path:
    """Tabix-index the bgzipped file `path` (written before, without its index) as `out`:
    `<path>.tbi` or `<path>.csi`, the kind its name says (a workflow job declares the one the
    data calls for, so that Snakemake stamps the index after its data). Written under a
    temporary name and renamed; an index of the other kind beside `path` is removed. A `.tbi`
    asked for a file with a position past what a .tbi holds is refused (TbiRangeError naming
    the contig and the position)."""
    import pysam

    path, out = Path(path), Path(out)
    suffix = out.name[len(path.name) :] if out.name.startswith(path.name) else ""
    if suffix not in INDEX_SUFFIXES or out.parent.resolve() != path.parent.resolve():
        raise ValueError(f"the index of {path} is {path.name}.tbi or {path.name}.csi beside it")
    tabix = tabix_columns(path)
    with atomic_path(out, suffix=suffix) as work:
        try:
            pysam.tabix_index(str(path), force=True, index=str(work), csi=suffix == ".csi", **tabix)
        except OSError:
            past = _past_tbi(path, tabix) if suffix == ".tbi" else None
            if past is None:
                raise
            raise TbiRangeError(
                f"{past[0]}:{past[1]:,} is past {TBI_MAX_POSITION:,} bp (2^29), the last "
                f"position a .tbi can hold: index it as {path.name}.csi"
            ) from None
    _remove_indexes(path, keep=suffix)
    return out


def _past_tbi(path: Path, tabix: dict[str, Any]) -> tuple[str, int] | None:
    """The first record of a bgzipped table or VCF that ends past `TBI_MAX_POSITION`, as
    (contig, end): why a .tbi could not be built (read only then: it reads the whole file)."""
    vcf = tabix.get("preset") == "vcf"
    seq, end_col = (0, 1) if vcf else (tabix["seq_col"], tabix["end_col"])
    with gzip.open(path, "rt", errors="replace") as lines:  # bgzf is gzip, block by block
        for line in lines:
            if line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            end = int(fields[end_col])
            if vcf:
                end += len(fields[3]) - 1
            if end > TBI_MAX_POSITION:
                return fields[seq], end
    return None
