"""Every setting of the pipeline, defined once: type, default, meaning, CLI flag, config key.

Settings are frozen dataclasses, one per stage concern (`PanelSettings`, `LabelSettings`,
`RecipeSettings`, ...; declared with `settings.setting`). A config entry (`DatasetConfig`,
`ScanConfig`, `TaskConfig`, `ModelSettings`, `HubFileConfig`) is flat in YAML and nests those
groups in Python; `RunConfig` is a whole workflow config. From these definitions come

- the JSON schema the workflow validates its config with (`json_schema()`, written to
  workflow/schemas/config.schema.yaml by `carbon-vep config-schema`; a test keeps them equal),
- the options of each stage command, with these defaults (`settings.add_flags`), and
- the settings a rule passes to its command (`settings.spec_json`), so no rule re-derives a flag.

No torch here: the workflow imports this module while it parses the Snakefile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .builds import check_shared_references
from .recipes import NORMALIZATIONS, PUBLISHED, RECIPES, Recipe
from .settings import (
    ConfigError,
    describe,
    entry_schema,
    flat_fields,
    from_flat,
    group,
    schema_property,
    setting,
)


# ---- the settings ------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSettings:
    """How to load and run one model."""

    path: str = setting(help="local model directory or Hugging Face Hub id", flag="model")
    revision: str | None = setting(
        None, help="commit, tag or branch of a Hub model (pin a commit for reproducible runs)"
    )
    dtype: Literal["float32", "bfloat16", "float16"] = setting(
        "float32", help="weights and matmuls; softmax maths always run in float32"
    )
    device: str = setting("cpu", help="cpu, cuda or cuda:N", pattern=r"^(cpu|cuda(:[0-9]+)?)$")
    trust_remote_code: bool = setting(
        False,
        help="run the tokenizer/model code shipped with the checkpoint (off unless asked for; "
        "a Hub model's remote code also needs a pinned `revision` or allow_unpinned)",
    )
    allow_unpinned: bool = setting(
        False,
        help="allow a Hub model's remote code at a revision that is not a commit (it can "
        "change between runs; the commit used is recorded in the provenance)",
    )
    batch_size: int = setting(8, minimum=1, help="windows per forward pass (halved on OOM)")
    build_demo: bool = setting(
        False, cli=False, help="build the tiny Carbon-shaped demo model at `path` (no download)"
    )


@dataclass(frozen=True)
class PanelSettings:
    """How a panel is read and checked against the reference (check-panel)."""

    build: str = setting(
        help="genome build the panel and reference are on (e.g. hg38); datasets sharing a "
        "reference must declare the same build (hg38 = GRCh38, hg19 = GRCh37 = b37)"
    )
    format: Literal["auto", "vcf", "parquet", "tsv", "csv"] = setting(
        "auto", help="panel file format (auto: from the file name)"
    )
    columns: dict[str, str] = setting(
        {},
        flag="column",
        help="standard name (chrom, pos, ref, alt, or any other) -> column in a table panel; "
        "without it chrom/chr/chromosome/#CHROM, pos/position, ref and alt are found in any "
        "letter case",
    )
    info_fields: tuple[str, ...] = setting(
        (), flag="info-field", help='VCF INFO fields to carry to the outputs ("*" = every field)'
    )
    indel_policy: Literal["skip"] = setting(
        "skip",
        help="indels and MNVs (after trimming shared bases) are kept with status skipped and "
        "the reason; the recipes score SNVs",
    )
    min_ref_concordance: float = setting(
        0.9,
        scope="run",
        minimum=0,
        maximum=1,
        help="abort before scoring when fewer SNV REF alleles match the reference",
    )


DEFAULT_CLNSIG_LABELS = {
    "Pathogenic": 1,
    "Likely_pathogenic": 1,
    "Pathogenic/Likely_pathogenic": 1,
    "Benign": 0,
    "Likely_benign": 0,
    "Benign/Likely_benign": 0,
}
CLNSIG_LABEL_COLUMN = "label"  # the column label_source clinvar_clnsig derives


@dataclass(frozen=True)
class LabelSettings:
    """Where a panel's labels come from and which values are positive (check-panel, metrics)."""

    label_source: Literal["column", "clinvar_clnsig"] = setting(
        "column",
        help="column: labels are read from `label_column` as they are; clinvar_clnsig: a "
        f"`{CLNSIG_LABEL_COLUMN}` column (1, 0 or null) and `label_conflict` are derived from "
        "the INFO field `clnsig_field` through `clnsig_labels`",
    )
    label_column: str | None = setting(
        None,
        help="column holding the labels (default: none, or the derived "
        f"`{CLNSIG_LABEL_COLUMN}` under label_source clinvar_clnsig)",
    )
    clnsig_field: str = setting("CLNSIG", help="INFO field holding ClinVar's significance")
    clnsig_labels: dict[str, int] = setting(
        DEFAULT_CLNSIG_LABELS,
        flag="clnsig-label",
        value_choices=(0, 1),
        help="CLNSIG term -> label; terms not named here (Uncertain_significance, "
        "risk_factor, ...) leave the row unlabeled; Conflicting_* and terms naming both labels "
        "give a null label and label_conflict = true (such rows are left out of metrics)",
    )
    positive_labels: tuple[str, ...] = setting(
        ("1", "1.0", "True", "true"), flag="positive", help="label values that mean positive"
    )
    negative_labels: tuple[str, ...] = setting(
        ("0", "0.0", "False", "false"), flag="negative", help="label values that mean negative"
    )

    @property
    def column(self) -> str | None:
        """The label column metrics read: the configured one, or the one ingest derives."""
        if self.label_column:
            return self.label_column
        return CLNSIG_LABEL_COLUMN if self.label_source == "clinvar_clnsig" else None


