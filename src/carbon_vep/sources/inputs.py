"""Verified inputs: the sha256 of every file a result depends on (panel, reference, task file,
model weights, tokenizer and remote code), recorded once per input by the workflow's
record_*_inputs rules and merged into every output's provenance. A config may pin a file's
expected sha256 (top-level `sha256:`); a mismatch stops the run naming the file and both
hashes. No torch here.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from carbon_vep.errors import InputError

_CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class PinMismatchError(InputError):
    """An input file's sha256 is not the one the config pins."""


def check_pin(name: str, actual: str, pins: Mapping[str, str]) -> None:
    expected = pins.get(name)
    if expected is not None and expected != actual:
        raise PinMismatchError(
            name,
            f"sha256 is {actual}, but the config pins {expected} (top-level `sha256:`): the "
            "file changed (a rerun must not silently use it) or the pin is wrong",
        )


def hash_files(named: Mapping[str, str | Path], pins: Mapping[str, str]) -> dict[str, str]:
    """{name: sha256} of the files (`name` is the path as the config names it), checked against
    the pins."""
    hashes: dict[str, str] = {}
    for name, path in named.items():
        if not Path(path).is_file():
            raise InputError(path, "input file not found")
        hashes[name] = sha256_file(path)
        check_pin(name, hashes[name], pins)
    return hashes


def model_directory_files(folder: Path) -> Iterable[tuple[str, Path]]:
    """(relative name, path) of every file of a model directory or Hub snapshot (links followed:
    a snapshot's files point into the cache's blobs), hidden files and caches left out."""
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        if path.is_file():
            yield relative.as_posix(), path


def record_model(path: str, revision: str | None, pins: Mapping[str, str]) -> dict[str, Any]:
    """The model's files hashed (`MODEL_PATH/FILE`) and, for a Hub model, the commit its
    snapshot is: what the provenance of every result it makes records."""
    from carbon_vep.sources.hub import is_local_model, require_cached

    if is_local_model(path):
        folder, commit = Path(path), None
    else:
        folder = require_cached(path, revision)
        commit = folder.name  # snapshots/<commit>/
    prefix = os.path.normpath(path)
    named = {f"{prefix}/{name}": file for name, file in model_directory_files(folder)}
    if not named:
        raise InputError(folder, "the model directory holds no files")
    return {"model_commit": commit, "inputs_sha256": hash_files(named, pins)}


def record_files(files: Iterable[str], pins: Mapping[str, str]) -> dict[str, Any]:
    return {"inputs_sha256": hash_files({name: name for name in files}, pins)}
