"""The bill before the run: from a config and the resources a profile gives each rule, every
file to fetch (with the revision it is pinned to, or not), the jobs of each rule as far as they
are known before a checkpoint runs, and, for each task and model, the GPU class its rule gets
and the GPU-hours the arithmetic of `costs` gives (with the H100 check's measured rate beside it
where it measured the same path). `carbon-vep estimate` prints it, and so does `snakemake -n`.
No torch, no Snakemake.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from carbon_vep.config.entries import NiahConfig
from carbon_vep.config.gpus import niah_row_seconds
from carbon_vep.config.run import RunConfig
from carbon_vep.config.stages import ModelSettings, TileSettings
from carbon_vep.config.tasks import TASK_KINDS, SweepPoint
from carbon_vep.config.workflow import (
    DEFAULT_GPU_CLASS,
    profile_gpu_class,
    profile_runtime_minutes,
    profile_value,
    read_config_file,
    read_run_config,
)
from carbon_vep.errors import InputError
from carbon_vep.estimate.costs import (
    MEASURED_H100_SCAN_BASES_S,
    TASK_WORK,
    Shape,
    Work,
    gpu_seconds,
    item_seconds,
    job_start_seconds,
    measured_niah_hours,
    measured_work_hours,
    panel_work,
    pass_flops,
    shape_of,
)
from carbon_vep.estimate.counts import Count, input_count
from carbon_vep.estimate.fetches import (
    Fetch,
    JobCount,
    fetches,
    job_counts,
    panel_shards,
    scan_bases,
    scan_chunks,
)

Resources = Mapping[str, Mapping[str, Any]]  # rule -> its resources, as a profile sets them


@dataclass(frozen=True)
class GpuLine:
    task: str
    model: str
    rule: str
    gpu: str | None  # the GPU class the hours are on (None: a CPU model)
    gpu_label: str
    items: str
    count_from: str
    work: str  # what an item costs, as the arithmetic assumes it
    pflop: float | None
    hours: float | None  # on `gpu`, at ASSUMED_EFFICIENCY of its bf16 peak
    measured_h100_hours: float | None = None  # at the H100 check's rate for the same path
    jobs: int | None = None  # the rule's jobs for this line (None: known after a checkpoint)
    # the jobs' start-up (costs.job_start_seconds) on `gpu`, and how it was reckoned or why not
    startup_hours: float | None = None
    startup: str = ""


@dataclass(frozen=True)
class LongJob:
    """A line whose jobs, by the bill, outlast the time limit the profile gives their rule."""

    line: GpuLine
    hours: float  # a job's: its share of the line's hours and its start-up
    basis: str  # which of the line's figures: the measured rate or the arithmetic
    limit_minutes: float  # the profile's runtime at the first attempt


@dataclass(frozen=True)
class Bill:
    fetches: list[Fetch]
    jobs: list[JobCount]
    gpu: list[GpuLine]
    long_jobs: list[LongJob]


def estimate(run: RunConfig, resources: Resources) -> Bill:
    """The bill of `run` under a profile's `resources` (rule -> resources; {} for none)."""
    lines = gpu_lines(run, resources)
    return Bill(fetches(run), job_counts(run), lines, long_jobs(lines, resources))


def long_jobs(lines: Sequence[GpuLine], resources: Resources) -> list[LongJob]:
    """The lines whose jobs need longer than the profile's `runtime` for their rule at the
    first attempt (config.workflow.profile_runtime_minutes; a rule whose limit the workflow
    derives, or no profile, is not checked): a job's share of the line's H100-hours at the
    measured rate where the rule runs on H100s and the rate is measured, else of its
    arithmetic, and its start-up. A job killed at the limit holds its GPU that long for
    nothing."""
    out = []
    for line in lines:
        limit = profile_runtime_minutes(resources.get(line.rule, {}))
        if limit is None or line.gpu is None or not line.jobs:
            continue
        hours, basis = line.hours, "arithmetic"
        if line.gpu == "H100" and line.measured_h100_hours is not None:
            hours, basis = line.measured_h100_hours, "measured rate"
        if hours is None:
            continue
        job = (hours + (line.startup_hours or 0.0)) / line.jobs
        if job * 60 > limit:
            out.append(LongJob(line, job, basis, limit))
    return out


# ---- GPU time per task and model -----------------------------------------------------------
def gpu_of(rule: str, device: str, resources: Resources) -> tuple[str | None, str]:
    """The GPU class a rule's jobs get (None for a CPU model), and how the estimate names it."""
    if not device.startswith("cuda"):
        return None, f"none (device {device})"
    named = profile_gpu_class(resources.get(rule, {}))
    if named:
        return named, named
    given = profile_value(resources.get(rule, {}), "gpu_model")
    if given:  # a class the bill has no figures for: reckoned as if none were named
        return DEFAULT_GPU_CLASS, f"{DEFAULT_GPU_CLASS} (default: {given} unknown)"
    return DEFAULT_GPU_CLASS, f"{DEFAULT_GPU_CLASS} (default)"


def gpu_lines(run: RunConfig, resources: Resources) -> list[GpuLine]:
    out = []
    for key, dataset in run.datasets.items():
        if dataset.scoring.definition.needs_model:
            for model in run.entry_models(dataset):
                out.append(_panel_line(run, key, model, resources))
    for key, task in run.tasks.items():
        for model in run.entry_models(task):
            points = (None, *run.sweep_points(key))  # the headline, then each sweep point
            out += [_task_line(run, key, model, resources, point) for point in points]
    for key, scan in run.scans.items():
        out += [_scan_line(run, key, model, resources) for model in run.entry_models(scan)]
    for key, entry in run.niah.items():
        for model in run.entry_models(entry):
            out += [_niah_line(run, key, ctx, model, resources) for ctx in sorted(entry.contexts)]
    return out


def _model(run: RunConfig, key: str) -> tuple[Shape, str]:
    shape = shape_of(run.models[key])
    return shape, f"{key} ({shape.name})"


@dataclass(frozen=True)
class _Items:
    """`count` items of `work` each, in `jobs` jobs of a model of `shape` run as `settings`."""

    shape: Shape
    count: Count | None
    work: Work | None
    unit: str
    settings: ModelSettings
    jobs: int | None
    engine: str = "transformers"


def startup(
    settings: ModelSettings,
    shape: Shape,
    jobs: int | None,
    gpu: str | None,
    engine: str = "transformers",
) -> tuple[float | None, str]:
    """GPU-hours of `jobs` model jobs' start-up (costs.job_start_seconds: measured on an H200,
    reckoned the same on every class) and how, or why it is not priced. `engine`: what the
    jobs run on (a model's `engine` applies to the generation tasks only)."""
    if gpu is None:
        return None, ""  # a CPU model: no GPU-hours
    if engine != "transformers":
        return None, f"{engine}'s start: not measured"
    if jobs is None or shape.dims is None:
        return None, "jobs unknown" if jobs is None else "shape unknown"
    seconds = job_start_seconds(shape.dims)
    how = f"{jobs:,} x {seconds:.1f} s"
    if settings.compile_layers:
        how += " + each job's compile (not measured on a GPU)"
    return jobs * seconds / 3600, how


def _line(task: str, model: str, rule: str, resources: Resources, it: _Items) -> GpuLine:
    """A line of the items' PFLOP and their hours on the rule's GPU class."""
    gpu, label = gpu_of(rule, it.settings.device, resources)
    startup_hours, startup_how = startup(it.settings, it.shape, it.jobs, gpu, it.engine)
    rows = it.count.rows if it.count else None
    flops = it.work.flops * rows if it.work and rows is not None else None
    what = it.work.what if it.work else it.shape.source if it.shape.dims is None else "unknown"
    return GpuLine(
        task,
        model,
        rule,
        gpu,
        label,
        items=f"{rows:,} {it.unit}" if rows is not None else f"{it.unit}: unknown",
        count_from=it.count.source if it.count else "unknown until fetched or checked",
        work=what,
        pflop=_pflop(flops),
        hours=_work_hours(it.work, it.shape.dims, rows, gpu),
        measured_h100_hours=(
            measured_work_hours(it.shape.name, it.work, rows) if it.work and rows else None
        ),
        jobs=it.jobs,
        startup_hours=startup_hours,
        startup=startup_how,
    )


