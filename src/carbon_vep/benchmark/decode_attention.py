"""Benchmark: recovery's decode step on a static cache, compiled as the CUDA paths compile it,
under transformers' `sdpa` (what recovery jobs loaded until 2026-11-29) and under the jobs'
attention (`LOWER_RIGHT_SDPA`, model.attention), side by side in one process on the CPU.

Traced by torch.compile, transformers' sdpa cannot pack a decode step's grouped query heads
under the static cache's mask and repeats every layer's cached keys and values per query head
(repeat_kv) each step; the jobs' attention packs the query heads under their key head, as
transformers' eager code does, and reads the cache as it is. The loop is the product's
(model.captured_decode.CapturedDecoder) with its whole forward torch.compile'd, as
transformers' static loop compiles it on CUDA (and the captured loop did until 2026-11-29; it
now compiles the layers' steps only, its attention eager: docs/generation.md); the CUDA
graph itself needs CUDA (the GPU check's `rollouts` step). The model has Carbon-3B's attention
layout (32 query heads on 4 key-value heads of 96) at a few layers and random weights. Each way
decodes the same prompts, a warm-up call first (the compile), then `--reps` timed calls by
turns (each way first in half of them); printed: the median step each way (the loop's own
clock, StepClock), the ratio, the bytes a step's attention moves each way (arithmetic: the
cache read once, against read, written `groups` times over and read again), and whether the
rollouts are the same tokens (random weights: near-ties may flip on rounding; the CPU tests
compare the loop with `generate` on a model with clear choices, tests/suite).
Usage: python -m carbon_vep.benchmark.decode_attention [--layers 2] [--head-dim 96] [--rows 8]
[--prompt 1024] [--new 32] [--reps 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from carbon_vep.benchmark.harness import write_json
from carbon_vep.config.gpus import CARBON_SHAPES
from carbon_vep.model.attention import register
from carbon_vep.model.captured_decode import CapturedDecoder
from carbon_vep.suite.rollouts import StepClock

VOCAB = 4_200  # the 4,096 6-mers and some: the output layer is not what is measured
WAYS = ("sdpa", "jobs")


def carbon_3b_attention(layers: int, head_dim: int) -> LlamaForCausalLM:
    """Random weights, Carbon-3B's heads (at `head_dim`: 96 is Carbon-3B's width), `layers`
    layers, an MLP as wide as the model."""
    shape = CARBON_SHAPES["Carbon-3B"]
    hidden = shape["num_attention_heads"] * head_dim
    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=shape["num_attention_heads"],
        num_key_value_heads=shape["num_key_value_heads"],
        head_dim=head_dim,
        vocab_size=VOCAB,
        max_position_embeddings=16_384,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def attention_bytes_a_step(config, rows: int, slots: int, packed: bool) -> int:
    """float32 keys and values an attention step moves in every layer: the cache read once
    (packed), or read, written `groups` times over and read again (repeat_kv)."""
    cache = 4 * 2 * config.num_key_value_heads * config.head_dim * slots * rows
    groups = config.num_attention_heads // config.num_key_value_heads
    return config.num_hidden_layers * cache * (1 if packed else 1 + 2 * groups)


def decoder(model, attention: str, slots: int, new: int, clock: StepClock) -> CapturedDecoder:
    """The product's loop on `model` under `attention`, its forward compiled (the CUDA path's
    compile, without the graph capture, which needs CUDA)."""
    model.set_attn_implementation(attention)
    torch._dynamo.reset()
    loop = CapturedDecoder(model, slots, new, lambda scores: scores.argmax(-1), False, clock)
    loop.forward = torch.compile(model, dynamic=None)  # read by every step through the loop
    return loop


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=96, help="Carbon-3B's 96 by default")
    parser.add_argument("--rows", type=int, default=8, help="prompts decoded together")
    parser.add_argument("--prompt", type=int, default=1024, help="tokens a prompt")
    parser.add_argument("--new", type=int, default=32, help="tokens generated a prompt")
    parser.add_argument("--reps", type=int, default=3, help="timed calls each way")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    model = carbon_3b_attention(args.layers, args.head_dim)
    attention = {"sdpa": "sdpa", "jobs": register()}
    ids = torch.randint(
        0, VOCAB, (args.rows, args.prompt), generator=torch.Generator().manual_seed(1)
    )
    slots = args.prompt + args.new - 1
    steps: dict[str, list[float]] = {way: [] for way in WAYS}
    tokens: dict[str, torch.Tensor] = {}
    for turn in range(args.reps):
        for way in WAYS if turn % 2 == 0 else WAYS[::-1]:
            clock = StepClock()
            loop = decoder(model, attention[way], slots, args.new, clock)
            with torch.inference_mode():
                loop.generate(ids)  # the compile
                tokens[way] = loop.generate(ids)
            rows, count, seconds = clock.spans[-1]
            steps[way].append(seconds / count)
    config = model.config
    medians = {way: statistics.median(s) for way, s in steps.items()}
    result = {
        "layers": args.layers,
        "head_dim": args.head_dim,
        "rows": args.rows,
        "prompt_tokens": args.prompt,
        "new_tokens": args.new,
        "reps": args.reps,
        "threads": torch.get_num_threads(),
        "step_ms": {way: [round(1000 * t, 2) for t in times] for way, times in steps.items()},
        "median_step_ms": {way: round(1000 * m, 2) for way, m in medians.items()},
        "sdpa_over_jobs": round(medians["sdpa"] / medians["jobs"], 2),
        "attention_bytes_a_step": {
            way: attention_bytes_a_step(config, args.rows, slots, way == "jobs") for way in WAYS
        },
        "same_tokens": bool(torch.equal(tokens["sdpa"], tokens["jobs"])),
    }
    mb = {way: f"{moved / 1e6:,.1f}" for way, moved in result["attention_bytes_a_step"].items()}
    print(
        f"decode step, {args.rows} rows x {slots:,} cache slots, {args.layers} layers of "
        f"Carbon-3B's attention, compiled: transformers' sdpa {result['median_step_ms']['sdpa']} "
        f"ms, the jobs' attention {result['median_step_ms']['jobs']} ms (medians of "
        f"{args.reps}): {result['sdpa_over_jobs']}x; attention moves {mb['sdpa']} MB against "
        f"{mb['jobs']} MB a step (arithmetic); same tokens: {result['same_tokens']}"
    )
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