@dataclass(frozen=True)
class TileSettings:
    """How a scan cuts a region into one-pass tiles."""

    tile_bp: int = setting(
        49146,
        minimum=12,
        help="tile length in bp (8,191 tokens + the prefix = 8,192, Carbon-500M native)",
    )
    min_context: int = setting(
        24000, minimum=0, help="left context guaranteed to every scored base"
    )


@dataclass(frozen=True)
class RecipeSettings:
    """Which recipe scores a dataset, and its options (make-shards, score-shard)."""

    recipe: str = setting(
        choices=tuple(RECIPES),
        help="; ".join(f"{r.name}: {r.summary}" for r in RECIPES.values()),
    )
    normalization: str = setting(
        PUBLISHED,
        choices=(PUBLISHED, *NORMALIZATIONS),
        help="published = the recipe's published one; or any of " + ", ".join(NORMALIZATIONS),
    )
    window_bp: int | None = setting(
        None,
        minimum=6,
        help="window length: the centered window (centered, fns) or the left context "
        "(nexttoken); default: the recipe's published one",
    )
    rc_average: bool = setting(False, help="average with the reverse-complement delta")
    share_prefix: bool = setting(
        True, help="score alternates from the reference prefix's KV cache (same values)"
    )
    tiles: TileSettings = group(TileSettings)  # the scan recipe's tiles
    scan: str | None = setting(
        None,
        help="recipe from_scan: the key of the scan (in `scans:`) whose outputs the panel is "
        "looked up in, no model (each of the dataset's models needs that scan)",
    )

    @property
    def definition(self) -> Recipe:
        return RECIPES[self.recipe]

    @property
    def resolved_normalization(self) -> str:
        return self.definition.normalization(self.normalization)


@dataclass(frozen=True)
class ShardSettings:
    shard_size: int = setting(
        500,
        scope="run",
        minimum=1,
        help="scoreable variants per shard (whole sites are kept together)",
    )


@dataclass(frozen=True)
class EvaluationSettings:
    """Intervals of every metric (metrics, suite tasks)."""

    bootstrap: int = setting(
        1000,
        scope="run",
        minimum=0,
        help="resamples for the 95% percentile bootstrap intervals of every metric (0 = none)",
    )
    seed: int = setting(0, scope="cli", help="random seed of the bootstrap")


@dataclass(frozen=True)
class MetricSettings:
    """What compute_metrics reports for a dataset."""

    headline_metrics: tuple[str, ...] = setting(
        ("auroc",),
        flag="headline",
        help="metrics of this dataset in the results table, e.g. auroc, auprc_trapezoid, "
        "average_precision, average_precision_by_chrom_weighted_drop_single_class (TraitGym)",
    )
    breakdown_columns: tuple[str, ...] = setting(
        ("region", "variant_type", "consequence"),
        flag="breakdown",
        help="columns whose groups get their own metrics (when present)",
    )
    spearman_column: str | None = setting(
        None, help="continuous functional score column for Spearman against delta (BRCA2 DMS)"
    )
    evaluation: EvaluationSettings = group(EvaluationSettings)


@dataclass(frozen=True)
class RecoverySettings:
    """Sequence recovery (GENERator's generative task)."""

    decoder: Literal["token", "fns_marginal", "fns_conditional"] = setting(
        "token", help="greedy decoder (token = published)"
    )
    max_prompt_bp: int = setting(6144, minimum=6, help="prompt = the rightmost bases, whole 6-mers")
    new_tokens: int = setting(5, minimum=1, help="tokens generated")
    score_bp: int = setting(30, minimum=1, help="accuracy denominator in bp")