def _pflop(flops: float | None) -> float | None:
    return None if flops is None else flops / 1e15


def _hours(flops: float | None, gpu: str | None) -> float | None:
    return gpu_seconds(flops, gpu) / 3600 if flops is not None and gpu else None


def _work_hours(
    work: Work | None, dims: Mapping[str, int] | None, rows: int | None, gpu: str | None
) -> float | None:
    """GPU-hours of `rows` items of `work` (costs.item_seconds: a generation's decode steps at
    no less than the memory floor)."""
    if work is None or dims is None or rows is None or gpu is None:
        return None
    return rows * item_seconds(work, dims, gpu) / 3600


def _panel_line(run: RunConfig, key: str, model_key: str, resources: Resources) -> GpuLine:
    dataset = run.datasets[key]
    shape, model = _model(run, model_key)
    work = panel_work(dataset.scoring, shape.dims) if shape.dims else None
    count, settings = input_count(dataset.panel, run), run.models[model_key]
    jobs = panel_shards(count, dataset.shards.shard_size)
    items = _Items(shape, count, work, "variants", settings, jobs)
    return _line(
        f"datasets.{key} ({dataset.scoring.recipe})", model, "score_shard", resources, items
    )


def _task_line(
    run: RunConfig, key: str, model_key: str, resources: Resources, point: SweepPoint | None
) -> GpuLine:
    """A task's jobs with one model: its headline's, or a sweep point's (its own settings)."""
    task = run.tasks[key] if point is None else run.tasks[key].at(point)
    kind = TASK_KINDS[task.kind]
    shape, model = _model(run, model_key)
    count = input_count(task.path, run)
    bp = count.sequence_bp if count else None
    settings = run.models[model_key]
    work = TASK_WORK[kind.name](task.settings, settings, shape.dims, bp) if shape.dims else None
    vllm = kind.generation and settings.engine == "vllm"
    if work and vllm:  # the check measured our engine only
        work = replace(work, path=None)
    engine = settings.engine if kind.generation else "transformers"
    items = _Items(shape, count, work, kind.unit, settings, task.parts, engine)
    swept = f", {point.setting} {point.value:,}" if point else ""
    return _line(f"tasks.{key} ({task.kind}{swept})", model, kind.rule, resources, items)


def _scan_line(run: RunConfig, key: str, model_key: str, resources: Resources) -> GpuLine:
    from carbon_vep.scan.plan import scan_flops

    scan, (shape, model), settings = run.scans[key], _model(run, model_key), run.models[model_key]
    bases, tiles = scan_bases(scan), scan.tiles
    jobs = scan_chunks(bases, scan.chunks.chunk_bp)
    gpu, label = gpu_of("scan_chunk", settings.device, resources)
    startup_hours, startup_how = startup(settings, shape, jobs, gpu)
    flops = scan_flops(bases.rows, tiles, shape.dims) if bases and shape.dims else None
    rate = MEASURED_H100_SCAN_BASES_S.get(shape.name)
    measured_tiles = tiles == TileSettings()  # the check scanned with the default tiles
    return GpuLine(
        f"scans.{key}",
        model,
        "scan_chunk",
        gpu,
        label,
        items=f"<= {bases.rows:,} bases" if bases else "bases: after plan_scan",
        count_from=bases.source if bases else "plan_scan",
        work=f"tiles of {tiles.tile_bp:,} bp, min_context {tiles.min_context:,}",
        pflop=_pflop(flops),
        hours=_hours(flops, gpu),
        measured_h100_hours=bases.rows / rate / 3600 if bases and rate and measured_tiles else None,
        jobs=jobs,
        startup_hours=startup_hours,
        startup=startup_how,
    )


def niah_cell_hours(entry: NiahConfig, ctx: int, dims: Mapping[str, int], gpu: str) -> float:
    """GPU-hours of one cell: its rows' prefills at ASSUMED_EFFICIENCY (niah_row_seconds)."""
    return entry.rows * niah_row_seconds(dims, ctx, gpu) / 3600


