"""The GPU check's first step, `product`: the product's own jobs on the device, as a cluster runs
them. Everything else the check measures is in its own process; this step is what a user gets.

A random-weight bf16 checkpoint of Carbon-3B's shape (a Carbon-500M-shaped one as its draft),
each saved with `save_pretrained` and its Carbon-layout tokenizer, and a synthetic genome with
its inputs (a labelled SNV panel, a region to scan, recovery prompts, perturbation pairs, a
haystack for Genomic-NIAH); then **Snakemake on the project's Snakefile** with a GPU config:
device cuda, dtype bfloat16, and the H100 profile's own `config:` values (batch_tokens,
prefill_chunk, chunk_bp, read from profiles/slurm-h100). The run covers every rule that runs a
model, each job through `carbon-vep` exactly as a cluster job runs it, its start-up probe
included:

- the panel through both VEP recipes (check_panel -> make_shards -> score_shard -> merge ->
  metrics), centered 8 kbp and right-end 24 kbp;
- a scan of a synthetic contig (plan -> scan_chunk -> calibration -> TSVs, tracks);
- Genomic-NIAH at the model's native 32k tokens (no YaRN, as published) and at 64k with YaRN
  x4 (score_niah);
- recovery rollouts with the draft (score_recovery), perturbation pairs (score_perturbation);
- the results table and the report.

One model job runs at a time (`--resources gpu=1`), so each job's GPU peak is its own. Each job
counts itself (model.job_record: load, tokens through the body, peak memory) into a folder this
step reads; the outputs' row counts are read from the files. A job that fails fails the step,
with Snakemake's tail and the failed jobs' logs (`--show-failed-logs`) in the report. Under
--smoke the same step runs on the CPU at toy sizes (what the test suite runs). Its checkpoints,
inputs and config: `product_setup`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import torch
import yaml

from carbon_vep.benchmark import harness
from carbon_vep.benchmark.gpu.product_reference import compare_with_official, markdown_rows
from carbon_vep.benchmark.gpu.product_setup import (
    PROFILE,
    SMOKE_PRODUCT,
    TARGET,
    ProductSizes,
    checkpoints,
    profile_config,
    write_config,
    write_inputs,
)
from carbon_vep.benchmark.harness import HG38_BASES, PROJECT_ROOT, TIMED_OUT, stop_group
from carbon_vep.config.gpus import attention_flops, body_flops
from carbon_vep.config.tasks import TASK_KINDS
from carbon_vep.markdown import table as markdown_table
from carbon_vep.model.job import PROBE_PHASE
from carbon_vep.model.job_record import RECORDS_ENV
from carbon_vep.workflow.paths import RunPaths

# the rules that run a model, by the carbon-vep command each runs (a job record names its command)
MODEL_RULES = {
    "score-shard": "score_shard",
    "scan-chunk": "scan_chunk",
    "score-niah": "score_niah",
    **{kind.command: kind.rule for kind in TASK_KINDS.values()},
}
LOG_TAIL_LINES = 60


def product(
    tokenizer: Any,
    vocab: Any,
    device: torch.device,
    shapes: dict,
    work: Path,
    smoke: bool,
    timeout_s: float,
    peak: float,
    official_limit: Callable[[], float] | None = None,
) -> dict[str, Any]:
    """Build the checkpoints and inputs, run the workflow, read what its jobs recorded (`peak`:
    the device's measured bf16 TFLOP/s, what each rule's FLOP rate is a share of); then the
    official approach on the same inputs within `official_limit()` seconds, asked once the
    workflow is done (None: what `timeout_s` left, at least 30)."""
    sizes = SMOKE_PRODUCT if smoke else ProductSizes()
    folder = work / "product"
    folder.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    models = checkpoints(tokenizer, vocab, device, shapes, folder, sizes)
    prepared = time.perf_counter()
    config = write_config(folder, models, write_inputs(folder / "inputs", sizes), device, sizes)
    env = job_env(folder, sizes)
    done = run_workflow(config, folder, env, timeout_s)
    workflow_s = time.perf_counter() - prepared
    outdir = folder / "results"
    records = job_records(folder / "jobs")
    result = {
        "config": str(config.name),
        "profile_config": profile_config(PROFILE),
        "device": device.type,
        "dtype": "bfloat16",
        "checkpoints_s": round(prepared - began, 1),
        "snakemake": done,
        "rules": rule_table(records, shapes["Carbon-3B"], peak),
        "outputs": output_rows(outdir),
        "scan": scan_figures(outdir),
        "official": [],
    }
    result["failed"] = done["returncode"] != 0 or any(r["failed"] for r in result["rules"])
    missing = [r for r in MODEL_RULES.values() if r not in {x["rule"] for x in result["rules"]}]
    if missing and not result["failed"]:
        result["failed"] = True
        done["tail"] = f"no job of {', '.join(missing)} ran\n" + done.get("tail", "")
    if not result["failed"]:  # the official approach on the same inputs, in what time is left
        settings = yaml.safe_load(config.read_text())
        left = official_limit() if official_limit else max(30.0, timeout_s - workflow_s)
        result["official"] = compare_with_official(settings, records, env, left)
    return result


# ---- the run ---------------------------------------------------------------------------------
def run_workflow(
    config: Path,
    folder: Path,
    env: dict[str, str],
    timeout_s: float,
    overrides=(),
    targets=(),
    first=(),
) -> dict[str, Any]:
    """Snakemake on the project's Snakefile in the jobs' environment (`job_env`), one model
    job at a time, with the profile's `config:` values (`overrides`: "key=value" replacing
    some), for `targets` (default: the whole run), the jobs of the targets `first` before
    the others (Snakemake's --prioritize: what a limit cuts is the rest)."""
    cores = max(2, min(os.cpu_count() or 2, 16))
    values = dict(item.split("=", 1) for item in (*profile_config(PROFILE), *overrides))
    argv = [sys.executable, "-m", "snakemake", "--snakefile", str(PROJECT_ROOT / "Snakefile")]
    argv += ["--directory", str(folder / "run"), "--configfile", str(config)]
    argv += ["--config", *(f"{k}={v}" for k, v in values.items()), "--cores", str(cores)]
    argv += ["--resources", "gpu=1", "--scheduler", "greedy", "--show-failed-logs"]
    if first:  # before --nolock, which ends the option's list of targets
        argv += ["--prioritize", *first]
    argv += ["--nolock", *targets]
    log = folder / "snakemake.log"
    began = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(process)
            code = TIMED_OUT
    lines = log.read_text(errors="replace").splitlines()
    return {
        "returncode": code,
        "wall_s": round(time.perf_counter() - began, 1),
        "jobs_done": _jobs_done(lines),
        "tail": "\n".join(lines[-LOG_TAIL_LINES:]) if code else "",
    }


def job_env(folder: Path, sizes: ProductSizes) -> dict[str, str]:
    """The jobs' environment: `carbon-vep` as this Python's (a shim on PATH: a GPU node's
    python may have no console script), the package from this tree, offline, each model job's
    record into `folder`/jobs."""
    shim = folder / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "carbon-vep").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m carbon_vep.cli "$@"\n', encoding="utf-8"
    )
    (shim / "carbon-vep").chmod(0o755)
    env = harness.job_env(
        PATH=f"{shim}{os.pathsep}{os.environ.get('PATH', '')}",
        **{RECORDS_ENV: str(folder / "jobs")},
    )
    if sizes.threads:
        env |= {"OMP_NUM_THREADS": str(sizes.threads), "MKL_NUM_THREADS": str(sizes.threads)}
    return env