@dataclass(frozen=True)
class PerturbationSettings:
    """Perturbation pairs: S(original) > S(perturbed)."""

    scoring: Literal["token", "bp"] = setting(
        "token", help="mean token log-prob (published) or FNS bp-level"
    )
    normalization: Literal["full_vocab", "dna_block"] = setting(
        "full_vocab", help="token scoring: softmax over the vocabulary or the 6-mers"
    )

    @property
    def resolved_normalization(self) -> str:
        """FNS marginals are always over the 6-mer block; token scores use `normalization`."""
        return self.normalization if self.scoring == "token" else "dna_block"


# ---- config entries ----------------------------------------------------------------------
_KEY = r"^[A-Za-z0-9_.-]+$"


@dataclass(frozen=True)
class DatasetConfig:
    panel: str = setting(help="variant panel: VCF/BCF, Parquet, TSV or CSV")
    reference: str = setting(
        help="genome of this dataset's build: FASTA (plain or bgzipped; a missing .fai/.gzi "
        "is built next to it) or a GENERator-style Parquet with columns ID, Sequence"
    )
    models: tuple[str, ...] | None = setting(
        None, help="model keys to score this dataset with (default all)"
    )
    export_vcf: bool = setting(
        True, help="write the results as results.vcf.gz (scores in INFO, tabix-indexed)"
    )
    checks: PanelSettings = group(PanelSettings)
    labels: LabelSettings = group(LabelSettings)
    scoring: RecipeSettings = group(RecipeSettings)
    shards: ShardSettings = group(ShardSettings)
    metrics: MetricSettings = group(MetricSettings)

    @property
    def build(self) -> str:
        return self.checks.build


@dataclass(frozen=True)
class ScanChunkSettings:
    """How a scan's targets are cut into jobs (plan-scan) and written (scan-chunk, merge-scan)."""

    chunk_bp: int = setting(
        50_000_000,
        scope="run",
        minimum=1_000,
        help="scored bases per scan job: 50 Mbp is ~12 min of Carbon-3B on one A100 at 50% of "
        "bf16 peak (estimate; profiles/slurm-a10 and slurm-h100 set 30 and 150 Mbp)",
    )
    tsv_decimals: int = setting(
        2,
        minimum=1,
        maximum=6,
        help="decimals of the score in the per-chromosome tabix TSV (the Parquet dataset keeps "
        "every marginal)",
    )


@dataclass(frozen=True)
class ScanConfig:
    reference: str = setting(help="genome FASTA (or GENERator Parquet)")
    build: str = setting(help="genome build of the reference (e.g. hg38)")
    regions: tuple[str, ...] = setting(
        single=True,
        help="what to scan: `all` (every contig of the reference), a list of contig names and "
        "CHROM:START-END (1-based inclusive), or the path of a BED file (overlapping and "
        "adjacent intervals merged); contig names are matched through the panel aliases "
        "(chr1 = 1 = NC_000001.11)",
    )
    models: tuple[str, ...] | None = setting(None, help="model keys to scan with (default all)")
    tiles: TileSettings = group(TileSettings)
    chunks: ScanChunkSettings = group(ScanChunkSettings)


TASK_KINDS = ("sequence_recovery", "perturbation")


@dataclass(frozen=True)
class TaskConfig:
    kind: Literal["sequence_recovery", "perturbation"] = setting(
        help="sequence_recovery (columns sequence, label, type) or perturbation (columns "
        "original_sequence, sequence)"
    )
    path: str = setting(help="Parquet, TSV or CSV file of the task")
    models: tuple[str, ...] | None = setting(
        None, help="model keys to run this task with (default all)"
    )
    recovery: RecoverySettings = group(RecoverySettings)
    perturbation: PerturbationSettings = group(PerturbationSettings)
    evaluation: EvaluationSettings = group(EvaluationSettings)

    @property
    def settings(self) -> RecoverySettings | PerturbationSettings:
        return self.recovery if self.kind == "sequence_recovery" else self.perturbation


@dataclass(frozen=True)
class HubFileConfig:
    repo_id: str = setting(help="Hub repository id")
    filename: str = setting(
        help="file in the repository, or a glob of Parquet files to concatenate"
    )
    out: str = setting(help="where datasets and tasks read the file")
    revision: str | None = setting(None, help="commit, tag or branch")
    repo_type: Literal["dataset", "model"] = setting("dataset", help="Hub repository type")