def _niah_line(run: RunConfig, key: str, ctx: int, model_key: str, resources: Resources) -> GpuLine:
    """The cells of an entry at one context (its tasks cost the same), for one model."""
    entry, (shape, model), settings = run.niah[key], _model(run, model_key), run.models[model_key]
    cells = len([c for c in entry.cells() if c.ctx == ctx])
    jobs = cells * len(entry.row_ranges())
    gpu, label = gpu_of("score_niah", settings.device, resources)
    startup_hours, startup_how = startup(settings, shape, jobs, gpu, settings.engine)
    dims = shape.dims
    measured = measured_niah_hours(shape.name, ctx, entry.niah.prefill_chunk, entry.rows)
    ours = settings.engine == "transformers"  # the check measured our engine
    yarn = f", YaRN x{entry.niah.yarn_factor:g}" if entry.niah.yarn_factor else ""
    return GpuLine(
        f"niah.{key} {ctx:,} tokens{yarn}",
        model,
        "score_niah",
        gpu,
        label,
        items=f"{cells} cells x {entry.rows:,} rows",
        count_from=f"niah.{key}.rows",
        work=f"one {ctx:,}-token prefill a row",
        pflop=_pflop(cells * entry.rows * pass_flops(dims, ctx, 0) if dims else None),
        hours=cells * niah_cell_hours(entry, ctx, dims, gpu) if dims and gpu else None,
        measured_h100_hours=cells * measured if measured is not None and ours else None,
        jobs=jobs,
        startup_hours=startup_hours,
        startup=startup_how,
    )


# ---- a config and a profile, as the CLI reads them -------------------------------------------
def read_profile(folder: str | None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """A Snakemake profile's set-resources (rule -> resources) and its `config:` overrides."""
    import yaml

    if folder is None:
        return {}, {}
    path = Path(folder) / "config.yaml"
    if not path.is_file():
        raise InputError(str(path), "no Snakemake profile here (config.yaml)")
    profile = yaml.safe_load(path.read_text()) or {}
    resources = _set_resources(profile.get("set-resources") or {})
    overrides = {}
    for item in profile.get("config") or []:
        key, _, value = str(item).partition("=")
        overrides[key.strip()] = yaml.safe_load(value)
    return resources, overrides


def _set_resources(items: Mapping[str, Any] | list[str]) -> dict[str, dict[str, Any]]:
    """set-resources as a mapping (rule: {name: value}, the shipped profiles' form) or as
    Snakemake's command-line strings (`rule:name=value`)."""
    if isinstance(items, Mapping):
        return {rule: dict(values or {}) for rule, values in items.items()}
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        rule, _, setting = str(item).partition(":")
        name, _, value = setting.partition("=")
        out.setdefault(rule, {})[name] = value
    return out


def load_run(config: str, profile: str | None) -> tuple[RunConfig, dict[str, dict[str, Any]]]:
    """The config as a run under `profile` sees it (its `config:` list applied), read and
    checked as the workflow reads it (`read_run_config`: errors name the config file and key),
    and the profile's resources. Local inputs not found are not refused here (a bill may come
    before the data): `missing_inputs` says them beside the bill."""
    resources, overrides = read_profile(profile)
    source = f"config {config}"
    if overrides:
        source += f" (with profile {profile}'s `config:` overrides of {sorted(overrides)})"
    raw = {**read_config_file(config), **overrides}
    return read_run_config(raw, source, check_inputs=False), resources


def is_dry_run(argv: Sequence[str]) -> bool:
    """Whether a snakemake command line asks for a dry run (-n, --dry-run, -np, ...): read from
    the command line, because Snakemake decides on a dry run only after the Snakefile is parsed
    (`workflow.dryrun` is still False while common.smk runs)."""
    for arg in argv[1:]:
        if arg.startswith("--dry") and len(arg) > 5:  # argparse takes a long option's prefix
            return True
        if re.fullmatch(r"-[A-Za-z]+", arg) and "n" in arg:
            return True
    return False
