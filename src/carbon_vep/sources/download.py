"""Public data files, downloaded on the head node (compute nodes are offline): a file from a
pinned URL (a reference genome), kept only when its sha256 is the one the config pins, and a
dataset file from the Hugging Face Hub (`fetch_hub_file`). No torch here."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import urllib.request
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import polars as pl
from huggingface_hub import constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
)

from carbon_vep import atomic
from carbon_vep.errors import InputError
from carbon_vep.sources.hub import cache_location

_CHUNK = 1 << 20


def fetch_url(url: str, out: str | Path, sha256: str | None, gunzip: bool = False) -> str:
    """Download `url` into `out` (gunzipped if asked), verified: the sha256 of the published
    file must be `sha256`. Nothing is left at `out` unless it is. Returns the sha256."""
    out = Path(out)
    with atomic.atomic_path(out) as tmp:
        if not gunzip:
            return _download(url, tmp, sha256)
        # the compressed file, at a temporary name of its own: a killed job's is removed
        compressed = atomic.temporary_sibling(out.with_name(f"{out.name}.download"))
        try:
            actual = _download(url, compressed, sha256)
            _gunzip(url, compressed, tmp)
        finally:
            compressed.unlink(missing_ok=True)
        return actual


def _download(url: str, into: Path, sha256: str | None) -> str:
    """Write `url` to `into`; return its sha256 if it is the pinned one, else raise."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url) as response, into.open("wb") as handle:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                handle.write(chunk)
    except (OSError, ValueError) as err:
        raise InputError(url, f"download failed: {err}") from err
    actual = digest.hexdigest()
    if sha256 is None:
        raise InputError(
            url,
            f"no sha256 pinned; the file downloaded has sha256 {actual}. Check it against "
            f"the checksums its publisher lists, then set `sha256: {actual}` in its "
            "`downloads` entry",
        )
    if sha256 != actual:
        raise InputError(
            url,
            f"sha256 is {actual}, but the config pins {sha256}: the file at this URL changed "
            "(or the pin is wrong); refusing it",
        )
    return actual


def _gunzip(url: str, compressed: Path, into: Path) -> None:
    try:
        with gzip.open(compressed, "rb") as source, into.open("wb") as target:
            shutil.copyfileobj(source, target, _CHUNK)
    except (OSError, EOFError) as err:
        raise InputError(url, f"not a gzip file: {err}") from err


def glob_matches(path: str, pattern: str) -> bool:
    """`pattern` matches `path` folder by folder (`*` never spans a `/`): a config's
    `syn_human/test-*` cannot take another folder's files."""
    parts, wanted = path.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(map(fnmatch, parts, wanted))


def fetch_hub_file(
    repo_id: str,
    filename: str,
    out: str | Path,
    revision: str | None = None,
    repo_type: str = "dataset",
) -> dict[str, Any]:
    """Download one file of a Hub repository to `out` (atomically), or, when `filename` is a
    glob, every matching Parquet concatenated in name order. Needs internet (a head node), or
    the files in the local Hub cache (HF_HUB_OFFLINE=1). Returns what was fetched: the commit
    the revision resolved to, the files, for the log and the record."""
    where = f"hf://{repo_type}s/{repo_id}@{revision or 'main'}"
    try:
        return _fetch_hub_file(repo_id, filename, out, revision, repo_type)
    except LocalEntryNotFoundError as err:
        if not constants.HF_HUB_OFFLINE:  # no network: huggingface_hub says so
            raise InputError(where, f"cannot fetch {filename!r}: {err}") from err
        raise InputError(
            where,
            f"cannot fetch {filename!r}: it is not in the Hugging Face cache "
            f"{cache_location()}, and HF_HUB_OFFLINE=1 forbids downloading it. Run this "
            "fetch (the workflow's head-node rule fetch_hub_<name> or fetch_niah_cell, or "
            "`carbon-vep fetch-hub`) where the Hub can be reached, with HF_HUB_OFFLINE unset",
        ) from err
    except (HfHubHTTPError, EntryNotFoundError, HFValidationError) as err:
        raise InputError(where, f"cannot fetch {filename!r}: {err}") from err


def _fetch_hub_file(
    repo_id: str, filename: str, out: str | Path, revision: str | None, repo_type: str
) -> dict[str, Any]:
    from huggingface_hub import hf_hub_download, snapshot_download

    if not any(c in filename for c in "*?["):
        path = Path(hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision))
        with atomic.atomic_path(out) as tmp:
            shutil.copyfile(path, tmp)
        return _fetched(repo_id, revision, path.parents[len(Path(filename).parts) - 1], [path])
    root = snapshot_download(
        repo_id, repo_type=repo_type, revision=revision, allow_patterns=[filename]
    )
    root = Path(root)
    files = sorted(
        f
        for f in root.rglob("*")
        if f.is_file() and glob_matches(f.relative_to(root).as_posix(), filename)
    )
    if not files:
        raise InputError(
            f"hf://{repo_type}s/{repo_id}@{root.name}", f"no file matches {filename!r}"
        )
    frame = pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed")
    atomic.write_parquet(frame, out)
    return _fetched(repo_id, revision, root, files)


def _fetched(repo_id: str, revision: str | None, snapshot: Path, files: list[Path]) -> dict:
    return {
        "repo_id": repo_id,
        "revision": revision,
        "commit": snapshot.name,  # the cache's snapshots/<commit>/
        "files": [f.relative_to(snapshot).as_posix() for f in files],
    }