def _jobs_done(lines: list[str]) -> str:
    """Snakemake's last "N of M steps (P%) done" line."""
    done = [line for line in lines if "steps (" in line and ") done" in line]
    return done[-1].strip() if done else ""


# ---- what the jobs recorded, what they wrote -------------------------------------------------
def job_records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def rule_table(records: list[dict[str, Any]], shape: dict, peak: float) -> list[dict[str, Any]]:
    """Per model rule: jobs, failures, wall (processes' whole lives), load, a job's start (its
    life before its work), tokens through the
    body, tokens/s after the load, the body's FLOP rate (its matmuls and attention, from the
    tokens and query-key pairs the jobs counted; the output layer not counted) and its share of
    `peak`, and the largest GPU and host peaks of its jobs."""
    table = []
    for command, rule in MODEL_RULES.items():
        jobs = [r for r in records if r["command"] == command]
        if not jobs:
            continue
        after_load = sum(r["after_load_s"] for r in jobs)
        wall = sum(r.get("process_s") or r["wall_s"] for r in jobs)
        tokens = sum(r["tokens"] for r in jobs)
        flops = body_flops(shape) * tokens
        flops += attention_flops(shape) * sum(r.get("attention_pairs", 0) for r in jobs)
        tflops = flops / after_load / 1e12 if after_load > 0 else None
        table.append(
            {
                "rule": rule,
                "jobs": len(jobs),
                "failed": sum(not r["succeeded"] for r in jobs),
                "wall_s": round(wall, 2),
                "load_s": round(sum(r["load_s"] or 0 for r in jobs), 2),
                # a job's life before its work (imports, CUDA, inputs, the load): what the
                # bill's start-up column prices (estimate/costs.py: job_start_seconds)
                "start_s_per_job": round((wall - after_load) / len(jobs), 2),
                "tokens": tokens,
                "tokens_per_s": round(tokens / after_load, 1) if after_load > 0 else None,
                "body_tflops": None if tflops is None else float(f"{tflops:.4g}"),
                "fraction_of_peak": None if tflops is None else float(f"{tflops / peak:.4g}"),
                "gpu_peak_reserved_gb": _peak_gb(jobs, "gpu_peak_reserved_bytes"),
                "gpu_peak_allocated_gb": _peak_gb(jobs, "gpu_peak_allocated_bytes"),
                "host_peak_gb": _peak_gb(jobs, "host_peak_rss_bytes"),
                "in_passes": _in_passes(jobs),
            }
        )
    return table


