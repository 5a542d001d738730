"""Benchmark: the product's passes with the decoder layers' steps around attention compiled
(`compile_layers`, model.compiled_layers) against eager, in one process.

Two engines on one model, one eager and one after `Engine.compile_layers()`, run the product's
own functions on the same inputs: `scan_tiles` on tiles of one length (as a scan chunk runs
them), `Engine.last_hidden_states` on contexts of one length (the right-end recipe),
`window_groups_scores` on window groups of a reference and three alternates at its centre (the
centered recipe: prefixes, then suffixes off their cache, full-vocabulary normaliser), and a
prompt of all the contexts' tokens prefilled in chunks of one context off a growing cache, read
at its last token (Genomic-NIAH's prefill, suite.niah). The compiled
engine's first call compiles (timed alone, as `compile_s`); then both ways alternate, each
first in turn (harness.median_interleaved), and the medians, their ratio and the largest
difference between the two ways' answers are printed. The element-wise kernels compiling fuses
are a larger share of a GPU's time than of a CPU's (docs/performance.md#compiled-decoder-layers);
the flags give a GPU run the product's dtype and a wider model (the GPU check's
`compiled_layers` rerun measures the product's jobs there).

Usage: python -m carbon_vep.benchmark.compiled_layers [--layers 4] [--hidden 512] [--tile-bp 6144]
[--tiles 8] [--reps 5] [--device cpu] [--dtype float32] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from carbon_vep.benchmark.harness import PROJECT_ROOT, median_interleaved, timed, write_json
from carbon_vep.columns import SCAN_BASES
from carbon_vep.config.stages import ModelSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.model.demo import build_carbon_like_model
from carbon_vep.model.engine import Engine, new_cache
from carbon_vep.model.job import load_engine
from carbon_vep.model.window_groups import window_groups_scores
from carbon_vep.scan.tiles import scan_tiles
from carbon_vep.scan.tiling import tile_region

FASTA = PROJECT_ROOT / "resources/demo/chr17.hg19.part.fa"
CHROM = "chr17"
SCAN_VALUES = [f"{kind}_{b}" for kind in ("fns", "cond") for b in SCAN_BASES]
WHAT = {
    "scan": " a pass",
    "right_end": " a pass",
    "centered": ", groups of 4 alleles",
    "prefill": " in one prompt, a chunk each",
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--tile-bp", type=int, default=6144, help="a scan tile (and a context)")
    parser.add_argument("--tiles", type=int, default=8, help="tiles, and right-end contexts")
    parser.add_argument("--reps", type=int, default=5, help="measured rounds, each way")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_carbon_like_model(Path(tmp) / "model", args.layers, args.hidden)
        settings = ModelSettings(
            str(model),
            trust_remote_code=True,
            device=args.device,
            dtype=args.dtype,
            batch_size=args.tiles,
        )
        eager = load_engine(settings, None)  # the jobs' attention, probe and all
    compiled = Engine(eager.model, eager.vocab, eager.device, batch_size=args.tiles)
    compiled.compile_layers()
    reference = open_reference(FASTA)
    context_bp = args.tile_bp // 2
    tiles = tile_region(
        reference.lengths[CHROM],
        context_bp,
        context_bp + args.tiles * (args.tile_bp - context_bp),
        args.tile_bp,
        context_bp,
    )
    rng = np.random.default_rng(3)
    dna = np.asarray(eager.vocab.kmer_ids)
    tokens = args.tile_bp // 6 + 1
    contexts = [
        np.concatenate([[eager.vocab.prefix_id], rng.choice(dna, tokens - 1)])
        for _ in range(args.tiles)
    ]

    def scan(engine: Engine):
        return lambda: torch.as_tensor(
            scan_tiles(engine, reference, CHROM, tiles).select(SCAN_VALUES).to_numpy()
        )

    def right_end(engine: Engine):
        return lambda: engine.last_hidden_states(contexts).float().cpu()

    windows = [reference.fetch(CHROM, t.start, t.start + args.tile_bp) for t in tiles]
    groups = [(ref, _alternates(ref)) for ref in windows]

    def centered(engine: Engine):
        def run() -> torch.Tensor:
            scores = window_groups_scores(engine, groups, "token", "full_vocab")
            totals = [s.total for ref, alts in scores for s in (ref, *alts)]
            return torch.tensor(totals, dtype=torch.float64)

        return run

    prompt = np.concatenate(contexts)[None]

    def prefill(engine: Engine):
        def run() -> torch.Tensor:
            cache = new_cache(engine.model)
            for lo in range(0, prompt.shape[1] - tokens, tokens):
                engine.forward(prompt[:, lo : lo + tokens], cache=cache, keep_last=0)
            last, _ = engine.forward(prompt[:, -tokens:], cache=cache, keep_last=1)
            return last.float().cpu()

        return run

    result: dict = {
        "layers": args.layers,
        "hidden": args.hidden,
        "device": args.device,
        "dtype": args.dtype,
        "tokens_a_pass": tokens,
        "passes": args.tiles,
        "threads": torch.get_num_threads(),
    }
    paths = {"scan": scan, "right_end": right_end, "centered": centered, "prefill": prefill}
    for name, path in paths.items():
        with torch.inference_mode():
            compile_s, ours = timed(path(compiled), eager.device)
            theirs = path(eager)()
            medians = median_interleaved(
                {"eager": path(eager), "compiled": path(compiled)}, args.reps, name, eager.device
            )
        result[name] = {
            "compile_s": round(compile_s, 2),
            "median_ms": {way: round(1000 * s, 1) for way, s in medians.items()},
            "eager_over_compiled": round(medians["eager"] / medians["compiled"], 3),
            "max_abs_difference": float((ours - theirs).abs().max()),
        }
        r = result[name]
        print(
            f"{name} ({args.tiles} x {tokens:,} tokens{WHAT[name]}, {args.layers} layers of "
            f"{args.hidden}, "
            f"{args.dtype} on {args.device}): eager {r['median_ms']['eager']} ms, compiled "
            f"{r['median_ms']['compiled']} ms (medians of {args.reps}): "
            f"{r['eager_over_compiled']}x, after a first call of {compile_s:.1f} s that "
            f"compiled; answers within {r['max_abs_difference']:.2g}"
        )
    if args.json:
        write_json(args.json, result)
    return result


def _alternates(window: str) -> list[str]:
    """The three single-base alternates of a window at its centre."""
    mid = len(window) // 2
    return [window[:mid] + b + window[mid + 1 :] for b in "ACGT" if b != window[mid].upper()]


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
