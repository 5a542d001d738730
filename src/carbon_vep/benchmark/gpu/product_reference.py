"""The official scripts' approach beside the product's own jobs: the same checkpoint, inputs and
device, each side a process of its own (benchmark.reference_job for the official way), times
after the model's load. Per path (centered, right-end, Genomic-NIAH at the native context):
ours ÷ official in seconds and in GPU peak memory, and how far the answers agree (Spearman and
the largest difference of the scores; NIAH: the same predictions, the likelihoods' largest
difference). Ours is read from the product's job records and merged outputs, so what is
compared is what ships."""

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
    them within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    outdir = Path(config["outdir"])
    model = config["models"][TARGET]
    rows = []
    for task in (*PANEL_TASKS, "niah"):
        where = outdir / "official" / task
        argv = [sys.executable, "-m", "carbon_vep.benchmark.reference_job", "--task", task]
        argv += ["--model", model["path"], "--dtype", model["dtype"], "--device", model["device"]]
        argv += ["--out", str(where / "answers.parquet"), "--record", str(where / "record.json")]
        if task == "niah":
            cells = sorted((outdir / "niah/native/cells").glob("*.parquet"))
            if not cells:
                rows.append({"path": task, "error": "no native NIAH cell was built"})
                continue
            argv += ["--cell", str(cells[0])]
        else:
            dataset = config["datasets"][task]
            argv += ["--reference", dataset["reference"], "--panel", dataset["panel"]]
            argv += ["--window-bp", str(dataset["window_bp"])]
        left = max(1.0, deadline - time.monotonic())
        rows.append(_compare(task, argv, where, outdir, records, env, left))
    return rows


def _compare(task, argv, where: Path, outdir: Path, records, env, timeout_s) -> dict[str, Any]:
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"path": task, "error": f"the official approach ran past {timeout_s:.0f} s"}
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-3:]
        return {"path": task, "error": " | ".join(tail) or f"exit {done.returncode}"}
    official = json.loads((where / "record.json").read_text())
    ours = _ours(task, records)
    row = {"path": task, "ours": ours, "official": official}
    if ours["seconds"] > 0:
        row["official_over_ours_s"] = round(official["score_s"] / ours["seconds"], 3)
    if ours.get("gpu_peak_allocated_bytes") and official.get("gpu_peak_allocated_bytes"):
        row["ours_over_official_peak"] = round(
            ours["gpu_peak_allocated_bytes"] / official["gpu_peak_allocated_bytes"], 3
        )
    theirs = pl.read_parquet(where / "answers.parquet")
    row["agreement"] = (
        _niah_agreement(outdir, theirs)
        if task == "niah"
        else _score_agreement(outdir, task, theirs)
    )
    return row


def _ours(task: str, records: list[dict]) -> dict[str, Any]:
    """Our jobs of this path: seconds after their loads, summed; their largest GPU peak."""
    command, folder = ("score-niah", "/native/") if task == "niah" else ("score-shard", f"/{task}/")
    jobs = [r for r in records if r["command"] == command and folder in (r.get("out") or "")]
    peaks = [r["gpu_peak_allocated_bytes"] for r in jobs if "gpu_peak_allocated_bytes" in r]
    return {
        "jobs": len(jobs),
        "seconds": round(sum(r["after_load_s"] for r in jobs), 3),
        "gpu_peak_allocated_bytes": max(peaks) if peaks else None,
    }


def _score_agreement(outdir: Path, task: str, theirs: pl.DataFrame) -> dict[str, Any]:
    path = RunPaths(str(outdir)).scores.format(dataset=task, model=TARGET)
    return score_agreement(pl.read_parquet(path), theirs)


def _niah_agreement(outdir: Path, theirs: pl.DataFrame) -> dict[str, Any]:
    found = sorted((outdir / "suite/niah/native").glob(f"*/{TARGET}/predictions.parquet"))
    ours = pl.read_parquet(found[0]).select("uid", "pred", "target_ll", "negative_ll")
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
    header += ["agreement"]
    rows = []
    for row in comparisons:
        if "error" in row:
            rows.append([row["path"], "—", "—", "—", "—", row["error"][:200]])
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
            ]
        )
    return header, rows


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
