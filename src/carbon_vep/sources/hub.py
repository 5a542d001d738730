"""Models from the Hugging Face Hub on clusters whose compute nodes have no internet.

A head-node rule fetches the snapshot (weights, tokenizer and remote code) into the local Hub
cache at the configured revision (`fetch_snapshot`); scoring jobs run with HF_HUB_OFFLINE=1 and
check that the snapshot is there before anything heavy is imported (`require_cached`), so a
missing cache fails in seconds with the fix, not deep inside transformers. A model pinned to a
commit whose snapshot is cached is read from the cache alone with or without HF_HUB_OFFLINE
(`reads_cache_only`): a commit's files cannot change, and asking the Hub for the files a
snapshot lacks waits minutes on retries where there is no network. Local model directories
need none of this. No torch here: this module is imported before the device check.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from carbon_vep.errors import InputError

# files in a snapshot whose `auto_map` may point at code stored in another repository
_AUTO_MAP_FILES = ("config.json", "tokenizer_config.json")


class ModelNotCachedError(InputError):
    """A Hub model is not in the local cache and this process may not download it."""


class RemoteCodeError(InputError):
    """A model needs code from its checkpoint that the config has not allowed to run."""


def is_pinned(revision: str | None) -> bool:
    """A revision that cannot move: a full commit hash (a branch or tag can)."""
    return bool(revision and re.fullmatch(r"[0-9a-f]{40}", revision))


def remote_code_files(folder: Path) -> dict[str, list[str]]:
    """The files of a model directory whose `auto_map` makes transformers run code shipped
    with the checkpoint: {file name: the classes it maps}."""
    found: dict[str, list[str]] = {}
    for name in _AUTO_MAP_FILES:
        path = folder / name
        if path.is_file():
            auto_map = json.loads(path.read_text()).get("auto_map") or {}
            refs = [r for v in auto_map.values() for r in (v if isinstance(v, list) else [v])]
            if any(isinstance(r, str) for r in refs):
                found[name] = sorted(r for r in refs if isinstance(r, str))
    return found


def check_remote_code(spec: Any, folder: Path, from_hub: bool) -> None:
    """Remote code runs only when asked for (`trust_remote_code`), and from a Hub model only at
    a pinned commit unless `allow_unpinned` (unpinned code can change between runs)."""
    from carbon_vep.config.run import setting_name

    found = remote_code_files(folder)
    if not found:
        return
    name, classes = next(iter(found.items()))
    if not spec.trust_remote_code:
        raise RemoteCodeError(
            folder / name,
            f"{spec.path} needs remote code ({', '.join(classes)}), which runs only when "
            f"asked for: read it, then ask for it with {setting_name('trust_remote_code', 'true')}",
        )
    if from_hub and not is_pinned(spec.revision) and not spec.allow_unpinned:
        raise RemoteCodeError(
            folder / name,
            f"{spec.path} runs remote code at revision {spec.revision or 'main'!r}, which can "
            f"change between runs: pin {setting_name('revision')} to a commit (40 hex digits; "
            f"this snapshot is {folder.name}), or allow it with "
            f"{setting_name('allow_unpinned', 'true')}",
        )


def is_local_model(path: str) -> bool:
    """A local directory is used as-is; anything else is a Hub id (as transformers decides)."""
    return Path(path).is_dir()


def local_positions(path: str) -> tuple[int | None, str]:
    """The positions (`max_position_embeddings`) a local checkpoint's config.json declares,
    read without torch or transformers: (positions, "") or (None, why not known: a Hub id, a
    folder without config.json yet, no such key)."""
    if not is_local_model(path):
        return None, "a Hub model (its config is read when its job loads it)"
    config = Path(path) / "config.json"
    if not config.is_file():
        return None, f"no {config} yet (a model built or copied by an earlier job)"
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as err:
        raise InputError(config, f"the model's config is not readable JSON ({err})") from None
    positions = data.get("max_position_embeddings") if isinstance(data, dict) else None
    if not isinstance(positions, int) or isinstance(positions, bool):
        return None, f"{config} declares no max_position_embeddings"
    return positions, ""


def _typo_hint(repo_id: str) -> str:
    """Where a Hub id's owner is a local folder, the id was most likely a mistyped local path."""
    owner = Path(repo_id).parts[0] if "/" in repo_id else ""
    if owner and Path(owner).is_dir():
        return (
            f" (there is no local folder {repo_id}, though {owner}/ exists: a mistyped path "
            "is read as a Hub id)"
        )
    return ""


