"""Session fixtures built once for the whole run, whichever pytest-xdist worker asks first.

`make test` runs two workers (`-n 2 --dist loadfile`), and a session fixture is otherwise built
once *per worker*: the uninterrupted demo run, read by the SLURM, resume and Hub tests, was
scored twice in every run. Here the first worker to ask builds it under a file lock in the
directory the workers share; the other waits for the lock and reuses the result. Without
xdist it is an ordinary session fixture."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base directory every worker of this run sees (a worker's own is one level down)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """`name` under the shared root, built by `build(folder)` unless a worker finished it (a
    marker written after `build` returns: a failed build is retried, not reused)."""
    folder = shared_root(tmp_path_factory) / name
    done = folder.with_name(f"{name}.done")
    with FileLock(str(folder.with_name(f"{name}.lock"))):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder
