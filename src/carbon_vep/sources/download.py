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

import polars as pl

from carbon_vep import atomic
from carbon_vep.errors import InputError

_CHUNK = 1 << 20


def fetch_url(url: str, out: str | Path, sha256: str | None, gunzip: bool = False) -> str:
    """Download `url` into `out` (gunzipped if asked), verified: the sha256 of the published
    file must be `sha256`. Nothing is left at `out` unless it is. Returns the sha256."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".download")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url) as response, part.open("wb") as handle:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                handle.write(chunk)
    except (OSError, ValueError) as err:
        part.unlink(missing_ok=True)
        raise InputError(url, f"download failed: {err}") from err
    actual = digest.hexdigest()
    if sha256 != actual:
        part.unlink()
        if sha256 is None:
            raise InputError(
                url,
                f"no sha256 pinned; the file downloaded has sha256 {actual}. Check it against "
                f"the checksums its publisher lists, then set `sha256: {actual}` in its "
                "`downloads` entry",
            )
        raise InputError(
            url,
            f"sha256 is {actual}, but the config pins {sha256}: the file at this URL changed "
            "(or the pin is wrong); refusing it",
        )
    if gunzip:
        with atomic.atomic_path(out) as tmp:
            try:
                with gzip.open(part, "rb") as source, open(tmp, "wb") as target:
                    shutil.copyfileobj(source, target, _CHUNK)
            except (OSError, EOFError) as err:
                part.unlink()
                raise InputError(url, f"not a gzip file: {err}") from err
        part.unlink()
    else:
        part.replace(out)
    return actual


def fetch_hub_file(
    repo_id: str,
    filename: str,
    out: str | Path,
    revision: str | None = None,
    repo_type: str = "dataset",
) -> Path:
    """Download one file of a Hub repository to `out` (atomically), or, when `filename` is a
    glob, every matching Parquet concatenated in name order. Needs internet (a head node)."""
    from huggingface_hub import hf_hub_download, snapshot_download

    if not any(c in filename for c in "*?["):
        path = hf_hub_download(repo_id, filename, repo_type=repo_type, revision=revision)
        with atomic.atomic_path(out) as tmp:
            shutil.copyfile(path, tmp)
        return Path(out)
    root = snapshot_download(
        repo_id, repo_type=repo_type, revision=revision, allow_patterns=[filename]
    )
    root = Path(root)  # allow_patterns match like fnmatch: `*` also spans folders
    files = sorted(
        f
        for f in root.rglob("*")
        if f.is_file() and fnmatch(f.relative_to(root).as_posix(), filename)
    )
    if not files:
        raise InputError(f"hf://{repo_type}s/{repo_id}", f"no file matches {filename!r}")
    frame = pl.concat([pl.read_parquet(f) for f in files], how="vertical_relaxed")
    atomic.write_parquet(frame, out)
    return Path(out)
