"""The bill before the run as Markdown tables (`carbon-vep estimate`, `snakemake -n`): the
files to fetch, the jobs per rule, GPU time per task and model with a total per GPU class, and
the arithmetic's assumptions under them. No torch, no Snakemake.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from carbon_vep import markdown
from carbon_vep.config.fields import ConfigError
from carbon_vep.config.gpus import ASSUMED_EFFICIENCY, GPU_CLASSES
from carbon_vep.config.run import RunConfig
from carbon_vep.config.workflow import (
    DEFAULT_GPU_CLASS,
    MODEL_RULES,
    check_gpu_profile,
    check_niah_profile,
    missing_inputs,
)
from carbon_vep.estimate.bill import Bill, GpuLine, LongJob, Resources, estimate, load_run

PEAKS = ", ".join(f"{name} {gpu.bf16_tflops:g}" for name, gpu in GPU_CLASSES.items())
ASSUMPTIONS = (
    f"Every GPU figure is **arithmetic**, not a measurement: matmul FLOPs (2 x the body's "
    f"parameters a token, attention over the tokens before it, the output-layer rows a scored "
    f"position uses) at {ASSUMED_EFFICIENCY:.0%} of each GPU class's bf16 peak ({PEAKS} "
    "TFLOP/s; the H100 check measured 717), loading, I/O and elementwise work left out "
    '(docs/gpu.md). "H100-hours, measured rate": the same tokens at the tokens/s the H100 GPU '
    "check measured on that path (2026-11-26, random weights of Carbon's shapes, "
    'docs/benchmarks.md). "Start-up": what the line\'s jobs hold a GPU for before their work '
    "(the interpreter, imports, CUDA's start, the inputs read, the weights loaded), at what an "
    "H200 measured a job of the product's (2026-11-28: 9.5 s, and the weights at 1.73 GB/s from "
    "local disk; a shared filesystem may load slower), the same on every class; in neither "
    "column, a job's compile (`compile_layers`) and vLLM's start. Items are an input's rows (a "
    "VCF record counts once per ALT, as ingest splits it): checks skip some, so a bound. A "
    "variant "
    "is taken as its own site (alternates of one site share the reference window). Carbon-8B's "
    "shape is Llama 3-8B's, as the Carbon report states (its config.json not seen)."
)


def bill_text(config: str, profile: str | None) -> str:
    """The bill of a config file under a profile folder (None: no profile), as Markdown, with
    what Snakemake would refuse when it reads the config under that profile."""
    run, resources = load_run(config, profile)
    where = f"profile {profile}" if profile else "no profile"
    return render(estimate(run, resources), where) + _refusals(run, resources)


def _refusals(run: RunConfig, resources: Resources) -> str:
    """The parse-time checks of the workflow (common.smk), as a note instead of an error: the
    profile's, and the local inputs the config names that are not here (yet)."""
    notes = ""
    try:
        for rule in MODEL_RULES:
            check_gpu_profile(rule, resources.get(rule, {}), run.models)
        check_niah_profile(resources.get("score_niah", {}), run)
    except ConfigError as err:
        notes += f"\n**Snakemake refuses this config under this profile**: {err}\n"
    missing = missing_inputs(run)
    if missing:
        notes += "\n**Snakemake refuses this config until these inputs are here** "
        notes += f"(relative paths from {os.path.abspath(os.curdir)}):\n\n"
        notes += "".join(f"- {line}\n" for line in missing)
    return notes


def render(bill: Bill, where: str = "this run's profile") -> str:
    lines = [f"## The bill before the run ({where})", "", ASSUMPTIONS, ""]
    fetched = [
        (f.rule, f.source, f"`{f.file}`" if f.file else "the snapshot", f.revision)
        for f in bill.fetches
    ]
    lines += [f"### Files to fetch ({len(bill.fetches)})", ""]
    lines += _lines(("rule", "from", "file", "revision"), fetched)
    lines += ["", "### Jobs per rule (before the checkpoints run)", ""]
    jobs = [(f"`{j.rule}`", _count(j.jobs), j.how) for j in bill.jobs]  # `<name>` is no HTML
    lines += _lines(("rule", "jobs", "how"), jobs)
    lines += ["", "### GPU time per task and model", ""]
    lines += _lines(
        (
            "task",
            "model (shape)",
            "rule: GPU",
            "items",
            "count from",
            "an item",
            "PFLOP",
            f"GPU-hours (arithmetic, {ASSUMED_EFFICIENCY:.0%} of peak)",
            "H100-hours, measured rate",
            "start-up GPU-hours (jobs x s a job)",
        ),
        [_gpu_row(g) for g in bill.gpu] + _total_rows(bill.gpu),
    )
    if bill.long_jobs:
        lines += ["", *_long_jobs(bill.long_jobs)]
    if any(g.gpu_label.endswith("(default)") for g in bill.gpu):
        lines += [
            "",
            f'GPU "{DEFAULT_GPU_CLASS} (default)": the profile names no GPU class '
            f"for the rule, so its CUDA models are reckoned on an {DEFAULT_GPU_CLASS}, as "
            "the workflow's time limits are.",
        ]
    unknown = sorted({g.gpu_label for g in bill.gpu if g.gpu_label.endswith(" unknown)")})
    if unknown:
        lines += [
            "",
            f"GPU {', '.join(f'{label!r}' for label in unknown)}: the profile's `gpu_model` "
            f"names no class the bill has figures for ({', '.join(GPU_CLASSES)}: a `gpu_model` "
            f"holding one of these names is that class), so its CUDA models are reckoned on an "
            f"{DEFAULT_GPU_CLASS}, as the workflow's time limits are, and no Genomic-NIAH cell "
            "is checked against the GPU's memory.",
        ]
    return "\n".join(lines) + "\n"


