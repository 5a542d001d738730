"""Benchmark: Genomic-NIAH on CPU, our one prefill per row against the official script's passes.

A small Carbon-shaped model (Carbon's 155,776-token vocabulary and tokenizer, Llama layers of
hidden 256, 4 layers, 4 heads of 64 with 2 KV heads; random weights, built locally) and a cell
built from the demo's chr17 fragment (`build-niah`, neardup_d2, 4,096 tokens a row by default).
In one run, each row goes through:

1. ours (`suite.niah.NiahScorer`): one prefill, greedy generation off its KV cache, both value
   likelihoods as a batch of two off the same cache, the output layer only where read;
2. the reference (`suite.niah_published.three_pass_row`, what huggingface/carbon's
   `evaluation/genome_niah_eval.py` does a row): `generate` on the prompt, then the model body
   over prompt + value and over prompt + negative, the output layer on the value's positions
   only.

It checks the outputs are the same (identical `pred` and flags, LLs within 1e-5) and prints the
wall time of each, the ratio, rows/s, and each approach's peak RSS (each run in its own
process). Usage: python -m carbon_vep.benchmark.niah [--ctx 4096] [--rows 6] [--json FILE]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from carbon_vep.benchmark.harness import (
    PROJECT_ROOT,
    Measured,
    Pair,
    run_step,
    write_json,
)
from carbon_vep.markdown import table as markdown_table

FASTA = PROJECT_ROOT / "resources/demo/chr17.hg19.part.fa"


def run(approach: str, model_dir: str, cell_path: str) -> dict:
    """Score every row of the cell one way (in this process): results and wall time."""
    import time

    import torch

    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.model.engine import Engine
    from carbon_vep.model.loading import load_model
    from carbon_vep.suite.niah import NiahScorer
    from carbon_vep.suite.niah_cells import read_cell
    from carbon_vep.suite.niah_published import three_pass_cell_row

    torch.set_num_threads(2)
    loaded = load_model(ModelSettings(model_dir, trust_remote_code=True))
    cell = read_cell(cell_path)
    scorer = NiahScorer(Engine(loaded.model, loaded.vocab, loaded.device, 1), loaded.tokenizer)
    out = []
    began = time.monotonic()
    for row in cell.iter_rows(named=True):
        args = (row["prompt"], row["value"], row["negative_value"])
        if approach == "ours":
            (result,) = scorer.score_batch(*([a] for a in args))
        else:
            result = three_pass_cell_row(loaded, row)
        out.append([result.pred, result.target_ll, result.negative_ll, row["value"]])
    return {"s": time.monotonic() - began, "rows": out}


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


def measure(approach: str, model: Path, cell: Path) -> Measured:
    """One approach over the cell in a fresh process: `s` is the scoring's own wall time (the
    model load left out), `peak_rss_mb` the process's."""
    measured = run_step(run, approach, model, cell)
    measured.seconds = measured.result.pop("s")
    return measured


def compare(ours: Measured, reference: Measured) -> dict:
    """Same predictions and flags, the largest LL difference."""
    worst = 0.0
    for a, b in zip(ours.result["rows"], reference.result["rows"], strict=True):
        if a[0] != b[0] or (a[0] == a[3]) != (b[0] == b[3]) or (a[1] > a[2]) != (b[1] > b[2]):
            raise SystemExit(f"outputs differ: {a} vs {b}")
        worst = max(worst, abs(a[1] - b[1]), abs(a[2] - b[2]))
    if worst > 1e-5:
        raise SystemExit(f"log-likelihoods differ by {worst:.2e} (> 1e-5)")
    return {"identical_pred": True, "max_ll_difference": worst}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model, cell = build(Path(tmp), args.ctx, args.rows)
        pair = Pair("NIAH cell", measure("ours", model, cell), measure("three_pass", model, cell))
    result = {
        "ctx_tokens": args.ctx,
        "rows": args.rows,
        **compare(pair.ours, pair.reference),
        "speedup": round(pair.speedup, 2),
    }
    for key, measured in (("ours", pair.ours), ("three_pass", pair.reference)):
        result[f"{key}_s"] = round(measured.seconds, 2)
        result[f"{key}_rows_per_s"] = round(args.rows / measured.seconds, 3)
        result[f"{key}_peak_rss_mb"] = round(measured.peak_rss_mb)
    cells = [
        [
            label,
            result[f"{key}_s"],
            result[f"{key}_rows_per_s"],
            f"{result[f'{key}_peak_rss_mb']:,}",
        ]
        for label, key in (
            ("one prefill (ours)", "ours"),
            ("the official script's three passes", "three_pass"),
        )
    ]
    print(markdown_table(["approach", "wall s", "rows/s", "peak RSS MB"], cells))
    summary = f"{args.rows} rows of {args.ctx:,} tokens: x{result['speedup']} less wall time"
    print(f"\n{summary}; identical predictions, LLs within {result['max_ll_difference']:.1e}")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
