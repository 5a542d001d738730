"""Benchmark: passes read at their last position, the last layer there alone against the whole
last layer, in one process on the CPU.

A Genomic-NIAH prefill is read at the prompt's last token and a right-end context at its end;
model.last_layer runs the last decoder layer's keys and values at every position and the rest
at the positions read. transformers' `generate` and the official scripts' body passes run the
whole last layer. Two ways on the same inputs, alternately (warm-up rounds left out):

- `NiahScorer.prefill`, as `score-niah` runs it (the whole prompt, the jobs' attention),
  against the same pass with the last layer whole (`Engine.forward` without keep_last);
- `Engine.last_hidden_states`, as the right-end recipe runs it (contexts of one length),
  against `Engine.hidden_states` read at each context's end (the whole last layer).

The model has Carbon-3B's 30 layers at a width where the CPU's time is its arithmetic, not its
calls (unlike benchmark/niah_passes, whose model is host-bound on purpose). Printed: median
milliseconds each way (each first in half the rounds), the ratio, the ratio the FLOPs predict
(config.gpus.prefill_flops) for this model and for Carbon-3B, and the largest difference
between the two ways' hidden states.
Usage: python -m carbon_vep.benchmark.last_layer [--layers 30] [--hidden 256] [--ctx 2048]
[--reps 7] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from carbon_vep.benchmark.harness import write_json
from carbon_vep.config.gpus import CARBON_SHAPES, prefill_flops
from carbon_vep.config.stages import ModelSettings
from carbon_vep.model.attention import register
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.engine import Engine, new_cache
from carbon_vep.model.loading import load_model
from carbon_vep.suite.niah import NiahScorer

WARM_UP = 1
CONTEXTS = 4  # right-end contexts a pass


def shape_of(config) -> dict[str, int]:
    """A model config as config.gpus' shapes spell it."""
    return {
        "hidden_size": config.hidden_size,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.hidden_size // config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_hidden_layers,
    }


def paths(scorer: NiahScorer, prompt: np.ndarray, contexts: list[np.ndarray]) -> dict:
    """name: (ours, the whole last layer), each giving the hidden states read."""
    engine = scorer.engine

    def niah_whole() -> torch.Tensor:
        return engine.forward(prompt[None], cache=new_cache(engine.model))[0][:, -1]

    def right_end_whole() -> torch.Tensor:
        hidden, lengths = engine.hidden_states(contexts)
        return torch.stack([hidden[row, n - 1] for row, n in enumerate(lengths)])

    return {
        "niah_prefill": (lambda: scorer.prefill(prompt[None], new_cache(engine.model)), niah_whole),
        "right_end": (lambda: engine.last_hidden_states(contexts), right_end_whole),
    }


def timed(way: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    with torch.inference_mode():
        start = time.perf_counter()
        out = way()
        return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30, help="Carbon-3B's 30 by default")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ctx", type=int, default=2048, help="the NIAH prompt's tokens")
    parser.add_argument("--reps", type=int, default=7, help="measured rounds, each way")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_demo_model(
            Path(tmp) / "model",
            hidden_size=args.hidden,
            num_layers=args.layers,
            num_heads=8,
            num_kv_heads=2,  # grouped-query, as Carbon
            intermediate_size=args.hidden * 8 // 3,
            seed=1,
        )
        loaded = load_model(ModelSettings(str(model), trust_remote_code=True))
    loaded.model.set_attn_implementation(register())  # the jobs' attention
    engine = Engine(loaded.model, loaded.vocab, loaded.device, CONTEXTS)
    scorer = NiahScorer(engine, loaded.tokenizer, prefill_chunk=0)  # the profiles' whole prompt
    rng = np.random.default_rng(3)
    dna = np.asarray(loaded.vocab.kmer_ids)
    prompt = np.concatenate([[loaded.vocab.prefix_id], rng.choice(dna, args.ctx - 1)])
    context_tokens = args.ctx // CONTEXTS
    contexts = [prompt[:context_tokens].copy() for _ in range(CONTEXTS)]
    for row, ids in enumerate(contexts):
        ids[1:] = rng.choice(dna, context_tokens - 1) if row else ids[1:]
    seconds: dict[str, dict[str, list[float]]] = {}
    difference: dict[str, float] = {}
    for name, (ours, whole) in paths(scorer, prompt, contexts).items():
        seconds[name] = {"ours": [], "whole": []}
        for round_ in range(WARM_UP + args.reps):
            if round_ % 2:  # each way first in half the rounds
                took_whole, full = timed(whole)
                took_ours, kept = timed(ours)
            else:
                took_ours, kept = timed(ours)
                took_whole, full = timed(whole)
            if round_ >= WARM_UP:
                seconds[name]["ours"].append(took_ours)
                seconds[name]["whole"].append(took_whole)
        difference[name] = float((kept - full).abs().max())
    shape = shape_of(loaded.model.config)
    tokens = {"niah_prefill": args.ctx, "right_end": context_tokens}
    result: dict = {
        "layers": args.layers,
        "hidden": args.hidden,
        "reps": args.reps,
        "tokens": tokens,
        "contexts": CONTEXTS,
        "threads": torch.get_num_threads(),
    }
    for name, times in seconds.items():
        medians = {way: statistics.median(s) for way, s in times.items()}
        predicted = prefill_flops(shape, tokens[name]) / prefill_flops(shape, tokens[name], 1)
        carbon = CARBON_SHAPES["Carbon-3B"]
        result[name] = {
            "median_ms": {way: round(1000 * m, 1) for way, m in medians.items()},
            "whole_over_ours": round(medians["whole"] / medians["ours"], 3),
            "flops_predict": round(predicted, 4),
            "flops_predict_carbon_3b": round(
                prefill_flops(carbon, tokens[name]) / prefill_flops(carbon, tokens[name], 1), 4
            ),
            "max_abs_difference": difference[name],
        }
        r = result[name]
        print(
            f"{name} ({tokens[name]:,} tokens{f' x {CONTEXTS}' if name == 'right_end' else ''}): "
            f"ours {r['median_ms']['ours']} ms, the whole last layer {r['median_ms']['whole']} "
            f"ms (medians of {args.reps}): {r['whole_over_ours']}x; the FLOPs predict "
            f"{r['flops_predict']}x (Carbon-3B: {r['flops_predict_carbon_3b']}x); hidden states "
            f"within {r['max_abs_difference']:.2g}"
        )
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
