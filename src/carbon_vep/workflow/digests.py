"""The short digests the workflow gives its jobs: 16 hex digits of a sha256 over JSON, in two
text forms that finished runs already record, so neither may change:

- `settings_sha256`: a rule's `--settings` text exactly as the job is given it (`spec_json`'s
  sorted keys and default separators); results record it in their provenance, which is also
  their rule's params.
- `fingerprint`: any JSON value in canonical form (sorted keys, no spaces); the scan rules'
  params hold it for their part of the plan.

A job's params are one of its rerun triggers (docs/reproducibility.md#what-reruns-a-job): a
digest in another form reruns every job that holds one, a finished scan's chunks included
(they are temporary, so the merge would need them again)."""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any

DIGEST_HEX = 16  # hex digits kept: collisions are no concern among one run's settings


def short_sha256(text: str) -> str:
    """The first DIGEST_HEX hex digits of the sha256 of `text` (UTF-8)."""
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_HEX]


def settings_sha256(settings: str) -> str:
    """The digest of a rule's `--settings` (a shell-quoted JSON object): what a result records
    of the settings it was made with. It changes only with those settings, which rerun the job
    anyway, so it adds no rerun (a hash of the whole config would rerun every job on any edit:
    docs/reproducibility.md#what-reruns-a-job)."""
    return short_sha256(shlex.split(settings)[0])


def fingerprint(items: Any) -> str:
    """The digest of `items` as canonical JSON (sorted keys, no spaces)."""
    return short_sha256(json.dumps(items, sort_keys=True, separators=(",", ":")))
