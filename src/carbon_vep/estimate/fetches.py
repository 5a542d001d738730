"""The estimate's first two tables: every file a run fetches (Hub files, Genomic-NIAH cells, Hub
models, URLs) with the revision it is pinned to, and the jobs of each rule as far as they are
known before a checkpoint (make_shards, plan_scan) runs. No torch, no Snakemake.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from carbon_vep.config.entries import ScanConfig
from carbon_vep.config.run import RunConfig
from carbon_vep.config.tasks import TASK_KINDS
from carbon_vep.estimate.counts import Count, genome_bases, input_count


@dataclass(frozen=True)
class Fetch:
    rule: str
    source: str
    file: str  # "": the whole snapshot of a model
    revision: str


@dataclass(frozen=True)
class JobCount:
    rule: str
    jobs: int | None  # None: known only after a checkpoint
    how: str


def revision_text(revision: str | None) -> str:
    if not revision:
        return "main (unpinned)"
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        return revision
    return f"{revision} (a branch or tag: unpinned)"


def hub_models(run: RunConfig) -> dict[str, Any]:
    """The models fetch_model caches: given as a Hub id, not built, not a local folder (as
    workflow.jobs.Jobs decides it)."""
    return {k: m for k, m in run.models.items() if not m.build_demo and not os.path.isdir(m.path)}


def fetches(run: RunConfig) -> list[Fetch]:
    out = [
        Fetch(
            f"fetch_hub_{name}",
            f"{h.repo_id} ({h.repo_type})",
            h.filename,
            revision_text(h.revision),
        )
        for name, h in run.hub_files.items()
    ]
    out += _niah_fetches(run)
    for key, model in hub_models(run).items():
        out.append(
            Fetch(f"fetch_model {key}", f"{model.path} (model)", "", revision_text(model.revision))
        )
    for name, download in run.downloads.items():
        pin = (
            "sha256 pinned" if download.sha256 else "sha256 not pinned: the run stops, printing it"
        )
        out.append(Fetch(f"fetch_url_{name}", download.url, download.out, pin))
    return out


def _niah_fetches(run: RunConfig) -> list[Fetch]:
    """Each cell of each `source: hub` entry (an entry fetches its own copy)."""
    out = []
    for key, entry in run.niah.items():
        for cell in entry.cells() if entry.source == "hub" else []:
            hub = entry.hub_file(cell, out="")  # where it lands is not part of the bill
            out.append(
                Fetch(
                    f"fetch_niah_cell {key}/{cell.name}",
                    f"{hub.repo_id} (dataset)",
                    hub.filename,
                    revision_text(hub.revision),
                )
            )
    return out


# ---- jobs per rule -------------------------------------------------------------------------
def job_counts(run: RunConfig) -> list[JobCount]:
    """The jobs of every rule that fetches, builds or runs a model (rules of no job left out)."""
    cells = {
        s: sum(len(e.cells()) for e in run.niah.values() if e.source == s) for s in ("hub", "build")
    }
    out = [
        JobCount("fetch_hub_<name>", len(run.hub_files), "one a hub_files entry"),
        JobCount("fetch_url_<name>", len(run.downloads), "one a downloads entry"),
        JobCount("fetch_model", len(hub_models(run)), "one a model given as a Hub id"),
        JobCount(
            "build_demo_model_<name>",
            sum(m.build_demo for m in run.models.values()),
            "one a build_demo model",
        ),
        JobCount("fetch_niah_cell", cells["hub"], "one a cell of each `source: hub` entry"),
        JobCount("build_niah_cell", cells["build"], "one a cell of each `source: build` entry"),
    ]
    out += _panel_jobs(run) + _scan_jobs(run) + _task_jobs(run) + _niah_jobs(run)
    return [job for job in out if job.jobs != 0]


def _panel_jobs(run: RunConfig) -> list[JobCount]:
    lookups = run.scan_lookups()
    scored = [k for k in run.datasets if k not in lookups]
    out = [JobCount("make_shards (checkpoint)", len(scored), "one a dataset scored by a model")]
    for key in scored:
        dataset, models = run.datasets[key], len(run.entry_models(run.datasets[key]))
        count = input_count(dataset.panel, run)
        shards = panel_shards(count, dataset.shards.shard_size)
        if count is None or shards is None:
            out.append(JobCount(f"score_shard [{key}]", None, "after make_shards (rows unknown)"))
            continue
        how = (
            f"~{shards:,} shards x {models} model(s): {count.rows:,} rows / shard_size "
            f"{dataset.shards.shard_size:,} (exact after make_shards)"
        )
        out.append(JobCount(f"score_shard [{key}]", shards * models, how))
    lookup_jobs = sum(len(run.entry_models(run.datasets[k])) for k in lookups)
    return out + [JobCount("annotate_from_scan", lookup_jobs, "dataset x model (no model run)")]


def _scan_jobs(run: RunConfig) -> list[JobCount]:
    out = [JobCount("plan_scan (checkpoint)", len(run.scans), "one a scan")]
    for key, scan in run.scans.items():
        bases, models = scan_bases(scan), len(run.entry_models(scan))
        chunks = scan_chunks(bases, scan.chunks.chunk_bp)
        if bases is None or chunks is None:
            out.append(JobCount(f"scan_chunk [{key}]", None, "after plan_scan (bases unknown)"))
            continue
        how = (
            f"~{chunks:,} chunks x {models} model(s): <= {bases.rows:,} bases / chunk_bp "
            f"{scan.chunks.chunk_bp:,} (exact after plan_scan)"
        )
        out.append(JobCount(f"scan_chunk [{key}]", chunks * models, how))
    return out


def _task_jobs(run: RunConfig) -> list[JobCount]:
    """One job a task and model, and one a sweep point and model (config.tasks: `sweeps`);
    a generation kind's times each entry's `parts`; and one merge job each (its kind's
    merge_rule, on a CPU)."""
    out = []
    for kind in TASK_KINDS.values():
        tasks = {k: t for k, t in run.tasks.items() if t.kind == kind.name}
        models = {k: len(run.entry_models(t)) for k, t in tasks.items()}
        points = sum(len(run.sweep_points(k)) * models[k] for k in tasks)
        how = "task x model" + (f" + {points} sweep point x model" if points else "")
        runs = {k: models[k] * (1 + len(run.sweep_points(k))) for k in tasks}  # headline, points
        jobs = sum(runs[k] * t.parts for k, t in tasks.items())
        if kind.generation and any(t.parts > 1 for t in tasks.values()):
            how += " (x each task's parts)"
        out.append(JobCount(kind.rule, jobs, how))
        out.append(JobCount(kind.merge_rule, sum(runs.values()), "task (or point) x model"))
    return out


def _niah_jobs(run: RunConfig) -> list[JobCount]:
    out = []
    for key, entry in run.niah.items():
        cells, models, parts = len(entry.cells()), len(run.entry_models(entry)), entry.row_ranges()
        how = (
            f"{cells} cells x {models} model(s) x {len(parts)} row ranges ({entry.rows:,} "
            f"rows a cell, rows_per_job {entry.rows_per_job:,})"
        )
        out.append(JobCount(f"score_niah [{key}]", cells * models * len(parts), how))
    merges = sum(len(e.cells()) * len(run.entry_models(e)) for e in run.niah.values())
    return out + [JobCount("merge_niah", merges, "cell x model")]


def panel_shards(count: Count | None, shard_size: int) -> int | None:
    """A scored panel's score_shard jobs a model, from its row count (input_count): its rows
    over shard_size (None: rows unknown before make_shards)."""
    return None if count is None else math.ceil(count.rows / shard_size)


def scan_chunks(bases: Count | None, chunk_bp: int) -> int | None:
    """A scan's scan_chunk jobs a model, from its bases (scan_bases): over chunk_bp (None:
    unknown before plan_scan)."""
    return None if bases is None else math.ceil(bases.rows / chunk_bp)


def scan_bases(scan: ScanConfig) -> Count | None:
    """The bases a scan targets: from the reference's .fai (N runs counted in, so a bound),
    CHROM:START-END regions alone, or a whole genome's documented ACGT count."""
    from carbon_vep.scan.targets import resolve_targets
    from carbon_vep.scan.tiling import parse_region

    fai = f"{scan.reference}.fai"
    if os.path.isfile(fai):
        with open(fai) as handle:
            lengths = {f[0]: int(f[1]) for f in (line.split("\t") for line in handle) if len(f) > 1}
        targets = resolve_targets(scan.regions, lengths)
        bases = sum(end - start for spans in targets.values() for start, end in spans)
        return Count(bases, "the reference's .fai")
    if tuple(scan.regions) == ("all",):
        return genome_bases(scan.build)
    try:
        spans = [parse_region(region) for region in scan.regions]
    except ValueError:  # contig names or a BED file: their lengths need the reference
        return None
    return Count(sum(end - start for _, start, end in spans), "the regions")