def _in_passes(jobs: list[dict]) -> float | None:
    """The share of the jobs' time after the load and the probe spent within the model's
    passes of more than one token a row (model.pass_clock; decode steps are outside): what a
    host-bound job is short of; None for records without it (before 2026-11-30)."""
    if not jobs or any("pass_s" not in r for r in jobs):
        return None
    probe = sum(r.get("phases", {}).get(PROBE_PHASE, 0.0) for r in jobs)
    work = sum(r["after_load_s"] for r in jobs) - probe
    return round(sum(r["pass_s"] for r in jobs) / work, 3) if work > 0 else None


def _peak_gb(jobs: list[dict], key: str) -> float | None:
    values = [r[key] for r in jobs if r.get(key) is not None]
    return round(max(values) / 1e9, 2) if values else None


def output_rows(outdir: Path) -> dict[str, Any]:
    """Rows of each model rule's merged outputs, with their statuses where they have them."""
    paths = RunPaths(str(outdir))
    scores = {
        name: _rows(Path(paths.scores.format(dataset=name, model=TARGET)), "status")
        for name in ("centered", "nexttoken")
    }
    scan_dir = Path(paths.scan_dir.format(scan="scan", model=TARGET))
    niah = {
        str(p.relative_to(outdir / "suite/niah")).removesuffix(f"/{TARGET}/predictions.parquet"): (
            _rows(p, "status") | _mean(p, "gen_exact_match")
        )
        for p in sorted((outdir / "suite/niah").glob(f"*/*/{TARGET}/predictions.parquet"))
    }
    tasks = {
        task: _rows(Path(paths.task_predictions.format(task=task, model=TARGET)), "status")
        for task in ("recovery", "perturbation")
    }
    report = Path(paths.run_report)
    return {
        "score_shard": scores,
        "scan_chunk": {
            "positions": sum(_rows(p)["rows"] for p in scan_dir.glob("positions/*.parquet")),
            "snv_files": len(list(scan_dir.glob("snvs/*.tsv.gz"))),
            "tracks": len(list(scan_dir.glob("tracks/*.bw"))),
        },
        "score_niah": niah,
        "score_recovery": tasks["recovery"],
        "score_perturbation": tasks["perturbation"],
        "results_table": _rows(Path(paths.results_table)),
        "report_html_bytes": report.stat().st_size if report.exists() else 0,
    }


def scan_figures(outdir: Path) -> dict[str, Any] | None:
    """The scan's chunk jobs as they counted themselves (their stats JSON): scored bases a
    second after the load, hg38's GPU-hours at that rate on this one GPU, the share of the
    scan's wall time outside the model's forward passes and the device's idle share, the
    seconds the scan waited for its writer thread."""
    scan_dir = Path(RunPaths(str(outdir)).scan_dir.format(scan="scan", model=TARGET))
    chunks = [json.loads(p.read_text()) for p in sorted(scan_dir.glob("chunks/chunk_*.json"))]
    if not chunks:
        return None
    keys = ("bases", "wall_s", "forward_s", "device_s", "writer_wait_s")
    total = {k: sum(c.get(k) or 0.0 for c in chunks) for k in keys}
    rate = total["bases"] / total["wall_s"] if total["wall_s"] > 0 else 0.0
    return {
        "chunks": len(chunks),
        "scored_bases": int(total["bases"]),
        "scored_bases_per_s": round(rate, 1),
        "hg38_gpu_hours": round(HG38_BASES / rate / 3600, 2) if rate else None,
        "outside_forward_share": round(1 - total["forward_s"] / total["wall_s"], 4),
        "device_idle_share": round(1 - total["device_s"] / total["wall_s"], 4),
        "writer_wait_s": round(total["writer_wait_s"], 3),
    }


