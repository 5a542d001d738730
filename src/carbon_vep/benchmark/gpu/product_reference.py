"""The official scripts' approach beside the product's own jobs: the same checkpoint, inputs and
device, each side a process of its own (benchmark.reference_job for the official way), times
after the model's load. Per path (centered, right-end, each Genomic-NIAH cell: the native
context, and past it with the YaRN settings the product's job had):
ours ÷ official in seconds and in GPU peak memory, and how far the answers agree (Spearman and
the largest difference of the scores; NIAH: the same predictions, the likelihoods' largest
difference), and where each side's seconds went (ours: every job's start-up probe, which on a
GPU also pays the libraries' start; NIAH's prefill, generation and the two short likelihood
passes off the cache; the official: `generate`, then two likelihood passes over the whole
prompt). Ours is read from the product's job records and merged outputs,
so what is compared is what ships."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep.benchmark.gpu.product_setup import TARGET
from carbon_vep.benchmark.harness import score_agreement
from carbon_vep.workflow.paths import RunPaths

PANEL_TASKS = ("centered", "nexttoken")  # the product config's dataset keys are the recipes


def compare_with_official(
    config: dict[str, Any], records: list[dict], env: dict[str, str], timeout_s: float
) -> list[dict[str, Any]]:
    """Each path's comparison (an `error` in place of the figures where a side failed), all of
    them within `timeout_s`: the two recipes, then every Genomic-NIAH cell the product scored
    (its native context, then the YaRN ones, with the YaRN settings the product's job had),
    shortest context first within each, so a run cut short still has the cheaper cells."""
    deadline = time.monotonic() + timeout_s
    outdir = Path(config["outdir"])
    model = config["models"][TARGET]
    # (what the path is, the output folder under suite/niah for a NIAH cell, the task's flags)
    runs = [(task, None, _panel_args(config["datasets"][task])) for task in PANEL_TASKS]
    for entry, settings in config.get("niah", {}).items():
        for cell in sorted((outdir / "niah" / entry / "cells").glob("*.parquet"), key=_context):
            where = f"{entry}/{cell.stem}"
            runs.append((f"niah {where}", where, _niah_args(cell, settings)))
    rows = []
    for path, niah_cell, args in runs:
        task = "niah" if niah_cell else path
        where = outdir / "official" / path.replace(" ", "_").replace("/", "_")
        argv = [sys.executable, "-m", "carbon_vep.benchmark.reference_job", "--task", task]
        argv += ["--model", model["path"], "--dtype", model["dtype"], "--device", model["device"]]
        argv += ["--out", str(where / "answers.parquet"), "--record", str(where / "record.json")]
        left = max(1.0, deadline - time.monotonic())
        rows.append(_compare(path, niah_cell, argv + args, where, outdir, records, env, left))
    return rows


def _context(cell: Path) -> tuple[int, str]:
    """A cell's declared context (tokens), then its name: the order its reference runs in."""
    tokens = pl.read_parquet(cell, columns=["context_length_tokens"])["context_length_tokens"]
    return int(tokens.max()), cell.name


def _panel_args(dataset: dict[str, Any]) -> list[str]:
    return [
        *("--reference", dataset["reference"], "--panel", dataset["panel"]),
        *("--window-bp", str(dataset["window_bp"])),
    ]


def _niah_args(cell: Path, settings: dict[str, Any]) -> list[str]:
    """The cell, and the YaRN flags of its entry (none: native, as published for 32k)."""
    args = ["--cell", str(cell)]
    if settings.get("yarn_factor"):
        args += ["--yarn-factor", str(settings["yarn_factor"])]
        args += ["--yarn-original-positions", str(settings["yarn_original_positions"])]
        args += ["--yarn-max-positions", str(settings["yarn_max_positions"])]
    return args


def _compare(
    path, niah_cell, argv, where: Path, outdir: Path, records, env, timeout_s
) -> dict[str, Any]:
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"path": path, "error": f"the official approach ran past {timeout_s:.0f} s"}
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-3:]
        return {"path": path, "error": " | ".join(tail) or f"exit {done.returncode}"}
    official = json.loads((where / "record.json").read_text())
    ours = _ours(path, niah_cell, records)
    row = {"path": path, "ours": ours, "official": official}
    if ours["seconds"] > 0:
        row["official_over_ours_s"] = round(official["score_s"] / ours["seconds"], 3)
    if ours.get("gpu_peak_allocated_bytes") and official.get("gpu_peak_allocated_bytes"):
        row["ours_over_official_peak"] = round(
            ours["gpu_peak_allocated_bytes"] / official["gpu_peak_allocated_bytes"], 3
        )
    theirs = pl.read_parquet(where / "answers.parquet")
    row["agreement"] = (
        _niah_agreement(outdir, niah_cell, theirs)
        if niah_cell
        else _score_agreement(outdir, path, theirs)
    )
    return row


