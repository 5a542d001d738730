"""Benchmark: the generation tasks on vLLM against our transformers engine, side by side on CPU.

A Carbon-vocabulary Llama with Carbon-3B's head dimension (96: vLLM's CPU attention has no
kernel for the demo model's 16; 2 layers, hidden 192, random weights built locally), one
Genomic-NIAH cell built from the demo's chr17 fragment (neardup_d2, `--ctx` tokens, `--rows`
rows) and a recovery task of `--prompts` random 660 bp prompts. Each command runs whole, in a
fresh process, once on each engine (`carbon-vep score-niah` / `score-recovery --engine ...`):
wall time (engine start-up included: vLLM's is part of every job), rows/s, peak RSS, and a
check that both wrote the same predictions (NIAH likelihoods within 1e-4).

Usage: python -m carbon_vep.benchmark.vllm [--ctx 2048] [--rows 16] [--prompts 32] [--json F]
(needs `make setup-vllm`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.benchmark.harness import (
    PROJECT_ROOT,
    Pair,
    job_env,
    run_command,
    write_json,
)
from carbon_vep.config.tasks import SEQUENCE_RECOVERY
from carbon_vep.markdown import table as markdown_table

FASTA = PROJECT_ROOT / "resources/demo/chr17.hg19.part.fa"
VLLM_EXE = PROJECT_ROOT / ".venv-vllm/bin/carbon-vep"
OURS_EXE = Path(sys.executable).parent / "carbon-vep"


# Carbon's vocabulary with Carbon-3B's head dimension, 96: vLLM's CPU attention has no kernel
# for the demo model's 16 (model.demo.build_demo_model's keywords, layers and seed aside)
HEAD96 = dict(hidden_size=192, num_heads=2, num_kv_heads=1, intermediate_size=256)


def build_inputs(work: Path, ctx: int, rows: int, prompts: int) -> tuple[Path, Path, Path]:
    from carbon_vep.model.demo import build_demo_model
    from carbon_vep.suite.niah_build import CellSpec, write_cell

    model = build_demo_model(work / "model", num_layers=2, seed=5, **HEAD96)
    cell = work / "cell.parquet"
    write_cell(CellSpec("neardup_d2", ctx, rows, seed=3), FASTA, cell)
    rng = np.random.default_rng(4)
    seqs = ["".join(rng.choice(list("ACGT"), 690)) for _ in range(prompts)]
    table = work / "recovery.tsv"
    table.write_text("sequence\tlabel\n" + "".join(f"{s[:660]}\t{s[660:]}\n" for s in seqs))
    return model, cell, table


def task_command(
    launcher: list[str], engine: str, task: str, inputs: Path, model: Path, out: Path, *extra: str
) -> list[str]:
    """A generation task's job (`score-niah` for task niah, else `score-recovery`) on one
    engine, its metrics beside `out`; `launcher`: the carbon-vep command of an environment."""
    command = "score-niah" if task == "niah" else SEQUENCE_RECOVERY.command
    times = ["--times", str(times_path(out))]
    return [
        *launcher,
        command,
        "--tasks-file",
        str(inputs),
        "--model",
        str(model),
        "--trust-remote-code",
        "--engine",
        engine,
        "--task",
        task,
        "--model-key",
        "m",
        "--out",
        str(out),
        "--metrics",
        str(out.with_suffix(".json")),
        *times,
        *extra,
    ]


def times_path(out: Path) -> Path:
    """Where a generation job writes its times (engine start, scoring: suite.tasks.JobTimes)."""
    return out.with_name(f"{out.stem}_times.json")


def job_times(out: Path) -> dict:
    """The times a generation job wrote beside `out` (empty when it wrote none)."""
    path = times_path(out)
    return json.loads(path.read_text()) if path.is_file() else {}


def run_task(exe: Path, engine: str, task: str, inputs: Path, model: Path, out: Path, *extra: str):
    """The task's job in float32, offline, measured (`extra`: more flags of the command)."""
    argv = task_command([str(exe)], engine, task, inputs, model, out, "--dtype", "float32", *extra)
    env = job_env()
    return run_command(argv, env=env)


