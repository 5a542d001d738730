"""Benchmark (`make bench-niah`): the product's Genomic-NIAH job against the official script's way.

A small Carbon-shaped model (Carbon's 155,776-token vocabulary and tokenizer, Llama layers of
hidden 256, 4 layers, 4 heads of 64 with 2 KV heads; random weights, built locally) and a cell
built from the demo's chr17 fragment (`build-niah`, neardup_d2, 4,096 tokens a row by default),
then, alternating (ours, official, ours, official), each its own process on the same cell:

- ours: `carbon-vep score-niah` as the workflow runs it (one prefill a row, generation and
  both value likelihoods off its KV cache; suite.niah), timed after the model's load by its
  job record (model.job_record, CARBON_VEP_JOB_RECORDS);
- official: benchmark.reference_job `--task niah` (huggingface/carbon
  `evaluation/genome_niah_eval.py`'s `generate`, then the body over prompt + value and over
  prompt + negative, the output layer on the value's positions only), timed after its load.

Printed: median seconds after the load, rows/s, each side's whole-process peak RSS (the
harness's `run_command`, the largest over the runs), official ÷ ours in seconds, ours ÷ official
in peak memory, and the agreement (the same predictions, the likelihoods' largest difference;
the run stops when they disagree). Usage: python -m carbon_vep.benchmark.niah [--ctx 4096]
[--rows 6] [--reps 2] [--prefill-chunk N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import polars as pl

from carbon_vep.benchmark.harness import PROJECT_ROOT, job_env, run_command, write_json
from carbon_vep.markdown import table as markdown_table
from carbon_vep.model.job_record import RECORDS_ENV

FASTA = PROJECT_ROOT / "resources/demo/chr17.hg19.part.fa"
LL_TOLERANCE = 1e-5  # float32 on both sides: the likelihoods agree to float rounding


def build(work: Path, ctx: int, rows: int) -> tuple[Path, Path]:
    from carbon_vep.model.demo import build_demo_model
    from carbon_vep.suite.niah_build import CellSpec, write_cell

    model = build_demo_model(
        work / "model",
        hidden_size=256,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=704,
        seed=1,
    )
    cell = work / "cell.parquet"
    write_cell(CellSpec("neardup_d2", ctx, rows, seed=7), FASTA, cell)
    return model, cell


def job(side: str, model: Path, cell: Path, out: Path, env: dict, chunk: int | None) -> tuple:
    """One side's process on the cell: seconds after its load (ours: its job record; official:
    its record), its peak RSS, its answers."""
    out.mkdir()
    if side == "ours":
        argv = ["carbon_vep.cli", "score-niah", "--tasks-file", cell, "--model", model]
        argv += ["--trust-remote-code", "--bootstrap", "0", "--out", out / "answers.parquet"]
        argv += ["--metrics", out / "metrics.json"]
        argv += [] if chunk is None else ["--prefill-chunk", chunk]
        env = dict(env, **{RECORDS_ENV: str(out)})
    else:
        argv = ["carbon_vep.benchmark.reference_job", "--task", "niah", "--model", model]
        argv += ["--dtype", "float32", "--device", "cpu", "--cell", cell]
        argv += ["--out", out / "answers.parquet", "--record", out / "record.json"]
    done = run_command([sys.executable, "-m", *argv], env=env)
    [record] = [json.loads(p.read_text()) for p in out.glob("*.json") if p.name != "metrics.json"]
    seconds = record["after_load_s" if side == "ours" else "score_s"]
    return seconds, done.peak_rss_mb, pl.read_parquet(out / "answers.parquet")


def agreement(mine: pl.DataFrame, theirs: pl.DataFrame) -> dict:
    """The same prediction on every row, and the likelihoods' largest difference."""
    columns = ["uid", "pred", "target_ll", "negative_ll"]
    both = mine.select(columns).join(theirs.select(columns), on="uid", suffix="_official")
    if both.height != theirs.height or (both["pred"] != both["pred_official"]).any():
        raise SystemExit(f"predictions differ:\n{both}")
    worst = max(
        float((both[c] - both[f"{c}_official"]).abs().max() or 0.0)
        for c in ("target_ll", "negative_ll")
    )
    if worst > LL_TOLERANCE:
        raise SystemExit(f"log-likelihoods differ by {worst:.2e} (> {LL_TOLERANCE:g})")
    return {"rows": both.height, "identical_pred": True, "max_ll_difference": worst}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--prefill-chunk", type=int, help="ours (default: the job's own)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    # both sides on the same two threads, offline
    env = job_env(OMP_NUM_THREADS="2")
    runs: dict[str, list[tuple]] = {"ours": [], "official": []}
    with tempfile.TemporaryDirectory() as tmp:
        model, cell = build(Path(tmp), args.ctx, args.rows)
        for rep in range(args.reps):  # alternating: ours, official, ours, official, ...
            for side, done in runs.items():
                out = Path(tmp) / f"{side}_{rep}"
                done.append(job(side, model, cell, out, env, args.prefill_chunk))
                print(
                    f"  {side} run {rep + 1}: {done[-1][0]:.2f} s after the load", file=sys.stderr
                )
    seconds = {side: statistics.median(r[0] for r in done) for side, done in runs.items()}
    peaks = {side: max(r[1] for r in done) for side, done in runs.items()}
    result = {
        "ctx_tokens": args.ctx,
        "rows": args.rows,
        "reps": args.reps,
        "prefill_chunk": args.prefill_chunk,
        **{f"{side}_s": round(s, 3) for side, s in seconds.items()},
        **{f"{side}_runs_s": [r[0] for r in done] for side, done in runs.items()},
        **{f"{side}_peak_rss_mb": round(mb) for side, mb in peaks.items()},
        "official_over_ours_s": round(seconds["official"] / seconds["ours"], 2),
        "ours_over_official_peak": round(peaks["ours"] / peaks["official"], 3),
        **agreement(runs["ours"][0][2], runs["official"][0][2]),
    }
    labels = {"ours": "ours: carbon-vep score-niah", "official": "official: reference_job niah"}
    cells = [
        [labels[side], f"{s:.2f}", f"{args.rows / s:.2f}", f"{peaks[side]:,.0f}"]
        for side, s in seconds.items()
    ]
    print(markdown_table(["job", "s after the load", "rows/s", "peak RSS MB"], cells))
    faster, memory = result["official_over_ours_s"], result["ours_over_official_peak"]
    print(
        f"\n{args.rows} rows of {args.ctx:,} tokens: official ÷ ours {faster}x in seconds, "
        f"ours ÷ official {memory} in peak RSS; identical predictions, likelihoods within "
        f"{result['max_ll_difference']:.1e}"
    )
    write_json(args.json, result)


if __name__ == "__main__":
    main()
