"""Benchmark: Genomic-NIAH's small passes after the prefill, the branch pass against a pass per
continuation, in one process on the CPU.

suite.niah runs the first decode step and both value continuations in one pass under a branch
mask where the attention takes one (the jobs' lower-right SDPA, model.attention), else the
greedy steps and then a pass per continuation (transformers' sdpa). On a GPU those passes are
bound by the host's per-layer work, not by the device (docs/gpu.md). A model of Carbon-3B's 30
layers at a tiny width puts the CPU in the same regime: each pass costs its layers' Python and
kernel calls, not their arithmetic. Both ways score the same row alternately (warm-up rounds
left out); the time after the prefill returns is the passes and the output layer's terms.

Printed: the median milliseconds after the prefill each way and their ratio, and the agreement
(the same prediction, the likelihoods' largest difference). Usage:
python -m carbon_vep.benchmark.niah_passes [--layers 30] [--ctx 1024] [--reps 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from carbon_vep.benchmark.harness import PROJECT_ROOT, write_json
from carbon_vep.config.stages import ModelSettings
from carbon_vep.model.attention import LOWER_RIGHT_SDPA, register
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.suite.niah import NiahScorer
from carbon_vep.suite.niah_build import CellSpec, write_cell
from carbon_vep.suite.niah_cells import read_cell

FASTA = PROJECT_ROOT / "resources/demo/chr17.hg19.part.fa"
WAYS = {LOWER_RIGHT_SDPA: "branch pass (the jobs' attention)", "sdpa": "a pass per continuation"}
WARM_UP = 2


def after_prefill_s(scorer: NiahScorer, row: dict) -> tuple[float, object]:
    """Seconds from the prefill's return to the row's answers (CPU: nothing runs behind)."""
    marks: list[float] = []
    prefill = scorer.prefill

    def timed(ids, cache):
        last = prefill(ids, cache)
        marks.append(time.perf_counter())
        return last

    scorer.prefill = timed
    try:
        [answer] = scorer.score_batch([row["prompt"]], [row["value"]], [row["negative_value"]])
    finally:
        del scorer.prefill  # the class's method again
    return time.perf_counter() - marks[0], answer


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30, help="Carbon-3B's 30 by default")
    parser.add_argument("--ctx", type=int, default=1024, help="prompt tokens of the row")
    parser.add_argument("--reps", type=int, default=10, help="measured rounds, each way")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = build_demo_model(
            work / "model",
            hidden_size=64,
            num_layers=args.layers,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=128,
            seed=1,
        )
        write_cell(CellSpec("neardup_d2", args.ctx, 1, seed=5), FASTA, work / "cell.parquet")
        row = read_cell(work / "cell.parquet").row(0, named=True)
        loaded = load_model(ModelSettings(str(model), trust_remote_code=True))
    engine = Engine(loaded.model, loaded.vocab, loaded.device, 1)
    scorer = NiahScorer(engine, loaded.tokenizer, prefill_chunk=0)
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    answers = {}
    for round_ in range(WARM_UP + args.reps):
        for way in WAYS:
            loaded.model.set_attn_implementation(register() if way == LOWER_RIGHT_SDPA else way)
            took, answers[way] = after_prefill_s(scorer, row)
            if round_ >= WARM_UP:
                seconds[way].append(took)
    medians = {way: statistics.median(s) for way, s in seconds.items()}
    branch, apart = (answers[way] for way in WAYS)
    result = {
        "layers": args.layers,
        "prompt_tokens": args.ctx,
        "value_tokens": len(row["value"]) // loaded.vocab.k,
        "reps": args.reps,
        "median_ms": {way: round(1000 * m, 2) for way, m in medians.items()},
        "apart_over_branch": round(medians["sdpa"] / medians[LOWER_RIGHT_SDPA], 2),
        "same_prediction": branch.pred == apart.pred,
        "max_abs_ll_difference": max(
            abs(branch.target_ll - apart.target_ll), abs(branch.negative_ll - apart.negative_ll)
        ),
    }
    for way, label in WAYS.items():
        print(f"{label}: {result['median_ms'][way]} ms after the prefill (median of {args.reps})")
    print(
        f"a pass per continuation / branch pass: {result['apart_over_branch']}x; same "
        f"prediction: {result['same_prediction']}; likelihoods within "
        f"{result['max_abs_ll_difference']:.2g}"
    )
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
