"""A Hugging Face Hub cache laid out by hand (no network): the demo model as a cached snapshot
of a made-up repository, in the layout huggingface_hub reads (models--ORG--NAME/refs/main and
snapshots/COMMIT/)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

REPO_ID = "carbon-vep-test/demo-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_hub_cache(hf_home: Path, model_dir: Path, repo_id: str = REPO_ID) -> Path:
    """`model_dir` as the cached snapshot COMMIT of `repo_id` (also what `main` points at)."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs/main").write_text(COMMIT)
    shutil.copytree(model_dir, repo / "snapshots" / COMMIT)
    return repo / "snapshots" / COMMIT


def hub_dataset_cache(
    hub_cache: Path, repo_id: str, commit: str, files: dict[str, bytes], main: bool = True
) -> Path:
    """Dataset files as the Hub's cache holds them: content-addressed blobs, the snapshot's
    files linking to them (datasets--ORG--NAME/snapshots/COMMIT/PATH), refs/main = COMMIT when
    `main`. Returns the snapshot folder."""
    repo = hub_cache / f"datasets--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    for name, content in files.items():
        blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    if main:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs/main").write_text(commit)
    return snapshot
