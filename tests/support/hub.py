"""A Hugging Face Hub cache laid out by hand (no network): the demo model as a cached snapshot
of a made-up repository, in the layout huggingface_hub reads (models--ORG--NAME/refs/main and
snapshots/COMMIT/)."""

from __future__ import annotations

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
