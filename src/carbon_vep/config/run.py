"""A whole workflow config: its entries (datasets, scans, tasks, models, Hub files, downloads)
and `RunConfig`, the config typed with every default filled in and checked as a whole.

Entries are flat in YAML and nest the stage settings of `config.stages` in Python; settings
with `scope="run"` are read once at the top level (`run_fields`); `scope="run_default"` ones
there too, as every entry's default, and an entry's own value wins. No torch here: the workflow
builds a `RunConfig` while it parses the Snakefile.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from carbon_vep.config.entries import (
    SECTIONS,
    DatasetConfig,
    DownloadConfig,
    HubFileConfig,
    NiahConfig,
    ScanConfig,
)
from carbon_vep.config.fields import (
    RUN_SCOPES,
    ConfigError,
    describe,
    flat_fields,
    from_flat,
)
from carbon_vep.config.stages import ModelSettings
from carbon_vep.config.task_entry import TaskConfig, check_task_keys, split_sweeps
from carbon_vep.config.tasks import SweepPoint
from carbon_vep.genome.builds import canonical_build, check_shared_references

OUTDIR_DEFAULT = "results"


# the comparison gate (`carbon-vep compare`, rule compare_baseline): a top-level key
BASELINE_HELP = (
    "baseline YAML (baselines/): the workflow's last rule compares the results table with it "
    "and fails on drift (a relative path not found here is looked up next to the Snakefile)"
)


# pinned input files: a top-level key, read by the record_*_inputs rules (`carbon-vep
# record-inputs`), which hash every input and stop on a mismatch before anything uses it
SHA256_PATTERN = r"^[0-9a-f]{64}$"


SHA256_HELP = (
    "expected sha256 of input files, by path as the config names it (panel, reference, task "
    "file); a model's files as MODEL_PATH/FILE (e.g. HuggingFaceBio/Carbon-3B/model.safetensors)."
    " A mismatch stops the run naming the file and both hashes"
)


@dataclass(frozen=True)
class RunConfig:
    """A whole workflow config, typed, with every default filled in."""

    outdir: str
    models: dict[str, ModelSettings]
    datasets: dict[str, DatasetConfig]
    scans: dict[str, ScanConfig]
    tasks: dict[str, TaskConfig]
    niah: dict[str, NiahConfig]
    hub_files: dict[str, HubFileConfig]
    downloads: dict[str, DownloadConfig]
    baseline: str | None = None
    sha256: dict[str, str] = field(default_factory=dict)
    sweeps: dict[str, tuple[SweepPoint, ...]] = field(default_factory=dict)  # by task

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> RunConfig:
        """Typed config from the (validated) YAML mapping; refuses what cannot be meant."""
        known = {"outdir", "baseline", "sha256", *SECTIONS, *run_fields()}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ConfigError(f"unknown top-level config key(s) {unknown}")
        run = {name: config[name] for name in run_fields() if name in config}
        tasks, sweeps = {}, {}
        for key, task in (config.get("tasks") or {}).items():
            check_task_keys(key, task)
            tasks[key], points = split_sweeps(key, task)
            if points:
                sweeps[key] = points
        config = {**config, "tasks": tasks}
        sections = {
            name: {
                key: from_flat(entry_cls, {**run, **dict(value or {})}, f"{name}.{key}", ignore=run)
                for key, value in (config.get(name) or {}).items()
            }
            for name, (entry_cls, _, _) in SECTIONS.items()
        }
        pins = dict(config.get("sha256") or {})
        bad = sorted(path for path, value in pins.items() if not _is_sha256(value))
        if bad:
            raise ConfigError(f"sha256: {bad[0]}: expected 64 lowercase hex digits")
        run_config = cls(
            outdir=config.get("outdir", OUTDIR_DEFAULT),
            baseline=config.get("baseline"),
            sha256=pins,
            sweeps=sweeps,
            **sections,
        )
        run_config.check()
        return run_config

    def check(self) -> None:
        if not self.models:
            raise ConfigError("the config defines no models")
        if not (self.datasets or self.scans or self.tasks or self.niah):
            raise ConfigError(
                "the config defines no datasets, scans, tasks or niah cells: nothing to do"
            )
        if "suite" in self.datasets:
            raise ConfigError("dataset name 'suite' is reserved: OUTDIR/suite holds suite tasks")
        for key, model in self.models.items():
            check_unpinned_remote_code(key, model)
            self._check_draft(key, model)
        for key, entry in self.niah.items():
            entry.check(key)
        for key, scan in self.scans.items():
            scan.check(key)
        for key, task in self.tasks.items():
            task.check(key)
        for section in ("datasets", "scans", "tasks", "niah"):
            for key, entry in getattr(self, section).items():
                if entry.models is not None and not entry.models:
                    raise ConfigError(
                        f"{section}.{key}: `models` is empty, so it would run nothing; name "
                        "the models, or leave the key out to run every model"
                    )
                missing = sorted(set(entry.models or ()) - set(self.models))
                if missing:
                    raise ConfigError(f"{section}.{key}: unknown model(s) {missing}")
        self._check_pins()
        for key, dataset in self.datasets.items():
            self._check_scan_lookup(key, dataset)
            try:
                dataset.metrics.check()
            except ConfigError as err:
                raise ConfigError(f"datasets.{key}: {err}") from None
        try:
            check_shared_references(
                [(f"datasets.{k}", d.reference, d.build) for k, d in self.datasets.items()]
                + [(f"scans.{k}", s.reference, s.build) for k, s in self.scans.items()]
            )
        except ValueError as err:  # two builds declared for one reference
            raise ConfigError(str(err)) from None

    def _check_pins(self) -> None:
        """Every `sha256:` pin names a file the record_*_inputs rules hash (a dataset's panel or
        reference, a task file, a file under a model's path): a pin matching none, a path
        mistyped, would check nothing and say nothing."""
        pinnable = {d.panel for d in self.datasets.values()}
        pinnable |= {d.reference for d in self.datasets.values()}
        pinnable |= {t.path for t in self.tasks.values()}
        models = tuple(os.path.join(os.path.normpath(m.path), "") for m in self.models.values())
        unused = sorted(p for p in self.sha256 if p not in pinnable and not p.startswith(models))
        if unused:
            raise ConfigError(
                f"sha256: {unused[0]!r} is no input this config hashes (a dataset's panel or "
                "reference, a task file, MODEL_PATH/FILE), so its pin would check nothing; "
                f"the files it could pin: {sorted(pinnable)[:6]}"
            )

    def _check_scan_lookup(self, key: str, dataset: DatasetConfig) -> None:
        """A from_scan dataset names a scan of this config that runs each of its models."""
        scan = dataset.scoring.scan
        if dataset.scoring.recipe != "from_scan":
            if scan is not None:
                raise ConfigError(f"datasets.{key}: `scan` applies to recipe from_scan only")
            return
        if scan not in self.scans:
            known = sorted(self.scans) or "none"
            raise ConfigError(f"datasets.{key}: recipe from_scan needs `scan:`, one of {known}")
        missing = sorted(set(self.entry_models(dataset)) - set(self.entry_models(self.scans[scan])))
        if missing:
            raise ConfigError(f"datasets.{key}: scan {scan!r} does not run model(s) {missing}")
        scan_build = self.scans[scan].build
        if canonical_build(dataset.build) != canonical_build(scan_build):
            raise ConfigError(
                f"datasets.{key}: build {dataset.build} but scan {scan!r} is of {scan_build}; a "
                "panel is looked up in a scan of its own build"
            )

    def scan_lookups(self) -> dict[str, str]:
        """Datasets scored by lookup in a scan (recipe from_scan) -> the scan's key."""
        return {
            key: d.scoring.scan
            for key, d in self.datasets.items()
            if d.scoring.recipe == "from_scan" and d.scoring.scan is not None
        }

    def _check_draft(self, key: str, model: ModelSettings) -> None:
        """A draft names another model entry (its path and revision go to the jobs)."""
        if model.draft_model is None:
            return
        if model.draft_model == key or model.draft_model not in self.models:
            known = ", ".join(k for k in self.models if k != key) or "none"
            raise ConfigError(
                f"models.{key}.draft_model: {model.draft_model!r} is not another model entry "
                f"(entries: {known}); name the draft by its key"
            )
        draft = self.models[model.draft_model]
        if (draft.path, draft.revision) == (model.path, model.revision):
            raise ConfigError(
                f"models.{key}.draft_model: {model.draft_model!r} is the same model "
                f"({model.path}): a model drafting for itself only adds work; name a smaller one"
            )

    def draft_settings(self, model: ModelSettings) -> ModelSettings:
        """`model` with its draft key replaced by that entry's path and revision."""
        if model.draft_model is None:
            return model
        draft = self.models[model.draft_model]
        return dataclasses.replace(model, draft_model=draft.path, draft_revision=draft.revision)

    def entry_models(
        self, entry: DatasetConfig | ScanConfig | TaskConfig | NiahConfig
    ) -> list[str]:
        return list(entry.models) if entry.models is not None else list(self.models)

    def sweep_points(self, task: str) -> tuple[SweepPoint, ...]:
        """The points of a task's sweeps (none: the task runs its headline only)."""
        return self.sweeps.get(task, ())


def _is_sha256(value: Any) -> bool:
    import re

    return isinstance(value, str) and re.fullmatch(SHA256_PATTERN[1:-1], value) is not None


# ---- checks of the whole config ----------------------------------------------------------
def is_hub_id(path: str) -> bool:
    """A model path of a Hub id's shape, ORG/NAME: any other path that is no local folder is a
    folder not found here (such as a path relative to another working directory), never a
    download."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path) is not None


def check_unpinned_remote_code(key: str, model: ModelSettings) -> None:
    """A Hub model allowed to run remote code needs a pinned commit (or allow_unpinned): the
    code at a branch can change between runs. Caught at parse time, before any download."""
    import os
    import re

    local = os.path.isdir(model.path) or model.path.startswith(("/", ".", "~"))
    if not model.trust_remote_code or model.build_demo or local:  # a Hub id is ORG/NAME
        return
    if model.allow_unpinned or re.fullmatch(r"[0-9a-f]{40}", model.revision or ""):
        return
    raise ConfigError(
        f"models.{key}: {model.path} with trust_remote_code: true at revision "
        f"{model.revision or 'main'!r} would run remote code that can change between runs; "
        "pin `revision` to a commit (40 hex digits; fetch-model records the one it gets), or "
        "set `allow_unpinned: true`"
    )


# ---- run-level settings and their names ---------------------------------------------------
def run_fields() -> dict[str, tuple[dataclasses.Field, Any]]:
    """Settings whose config key is at the top level (one value for every entry), with their
    type annotation."""
    out: dict[str, tuple[dataclasses.Field, Any]] = {}
    for entry_cls, _, _ in SECTIONS.values():
        for f, hint in flat_fields(entry_cls):
            if f.metadata["scope"] in RUN_SCOPES:
                out.setdefault(f.name, (f, hint))
    return out


def setting_name(name: str, value: str | None = None) -> str:
    """How the user in front of us spells the setting with this config key (errors name it),
    optionally set to `value` (see `settings.describe`)."""
    for entry_cls, _, _ in SECTIONS.values():
        for f, hint in flat_fields(entry_cls):
            if f.name == name:
                return describe(f, value, hint)
    raise KeyError(name)