def cache_location(cache_dir: str | Path | None = None) -> str:
    return str(cache_dir or constants.HF_HUB_CACHE)


def require_cached(repo_id: str, revision: str | None, cache_dir: str | Path | None = None) -> Path:
    """The cached snapshot of `repo_id` at `revision`, or ModelNotCachedError saying what to run."""
    try:
        folder = snapshot_download(
            repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True
        )
    except HFValidationError as err:
        raise ModelNotCachedError(
            repo_id, f"neither a local directory nor a valid Hub id ({err})"
        ) from err
    except LocalEntryNotFoundError as err:
        raise not_cached_error(repo_id, revision, cache_dir, "is not in") from err
    return Path(folder)


def not_cached_error(
    repo_id: str,
    revision: str | None,
    cache_dir: str | Path | None,
    problem: str,
    detail: str = "",
) -> ModelNotCachedError:
    """The one message for a Hub model that must come from the cache and is not all there:
    `problem` says how ("is not in", "is incomplete in"), `detail` what is missing, then why
    the Hub is not asked and the command that fetches it."""
    fetch = f"carbon-vep fetch-model --model {repo_id}"
    fetch += f" --revision {revision}" if revision else ""
    if constants.HF_HUB_OFFLINE:
        why = "this job runs offline (HF_HUB_OFFLINE=1: compute nodes have no internet)"
    else:
        why = (
            "a snapshot at a commit is read from the cache alone (its files cannot change, and "
            "asking the Hub waits minutes where there is no network)"
        )
    return ModelNotCachedError(
        repo_id,
        f"revision {revision or 'main'} {problem} the Hugging Face cache "
        f"{cache_location(cache_dir)}{_typo_hint(repo_id)}{f' ({detail})' if detail else ''}, "
        f"and {why}. Fetch it into the same "
        "HF_HOME from a machine with internet: the workflow's fetch_model rule does so on the "
        f"head node before any scoring job, or run `{fetch} --out FILE`",
    )


def cached_pinned_snapshot(
    repo_id: str, revision: str | None, cache_dir: str | Path | None = None
) -> Path | None:
    """The cached snapshot of `repo_id` at `revision` when the revision is a commit and that
    snapshot is in the cache, else None. Looks at the cache only."""
    if not is_pinned(revision):
        return None
    try:
        folder = snapshot_download(
            repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True
        )
    except (HFValidationError, LocalEntryNotFoundError):
        return None
    return Path(folder)


def reads_cache_only(spec: Any) -> bool:
    """Whether a model's files are read from the Hub cache without asking the Hub (transformers'
    `local_files_only`): offline, or pinned to a commit whose snapshot is cached."""
    if is_local_model(spec.path):
        return False
    return constants.HF_HUB_OFFLINE or cached_pinned_snapshot(spec.path, spec.revision) is not None


def load_options(spec: Any) -> dict[str, Any]:
    """The keyword arguments of transformers' `from_pretrained` that say where a model's files
    come from. The name stays the Hub id (not the snapshot's folder), so the model's
    `_name_or_path` and the cache of its remote code are the same either way."""
    options: dict[str, Any] = {"revision": spec.revision}
    if reads_cache_only(spec):
        options["local_files_only"] = True
    return options


