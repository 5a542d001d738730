"""Public files other than the Hub's (a reference genome): downloaded on the head node from a
pinned URL and kept only when their sha256 is the one the config pins. No torch here."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import urllib.request
from pathlib import Path

from . import atomic
from .errors import InputError

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