def _long_jobs(jobs: Sequence[LongJob]) -> list[str]:
    """The jobs that would be killed at their first attempt's time limit, and what to do."""
    head = [
        f"### Jobs longer than the profile's time limit ({len(jobs)} line(s))",
        "",
        "By the bill, each of these jobs needs longer than the `runtime` the profile gives its "
        "rule (minutes, at the first attempt): a job killed at its limit has held its GPU that "
        "long for nothing. Give the rule a longer `runtime` in the profile, or, where the rule "
        "can, more jobs (`shard_size`, `chunk_bp`, a NIAH entry's `rows_per_job`). A line "
        "without a measured rate is checked on its arithmetic, a floor: rollouts on the dynamic "
        "cache are host-bound, and the H100 measured Carbon-3B's at ~16x their arithmetic "
        "(docs/generation.md). score_recovery and score_niah derive their own limits when the "
        "profile gives them none.",
        "",
    ]
    rows = [
        (
            j.line.task,
            j.line.model,
            f"{j.line.rule}: {j.line.gpu_label}",
            _count(j.line.jobs),
            f"{_num(j.hours)} h ({j.basis})",
            f"{j.limit_minutes:g} min",
        )
        for j in jobs
    ]
    header = ("task", "model (shape)", "rule: GPU", "jobs", "a job", "time limit")
    return head + _lines(header, rows)


def _gpu_row(g: GpuLine) -> tuple[str, ...]:
    hours = f"{_num(g.hours)} {g.gpu}" if g.hours is not None else "—"
    return (
        g.task,
        g.model,
        f"{g.rule}: {g.gpu_label}",
        g.items,
        g.count_from,
        g.work,
        _num(g.pflop),
        hours,
        _num(g.measured_h100_hours),
        _startup_cell(g),
    )


def _startup_cell(g: GpuLine) -> str:
    if g.startup_hours is None:
        return f"— ({g.startup})" if g.startup else "—"
    return f"{_num(g.startup_hours)} {g.gpu} ({g.startup})"


def _total_rows(lines: Sequence[GpuLine]) -> list[tuple[str, ...]]:
    """A total per model (when there are several), then the total of the run."""
    models = list(dict.fromkeys(g.model for g in lines))
    per_model = [_total(f"total, {m}", [g for g in lines if g.model == m]) for m in models]
    return (per_model if len(models) > 1 else []) + [_total("**total**", lines)]


def _total(name: str, lines: Sequence[GpuLine]) -> tuple[str, ...]:
    """PFLOP, GPU-hours and start-up GPU-hours per GPU class of `lines`, and how many lines
    are unknown."""
    hours = _per_class([(g.gpu, g.hours) for g in lines])
    startup = _per_class([(g.gpu, g.startup_hours) for g in lines])
    pflop = sum(g.pflop for g in lines if g.pflop is not None)
    return (name, "", "", "", "", "", _num(pflop), hours, "", startup)


def _per_class(hours: Sequence[tuple[str | None, float | None]]) -> str:
    """GPU-hours summed per GPU class (CPU lines, of no class, left out), and how many GPU
    lines are unknown."""
    by_class: dict[str, float] = {}
    for gpu, h in hours:
        if h is not None and gpu:
            by_class[gpu] = by_class.get(gpu, 0.0) + h
    text = " + ".join(f"**{_num(h)} {gpu}-hours**" for gpu, h in by_class.items()) or "—"
    unknown = sum(h is None and gpu is not None for gpu, h in hours)
    return text + (f" ({unknown} line(s) unknown)" if unknown else "")


def _lines(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    return markdown.table(header, list(rows)).split("\n")


def _count(jobs: int | None) -> str:
    return "after the checkpoint" if jobs is None else f"{jobs:,}"


def _num(value: float | None) -> str:
    """Three significant figures, thousands separated; — for unknown."""
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value >= 0.001 else "< 0.001"