def _ours(path: str, niah_cell: str | None, records: list[dict]) -> dict[str, Any]:
    """Our jobs of this path: seconds after their loads, summed; their largest GPU peak."""
    command, folder = (
        ("score-niah", f"/suite/niah/{niah_cell}/") if niah_cell else ("score-shard", f"/{path}/")
    )
    jobs = [r for r in records if r["command"] == command and folder in (r.get("out") or "")]
    peaks = [r["gpu_peak_allocated_bytes"] for r in jobs if "gpu_peak_allocated_bytes" in r]
    phases: dict[str, float] = {}
    for job in jobs:
        for name, seconds in job.get("phases", {}).items():
            phases[name] = round(phases.get(name, 0.0) + seconds, 3)
    return {
        "jobs": len(jobs),
        "seconds": round(sum(r["after_load_s"] for r in jobs), 3),
        "gpu_peak_allocated_bytes": max(peaks) if peaks else None,
        "phases": phases,
    }


def _score_agreement(outdir: Path, task: str, theirs: pl.DataFrame) -> dict[str, Any]:
    path = RunPaths(str(outdir)).scores.format(dataset=task, model=TARGET)
    return score_agreement(pl.read_parquet(path), theirs)


def _niah_agreement(outdir: Path, cell: str, theirs: pl.DataFrame) -> dict[str, Any]:
    predictions = outdir / "suite/niah" / cell / TARGET / "predictions.parquet"
    ours = pl.read_parquet(predictions).select("uid", "pred", "target_ll", "negative_ll")
    both = ours.join(theirs, on="uid", suffix="_official")
    lls = [
        (both[c] - both[f"{c}_official"]).abs().max() or 0.0 for c in ("target_ll", "negative_ll")
    ]
    return {
        "rows": both.height,
        "same_pred": float((both["pred"] == both["pred_official"]).mean() or 0.0),
        "max_abs_ll_difference": float(max(lls)),
    }


def markdown_rows(comparisons: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The comparison's table for the report: header and rows."""
    header = ["path", "ours s (jobs)", "official s", "official ÷ ours", "GPU peak ours ÷ official"]
    header += ["agreement", "phases s, ours / official"]
    rows = []
    for row in comparisons:
        if "error" in row:
            rows.append([row["path"], "—", "—", "—", "—", row["error"][:200], "—"])
            continue
        ours, official, agree = row["ours"], row["official"], row["agreement"]
        ratio = row.get("ours_over_official_peak")
        rows.append(
            [
                row["path"],
                f"{ours['seconds']:.2f} ({ours['jobs']})",
                f"{official['score_s']:.2f}",
                f"{row['official_over_ours_s']:.2f}x" if "official_over_ours_s" in row else "—",
                f"{ratio:.2f}" if ratio else "—",
                ", ".join(f"{k} {_short(v)}" for k, v in agree.items()),
                _phases(ours.get("phases"), official.get("phases")),
            ]
        )
    return header, rows


def _phases(ours: dict[str, float] | None, official: dict[str, float] | None) -> str:
    """Where each side's seconds went (the jobs' probe; Genomic-NIAH: prefill, generation,
    likelihood passes)."""
    if not ours and not official:
        return "—"
    sides = [
        ", ".join(f"{k} {v:.2f}" for k, v in (side or {}).items()) or "—"
        for side in (ours, official)
    ]
    return " / ".join(sides)


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