def go_offline() -> None:
    """Turn the Hub off for this process and those it starts, as HF_HUB_OFFLINE=1 would (for a
    library that takes a Hub id and a revision and has no cache-only option: vLLM). This process
    imported huggingface_hub already, which read the variable then; huggingface_hub,
    transformers and vLLM ask its module's flag at each call, and a process started from here
    (vLLM's tensor-parallel workers) reads the variable when it imports huggingface_hub."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True


def incomplete_in_cache(spec: Any, detail: str) -> ModelNotCachedError:
    """A model read from the cache alone lacks a file transformers needs (`detail`: its words)."""
    return not_cached_error(spec.path, spec.revision, None, "is incomplete in", detail)


def remote_code_repos(snapshot: Path, repo_id: str) -> list[str]:
    """Other repositories that the snapshot's `auto_map` loads code from (`repo--module.Class`)."""
    repos: set[str] = set()
    for name in _AUTO_MAP_FILES:
        path = snapshot / name
        if not path.is_file():
            continue
        auto_map = json.loads(path.read_text()).get("auto_map") or {}
        for refs in auto_map.values():
            for ref in refs if isinstance(refs, list) else [refs]:
                if isinstance(ref, str) and "--" in ref:
                    repos.add(ref.split("--", 1)[0])
    repos.discard(repo_id)
    return sorted(repos)


def fetch_snapshot(
    repo_id: str, revision: str | None, cache_dir: str | Path | None = None
) -> dict[str, Any]:
    """Download `repo_id` at `revision` (and remote code kept in other repositories) into the
    Hub cache, then check it loads offline. Returns what was fetched, for the record file."""
    folder = _download(repo_id, revision, cache_dir)
    # transformers loads code kept in another repository from that repository's main branch
    code_repos = remote_code_repos(folder, repo_id)
    for code_repo in code_repos:
        _download(code_repo, None, cache_dir)
    require_cached(repo_id, revision, cache_dir)
    return {
        "model": repo_id,
        "revision": revision,
        "commit": folder.name,
        "snapshot": str(folder),
        "cache": cache_location(cache_dir),
        "remote_code_repos": code_repos,
    }


def _download(repo_id: str, revision: str | None, cache_dir: str | Path | None) -> Path:
    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir))
    except HFValidationError as err:
        raise InputError(repo_id, f"neither a local directory nor a valid Hub id ({err})") from err
    except RepositoryNotFoundError as err:
        raise InputError(
            repo_id,
            "no such local directory, and no such repository on the Hub (a gated or private "
            f"one needs `hf auth login` first){_typo_hint(repo_id)}",
        ) from err
    except RevisionNotFoundError as err:
        raise InputError(repo_id, f"the Hub has no revision {revision!r}") from err
    except LocalEntryNotFoundError as err:
        raise ModelNotCachedError(
            repo_id,
            f"could not be downloaded into {cache_location(cache_dir)} (no internet, or "
            f"HF_HUB_OFFLINE=1) and is not cached there{_typo_hint(repo_id)}: {err}",
        ) from err


def model_folder(spec: Any) -> tuple[Path, bool]:
    """The model's files: its local directory, or the Hub snapshot at its revision (from the
    cache, downloaded if this process may). (folder, whether it came from the Hub)."""
    from carbon_vep.config.run import is_hub_id

    if is_local_model(spec.path):
        return Path(spec.path), False
    if not is_hub_id(spec.path):
        raise InputError(
            spec.path,
            f"no such model folder (relative paths are read from {Path.cwd()}), and not a Hub "
            "id (ORG/NAME)",
        )
    if constants.HF_HUB_OFFLINE:
        return require_cached(spec.path, spec.revision), True
    snapshot = cached_pinned_snapshot(spec.path, spec.revision)
    if snapshot is not None:  # a commit's files cannot change: the Hub is not asked
        return snapshot, True
    return _download(spec.path, spec.revision, None), True
