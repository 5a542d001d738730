"""Benchmark: passes read at some of their positions, the last layer there alone against the
whole last layer, in one process on the CPU.

A Genomic-NIAH prefill is read at the prompt's last token, a right-end context at its end, a
scan tile at the bases it scores (after its context); model.last_layer runs the last decoder
layer's keys and values at every position and the rest at the positions read. transformers'
`generate` and the official scripts' body passes run the whole last layer. Each path is the
product's own function, run twice on the same inputs, alternately (each way first in half the
rounds, warm-up rounds left out): as shipped, and with the last layer whole
(`model.last_layer.prunable` answering no, so every pass runs whole and the positions read are
sliced from it):

- `NiahScorer.prefill`, as `score-niah` runs it (the whole prompt, the jobs' attention);
- `Engine.last_hidden_states`, as the right-end recipe runs it (contexts of one length);
- `scan_tiles`, as the scan runs it (tiles of one length, half of each its context).

The model has Carbon-3B's 30 layers at a width where the CPU's time is its arithmetic, not its
calls (unlike benchmark/niah_passes, whose model is host-bound on purpose). Printed: median
milliseconds each way, the ratio, the ratio the FLOPs predict (config.gpus.prefill_flops) for
this model and for Carbon-3B, and the largest difference between the two ways' answers.
Usage: python -m carbon_vep.benchmark.last_layer [--layers 30] [--hidden 256] [--ctx 2048]
[--reps 7] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import torch

from carbon_vep.benchmark.harness import PROJECT_ROOT, timed, write_json
from carbon_vep.columns import SCAN_BASES
from carbon_vep.config.gpus import CARBON_SHAPES, prefill_flops
from carbon_vep.config.stages import ModelSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.model import last_layer
from carbon_vep.model.attention import register
from carbon_vep.model.demo import build_carbon_like_model
from carbon_vep.model.engine import Engine, new_cache
from carbon_vep.model.loading import load_model
from carbon_vep.scan.tiles import scan_tiles
from carbon_vep.scan.tiling import tile_region
from carbon_vep.suite.niah import NiahScorer

WARM_UP = 1
CONTEXTS = 4  # right-end contexts a pass, and scan tiles
FASTA = PROJECT_ROOT / "resources/demo/chr17.hg19.part.fa"
CHROM = "chr17"
SCAN_VALUES = [f"{kind}_{b}" for kind in ("fns", "cond") for b in SCAN_BASES]
# Carbon-3B's passes of each path (tokens, kept): a 32k NIAH prompt, a 4,001-token right-end
# context, the shipped scan tile (49,146 bp: 8,192 tokens, its first 24,000 bp context)
CARBON_3B_PASSES = {
    "niah_prefill": (32_768, 1),
    "right_end": (4_001, 1),
    "scan": (8_192, 8_192 - 24_000 // 6),
}


def flops_ratio(shape: dict[str, int], tokens: int, kept: int) -> float:
    """A pass's FLOPs with the whole last layer over those with it at `kept` positions."""
    return prefill_flops(shape, tokens) / prefill_flops(shape, tokens, kept)


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


def paths(scorer: NiahScorer, prompt: np.ndarray, contexts: list[np.ndarray], scan) -> dict:
    """name: the product's function on its inputs, giving what the path reads."""
    engine = scorer.engine
    reference, tiles = scan
    return {
        "niah_prefill": lambda: scorer.prefill(prompt[None], new_cache(engine.model)),
        "right_end": lambda: engine.last_hidden_states(contexts),
        "scan": lambda: torch.as_tensor(
            scan_tiles(engine, reference, CHROM, tiles).select(SCAN_VALUES).to_numpy()
        ),
    }


@contextmanager
def whole_last_layer():
    """Every pass with its whole last layer (the positions read sliced from it)."""
    prunable = last_layer.prunable
    last_layer.prunable = lambda body: False
    try:
        yield
    finally:
        last_layer.prunable = prunable