@dataclass(frozen=True)
class DownloadConfig:
    url: str = setting(help="where the file is published (https://, or file:// for a local copy)")
    out: str = setting(help="where datasets and tasks read the file")
    sha256: str | None = setting(
        None,
        help="sha256 of the file as published (before gunzip); the download is refused on a "
        "mismatch, and without it (the refusal prints the hash to check and pin)",
        pattern=r"^[0-9a-f]{64}$",
    )
    gunzip: bool = setting(False, help="decompress a gzip download into `out`")


# top-level sections: name -> (entry class, at least one entry required, description)
SECTIONS: dict[str, tuple[type, bool, str]] = {
    "models": (ModelSettings, True, "models by key (keys are used in output paths)"),
    "datasets": (
        DatasetConfig,
        False,
        "variant panels, each scored with a recipe (a config needs datasets, scans or tasks)",
    ),
    "scans": (
        ScanConfig,
        False,
        "regions in which every possible SNV is scored (one pass per tile)",
    ),
    "tasks": (
        TaskConfig,
        False,
        "zero-shot suite tasks other than variant panels: sequence recovery and perturbation",
    ),
    "hub_files": (
        HubFileConfig,
        False,
        "public dataset files fetched from the Hugging Face Hub by head-node rules "
        "(fetch_hub_<name>; needs internet) into `out`, where datasets and tasks read them",
    ),
    "downloads": (
        DownloadConfig,
        False,
        "other public files (a reference genome) fetched by head-node rules (fetch_url_<name>; "
        "needs internet) from a pinned URL, checked against their sha256, into `out`",
    ),
}
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
    hub_files: dict[str, HubFileConfig]
    downloads: dict[str, DownloadConfig]
    baseline: str | None = None
    sha256: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, config: Mapping[str, Any]) -> RunConfig:
        """Typed config from the (validated) YAML mapping; refuses what cannot be meant."""
        known = {"outdir", "baseline", "sha256", *SECTIONS, *run_fields()}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ConfigError(f"unknown top-level config key(s) {unknown}")
        run = {name: config[name] for name in run_fields() if name in config}
        for key, task in (config.get("tasks") or {}).items():
            _check_task_keys(key, task)
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
            **sections,
        )
        run_config.check()
        return run_config

    def check(self) -> None:
        if not self.models:
            raise ConfigError("the config defines no models")
        if not (self.datasets or self.scans or self.tasks):
            raise ConfigError("the config defines no datasets, scans or tasks: nothing to do")
        if "suite" in self.datasets:
            raise ConfigError("dataset name 'suite' is reserved: OUTDIR/suite holds suite tasks")
        for key, model in self.models.items():
            check_unpinned_remote_code(key, model)
        for section in ("datasets", "scans", "tasks"):
            for key, entry in getattr(self, section).items():
                missing = sorted(set(entry.models or ()) - set(self.models))
                if missing:
                    raise ConfigError(f"{section}.{key}: unknown model(s) {missing}")
        for key, dataset in self.datasets.items():
            self._check_scan_lookup(key, dataset)
        check_shared_references(
            [(f"dataset {k!r}", d.reference, d.build) for k, d in self.datasets.items()]
            + [(f"scan {k!r}", s.reference, s.build) for k, s in self.scans.items()]
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

    def scan_lookups(self) -> dict[str, str]:
        """Datasets scored by lookup in a scan (recipe from_scan) -> the scan's key."""
        return {
            key: d.scoring.scan
            for key, d in self.datasets.items()
            if d.scoring.recipe == "from_scan" and d.scoring.scan is not None
        }

    def entry_models(self, entry: DatasetConfig | ScanConfig | TaskConfig) -> list[str]:
        return list(entry.models) if entry.models is not None else list(self.models)


def _check_task_keys(key: str, task: Mapping[str, Any]) -> None:
    """A task entry may only set the settings of its own kind (the schema fills every task
    key's default, so a key of the other kind counts only when it differs from its default)."""
    other = (
        PerturbationSettings() if task.get("kind") == "sequence_recovery" else RecoverySettings()
    )
    changed = sorted(
        f.name for f in fields(other) if f.name in task and task[f.name] != getattr(other, f.name)
    )
    if changed:
        raise ConfigError(f"tasks.{key}: {changed} do not apply to a {task.get('kind')} task")


def _is_sha256(value: Any) -> bool:
    import re

    return isinstance(value, str) and re.fullmatch(SHA256_PATTERN[1:-1], value) is not None


# ---- checks the workflow runs while it parses ------------------------------------------------
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


# the rules that run a model (a GPU profile gives each of them a GPU)
MODEL_RULES = ("score_shard", "scan_chunk", "score_recovery", "score_perturbation")


def check_gpu_profile(
    rule: str, resources: Mapping[str, Any], models: Mapping[str, ModelSettings]
) -> None:
    """A profile that gives `rule` a GPU (gpu / gpu_model in `resources`, the profile's raw
    values) needs models that run on CUDA: a CPU model would hold a GPU it never touches."""
    requested = [
        name
        for name in ("gpu", "gpu_model")
        if name in resources and str(resources[name]).strip("'\"") not in ("", "0")
    ]
    cpu_models = sorted(k for k, m in models.items() if not m.device.startswith("cuda"))
    if requested and cpu_models:
        raise ConfigError(
            f"the profile gives {rule} a GPU ({', '.join(requested)}), but model(s) "
            f"{', '.join(cpu_models)} have device {models[cpu_models[0]].device!r}: set "
            "`device: cuda` for them, or run them under a profile that sends "
            f"{rule} to a CPU partition (README, 'Running on a cluster')"
        )


# ---- run-level settings, names, the JSON schema ---------------------------------------------
def run_fields() -> dict[str, tuple[dataclasses.Field, Any]]:
    """Settings whose config key is at the top level (one value for every entry), with their
    type annotation."""
    out: dict[str, tuple[dataclasses.Field, Any]] = {}
    for entry_cls, _, _ in SECTIONS.values():
        for f, hint in flat_fields(entry_cls):
            if f.metadata["scope"] == "run":
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


def json_schema() -> dict[str, Any]:
    """The workflow config's JSON schema (draft 2020-12), defaults included."""
    properties: dict[str, Any] = {
        "outdir": {"type": "string", "default": OUTDIR_DEFAULT, "description": "output folder"}
    }
    properties["baseline"] = {"type": ["string", "null"], "default": None}
    properties["baseline"]["description"] = BASELINE_HELP
    properties["sha256"] = {
        "type": "object",
        "default": {},
        "description": SHA256_HELP,
        "additionalProperties": {"type": "string", "pattern": SHA256_PATTERN},
    }
    for name, (f, hint) in run_fields().items():
        properties[name] = schema_property(f, hint)
    for name, (entry_cls, required, description) in SECTIONS.items():
        section: dict[str, Any] = {
            "type": "object",
            "description": description,
            "propertyNames": {"pattern": _KEY},
            "additionalProperties": entry_schema(entry_cls),
        }
        if required:
            section["minProperties"] = 1
        else:
            section["default"] = {}
        properties[name] = section
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": "carbon-vep workflow configuration (generated from carbon_vep.config: "
        "run `carbon-vep config-schema --out workflow/schemas/config.schema.yaml`)",
        "type": "object",
        "properties": properties,
        "required": [name for name, (_, required, _) in SECTIONS.items() if required],
        "additionalProperties": False,
    }


def schema_yaml() -> str:
    import yaml

    header = (
        "# Generated from src/carbon_vep/config.py by `carbon-vep config-schema`; do not edit.\n"
    )
    return header + yaml.safe_dump(json_schema(), sort_keys=False, width=100, allow_unicode=True)


# ---- the demo config -------------------------------------------------------------------------
DEMO_CONFIG = "config/config.yaml"
# inputs shipped with the workflow: the demo fragment and panels, and the small whole genome
SHIPPED_RESOURCES = ("resources/demo/", "resources/genome/")


def resolve_shipped_resources(config: Any, workflow_dir: str) -> Any:
    """`config` with its paths to the shipped inputs (resources/demo/..., resources/genome/...)
    found under `workflow_dir` (the checkout's root), so that the demo, CI and lambda configs run
    from any working directory and as a Snakemake module. What a run writes (the demo model too)
    stays relative."""
    import os

    if os.path.abspath(workflow_dir) == os.path.abspath(os.curdir):
        return config
    if isinstance(config, dict):
        return {
            key: resolve_shipped_resources(value, workflow_dir) for key, value in config.items()
        }
    if isinstance(config, list):
        return [resolve_shipped_resources(value, workflow_dir) for value in config]
    if isinstance(config, str) and config.startswith(SHIPPED_RESOURCES):
        return os.path.join(workflow_dir, config)
    return config


def demo_config(workflow_dir: str) -> dict[str, Any]:
    """The demo config (what snakemake runs when given no config), read from `workflow_dir`."""
    import os

    import yaml

    with open(os.path.join(workflow_dir, DEMO_CONFIG)) as handle:
        return yaml.safe_load(handle)
