"""Benchmark: Genomic-NIAH's small passes after the prefill, the branch pass against a pass per
token and continuation, in one process on the CPU.

suite.niah runs the first decode step, both value continuations and a guess at the generation
(the value's own tokens) in one pass under a branch mask where the attention takes one (the
jobs' lower-right SDPA, model.attention), else the greedy steps and then a pass per
continuation (transformers' sdpa). On a GPU those passes are bound by the host's per-layer
work, not by the device (docs/gpu.md). A model of Carbon-3B's 30 layers at a tiny width puts
the CPU in the same regime: each pass costs its layers' Python and kernel calls, not their
arithmetic. Three ways on one row, alternately (warm-up rounds left out): the jobs' way on the
cell's row (random weights do not generate its value: the guess is dropped after its first
token), the jobs' way on the same row with the value the model generates (what a model that
retrieves the needle meets: the guess is kept), and a pass per token and continuation. The
time after the prefill returns is the passes and the output layer's terms.

Printed: the median milliseconds after the prefill each way, the passes, each way's ratio to a
pass per token and continuation, and the agreement (the same prediction, the likelihoods'
largest difference from that way). Usage:
python -m carbon_vep.benchmark.niah_passes [--layers 30] [--ctx 1024] [--reps 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
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
WAYS = {  # name: (label, attention, the row's value is the model's greedy output)
    "branch": ("branch pass, the cell's value (not generated)", LOWER_RIGHT_SDPA, False),
    "branch_retrieved": (
        "branch pass, the value generated (the guess kept)",
        LOWER_RIGHT_SDPA,
        True,
    ),
    "apart": ("a pass per token and continuation", "sdpa", False),
}
WARM_UP = 2


def after_prefill_s(scorer: NiahScorer, row: dict) -> tuple[float, int, object]:
    """Seconds from the prefill's return to the row's answers (CPU: nothing runs behind), the
    body's passes in that time, the answer."""
    marks: list[float] = []
    passes: list[int] = []
    prefill, forward = scorer.prefill, scorer.engine.forward

    def timed(ids, cache):
        last = prefill(ids, cache)
        marks.append(time.perf_counter())
        return last

    def counted(*args, **kwargs):
        passes.append(len(marks))  # 0 during the prefill, 1 after it
        return forward(*args, **kwargs)

    scorer.prefill, scorer.engine.forward = timed, counted
    try:
        [answer] = scorer.score_batch([row["prompt"]], [row["value"]], [row["negative_value"]])
    finally:
        del scorer.prefill, scorer.engine.forward  # the classes' methods again
    return time.perf_counter() - marks[0], sum(passes), answer


def use(model, attention: str) -> None:
    model.set_attn_implementation(register() if attention == LOWER_RIGHT_SDPA else attention)


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
        # Carbon's checkpoints name their 6-mer block, to which the published generation is
        # restricted (suite.niah); the demo model does not, so it is named here
        first = int(loaded.vocab.kmer_ids.min())
        (model / "dna_config.json").write_text(json.dumps({"k": 6, "first_kmer_id": first}))
        engine = Engine(loaded.model, loaded.vocab, loaded.device, 1)
        scorer = NiahScorer(engine, loaded.tokenizer, prefill_chunk=0)
    assert scorer.allowed is not None, "the generation is not restricted to the 6-mer block"
    use(loaded.model, "sdpa")
    generated = row | {"value": after_prefill_s(scorer, row)[2].pred}
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    passes, answers = {}, {}
    for round_ in range(WARM_UP + args.reps):
        for way, (_, attention, retrieved) in WAYS.items():
            use(loaded.model, attention)
            took, passes[way], answers[way] = after_prefill_s(
                scorer, generated if retrieved else row
            )
            if round_ >= WARM_UP:
                seconds[way].append(took)
    medians = {way: statistics.median(s) for way, s in seconds.items()}
    branch, apart = answers["branch"], answers["apart"]
    result = {
        "layers": args.layers,
        "prompt_tokens": args.ctx,
        "value_tokens": len(row["value"]) // loaded.vocab.k,
        "reps": args.reps,
        "median_ms": {way: round(1000 * m, 2) for way, m in medians.items()},
        "passes_after_prefill": passes,
        "apart_over": {way: round(medians["apart"] / m, 2) for way, m in medians.items()},
        "same_prediction": branch.pred == apart.pred == answers["branch_retrieved"].pred,
        "max_abs_ll_difference": max(
            abs(branch.target_ll - apart.target_ll), abs(branch.negative_ll - apart.negative_ll)
        ),
    }
    for way, (label, _, _) in WAYS.items():
        print(
            f"{label}: {result['median_ms'][way]} ms after the prefill (median of {args.reps}), "
            f"{passes[way]} passes; a pass per token and continuation / this: "
            f"{result['apart_over'][way]}x"
        )
    print(
        f"same prediction: {result['same_prediction']}; likelihoods within "
        f"{result['max_abs_ll_difference']:.2g}"
    )
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