def way(path: Callable[[], torch.Tensor], whole: bool) -> Callable[[], torch.Tensor]:
    """`path` as shipped, or with the whole last layer."""

    def run() -> torch.Tensor:
        with torch.inference_mode(), whole_last_layer() if whole else nullcontext():
            return path()

    return run


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30, help="Carbon-3B's 30 by default")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--ctx", type=int, default=2048, help="the NIAH prompt's tokens")
    parser.add_argument("--reps", type=int, default=7, help="measured rounds, each way")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_carbon_like_model(Path(tmp) / "model", args.layers, args.hidden)
        loaded = load_model(ModelSettings(str(model), trust_remote_code=True))
    loaded.model.set_attn_implementation(register())  # the jobs' attention
    engine = Engine(loaded.model, loaded.vocab, loaded.device, CONTEXTS)
    scorer = NiahScorer(engine, loaded.tokenizer, prefill_chunk=0)  # the profiles' whole prompt
    rng = np.random.default_rng(3)
    dna = np.asarray(loaded.vocab.kmer_ids)

    def random_ids(tokens: int) -> np.ndarray:  # the prefix, then random 6-mers
        return np.concatenate([[loaded.vocab.prefix_id], rng.choice(dna, tokens - 1)])

    prompt = random_ids(args.ctx)
    context_tokens = args.ctx // CONTEXTS
    contexts = [prompt[:context_tokens]] + [random_ids(context_tokens) for _ in range(CONTEXTS - 1)]
    tile_bp = args.ctx // 2 * 6  # tiles of half the prompt's tokens, half of each context
    context_bp = tile_bp // 2
    reference = open_reference(FASTA)
    tiles = tile_region(
        reference.lengths[CHROM],
        context_bp,
        context_bp + CONTEXTS * (tile_bp - context_bp),
        tile_bp,
        context_bp,
    )
    seconds: dict[str, dict[str, list[float]]] = {}
    difference: dict[str, float] = {}
    out: dict[bool, torch.Tensor] = {}
    for name, path in paths(scorer, prompt, contexts, (reference, tiles)).items():
        seconds[name] = {"ours": [], "whole": []}
        for round_ in range(WARM_UP + args.reps):
            for whole in (True, False) if round_ % 2 else (False, True):  # each first by turns
                took, out[whole] = timed(way(path, whole), engine.device)
                if round_ >= WARM_UP:
                    seconds[name]["whole" if whole else "ours"].append(took)
        difference[name] = float((out[False] - out[True]).abs().max())
    shape = shape_of(loaded.model.config)
    tile_tokens = tile_bp // 6 + 1
    # (tokens a pass, the positions the last layer keeps)
    kept = {
        "niah_prefill": (args.ctx, 1),
        "right_end": (context_tokens, 1),
        "scan": (tile_tokens, tile_tokens - context_bp // 6),
    }
    carbon = CARBON_SHAPES["Carbon-3B"]
    result: dict = {
        "layers": args.layers,
        "hidden": args.hidden,
        "reps": args.reps,
        "tokens": {name: tokens for name, (tokens, _) in kept.items()},
        "kept": {name: n for name, (_, n) in kept.items()},
        "passes": {"niah_prefill": 1, "right_end": CONTEXTS, "scan": len(tiles)},
        "threads": torch.get_num_threads(),
    }
    for name, times in seconds.items():
        medians = {way: statistics.median(s) for way, s in times.items()}
        tokens, n = kept[name]
        result[name] = {
            "median_ms": {way: round(1000 * m, 1) for way, m in medians.items()},
            "whole_over_ours": round(medians["whole"] / medians["ours"], 3),
            "flops_predict": round(flops_ratio(shape, tokens, n), 4),
            # Carbon-3B at the same share kept (a NIAH prompt of 32k, the shipped 49,146 bp
            # tile with 24,000 bp of context, a 4,001-token right-end context)
            "flops_predict_carbon_3b": round(flops_ratio(carbon, *CARBON_3B_PASSES[name]), 4),
            "max_abs_difference": difference[name],
        }
        r = result[name]
        print(
            f"{name} ({result['passes'][name]} x {tokens:,} tokens, {n:,} kept): "
            f"ours {r['median_ms']['ours']} ms, the whole last layer {r['median_ms']['whole']} "
            f"ms (medians of {args.reps}): {r['whole_over_ours']}x; the FLOPs predict "
            f"{r['flops_predict']}x (Carbon-3B: {r['flops_predict_carbon_3b']}x); answers "
            f"within {r['max_abs_difference']:.2g}"
        )
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