def compare_niah(ours: pl.DataFrame, theirs: pl.DataFrame) -> dict:
    """Two engines' answers on one NIAH cell: the share of rows with the same prediction and
    the same flags, and the likelihoods' largest and median absolute differences."""
    if ours["uid"].to_list() != theirs["uid"].to_list():
        raise ValueError("the two engines scored different rows")
    same = {
        c: float((ours[c] == theirs[c]).mean()) for c in ("pred", "gen_exact_match", "ll_correct")
    }
    diffs = np.concatenate(
        [np.abs(ours[c].to_numpy() - theirs[c].to_numpy()) for c in ("target_ll", "negative_ll")]
    )
    return {
        "same_pred": same["pred"],
        "same_exact_match": same["gen_exact_match"],
        "same_ll_correct": same["ll_correct"],
        "max_ll_difference": float(diffs.max()),
        "median_ll_difference": float(np.median(diffs)),
    }


def same_answers(task: str, ours: Path, theirs: Path) -> dict:
    a, b = pl.read_parquet(ours), pl.read_parquet(theirs)
    if task == "niah":
        agreement = compare_niah(a, b)
        return {"identical_predictions": agreement["same_pred"] == 1.0, **agreement}
    return {"identical_predictions": a["prediction"].to_list() == b["prediction"].to_list()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not VLLM_EXE.exists():
        sys.exit(f"no {VLLM_EXE}: run `make setup-vllm` first")
    results, cells = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model, cell, table = build_inputs(work, args.ctx, args.rows, args.prompts)
        for task, inputs, n in (("niah", cell, args.rows), ("recovery", table, args.prompts)):
            ours = run_task(
                OURS_EXE, "transformers", task, inputs, model, work / f"{task}_t.parquet"
            )
            theirs = run_task(VLLM_EXE, "vllm", task, inputs, model, work / f"{task}_v.parquet")
            pair = Pair(task, ours, theirs)
            check = same_answers(task, work / f"{task}_t.parquet", work / f"{task}_v.parquet")
            results[task] = {
                "rows": n,
                **check,
                "transformers_s": round(ours.seconds, 2),
                "vllm_s": round(theirs.seconds, 2),
                "transformers_peak_rss_mb": round(ours.peak_rss_mb),
                "vllm_peak_rss_mb": round(theirs.peak_rss_mb),
                "vllm_speedup": round(1 / pair.speedup, 3),
            }
            for engine, measured in (("transformers", ours), ("vllm", theirs)):
                times = job_times(work / f"{task}_{engine[0]}.parquet")
                for key in ("start_s", "score_s"):
                    if key in times:
                        results[task][f"{engine}_{key}"] = times[key]
                scoring = f"{n / times['score_s']:.2f}" if times.get("score_s") else "—"
                wall = f"{n / measured.seconds:.2f}"
                cells.append(
                    [
                        task,
                        engine,
                        n,
                        f"{measured.seconds:.1f}",
                        wall,
                        scoring,
                        f"{measured.peak_rss_mb:,.0f}",
                    ]
                )
            if task == "niah":
                parameters = json.loads((work / "niah_v.json").read_text())["parameters"]
                results[task]["vllm_prefix_cache"] = parameters.get("prefix_cache")
    print(
        markdown_table(
            [
                "task",
                "engine",
                "rows",
                "wall s (start-up included)",
                "rows/s",
                "rows/s scoring alone",
                "peak RSS MB",
            ],
            cells,
        )
    )
    for task, r in results.items():
        within = f", LLs within {r['max_ll_difference']:.1e}" if "max_ll_difference" in r else ""
        print(f"{task}: identical predictions {r['identical_predictions']}{within}")
    write_json(args.json, {"ctx_tokens": args.ctx, **results})


if __name__ == "__main__":
    main()