def _rows(path: Path, status: str | None = None) -> dict[str, Any]:
    if not path.exists():
        return {"rows": 0, "missing": True}
    frame = pl.read_parquet(path)
    out: dict[str, Any] = {"rows": frame.height}
    if status and status in frame.columns:
        out["statuses"] = dict(sorted(frame[status].value_counts().iter_rows()))
    return out


def _mean(path: Path, column: str) -> dict[str, Any]:
    if not path.exists():
        return {}
    frame = pl.read_parquet(path, columns=[column])
    return {column: float(frame[column].cast(pl.Float64).mean() or 0.0)}


# ---- the report's section --------------------------------------------------------------------
def markdown_part(result: dict[str, Any] | None) -> str:
    if not result:
        return ""
    done = result["snakemake"]
    verdict = "**failed**" if result["failed"] else "every job succeeded"
    intro = (
        f"The product on the device: Snakemake on the Snakefile with a GPU config (device "
        f"{result['device']}, {result['dtype']}, the {PROFILE} profile's "
        f"{', '.join(result['profile_config'])}), every job through `carbon-vep` as a cluster "
        f"job runs it, one model job at a time: {verdict} (exit {done['returncode']}, "
        f"{done['wall_s']:.0f} s, {done['jobs_done'] or 'no progress line'}; checkpoints "
        f"built and saved in {result['checkpoints_s']:.0f} s). Per rule, from the jobs' own "
        "records: wall = their processes' lives (imports and load included), tokens through "
        "the model's body, tokens/s after the load, the body's TFLOP/s (its matmuls and "
        "attention from the tokens and query-key pairs the jobs counted, padding included; "
        "the output layer not counted) and its share of the measured bf16 peak, the share of "
        "the time after the load and the probe within the model's passes of more than one "
        "token a row (in passes), the largest GPU peak (reserved) of a job."
    )
    parts = [intro, rules_markdown(result["rules"], result["outputs"])]
    scan = result.get("scan")
    if scan:
        parts.append(
            f"The scan's {scan['chunks']} chunk job(s), as they counted themselves: "
            f"{scan['scored_bases']:,} bases at {scan['scored_bases_per_s']:,.0f} scored "
            f"bases/s after the load; hg38 ({HG38_BASES:.1e} ACGT bases) at that rate: "
            f"**{scan['hg38_gpu_hours']} GPU-hours** on this one GPU; outside the forward "
            f"passes {scan['outside_forward_share']:.1%} of the scan's time, device idle "
            f"{scan['device_idle_share']:.1%}, waited for the writer {scan['writer_wait_s']} s."
        )
    if result.get("official"):
        parts.append(
            "The official scripts' approach (benchmark/reference_job.py: vep_eval.py, "
            "clinvar_vep_eval.py, genome_niah_eval.py as they run, batch 2 / 4 / 1) on the same "
            "checkpoint, inputs and device, each a process of its own; seconds after the load "
            "(ours: the path's jobs summed), GPU peak allocated:"
        )
        parts.append(markdown_table(*markdown_rows(result["official"])))
    if done.get("tail"):
        parts.append("Snakemake's tail:\n\n```\n" + done["tail"] + "\n```")
    return "\n\n".join(parts)


def rules_markdown(rules: list[dict[str, Any]], outputs: dict[str, Any] | None = None) -> str:
    """The per-rule table (a rerun's too: then without the outputs column)."""
    header = ["rule", "jobs", "failed", "wall s", "load s", "start s a job", "tokens"]
    header += ["tokens/s", "TFLOP/s", "% of peak", "in passes"]
    header += ["GPU peak GB", "host peak GB"] + (["outputs"] if outputs else [])
    rows = [
        [
            r["rule"],
            r["jobs"],
            r["failed"],
            f"{r['wall_s']:.1f}",
            f"{r['load_s']:.1f}",
            figure(r.get("start_s_per_job"), ".1f"),
            f"{r['tokens']:,}",
            figure(r["tokens_per_s"], ",.0f"),
            figure(r.get("body_tflops"), ".3g"),
            figure(r.get("fraction_of_peak"), ".1%"),
            figure(r.get("in_passes"), ".0%"),
            figure(r["gpu_peak_reserved_gb"], ".1f"),
            figure(r["host_peak_gb"], ".1f"),
        ]
        + ([_outputs_note(outputs.get(r["rule"]))] if outputs else [])
        for r in rules
    ]
    return markdown_table(header, rows)


def figure(value: float | None, spec: str) -> str:
    """A table cell: `value` formatted by `spec`, or a dash where there is none."""
    return "—" if value is None else format(value, spec)


def _outputs_note(outputs: Any) -> str:
    return json.dumps(outputs, separators=(", ", ": ")).replace("|", "/") if outputs else "—"
