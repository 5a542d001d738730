"""Long greedy rollouts on our engine, alone and with a draft model (docs/generation.md):
output tokens/s and bp/s, peak memory, the draft's acceptance rate, whether the drafted
predictions equal the plain ones, and the speed-up speculative decoding would give at a higher
acceptance (arithmetic from the measured step times).

`make bench-generate` runs it on the CPU with small Carbon-layout models (the demo's tokenizer,
random weights), then the same prompts as recovery jobs on our engine and on vLLM, each alone
and with the draft (benchmark/generate_engines.py); the GPU check's `rollouts` step runs the
same functions with Carbon-3B as the target and Carbon-500M as the draft (benchmark/gpu/run.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from carbon_vep.benchmark.generate_engines import engines_phase
from carbon_vep.benchmark.generate_engines import markdown as engines_markdown
from carbon_vep.benchmark.harness import (
    device_peak_gb,
    reset_device_peak,
    timed,
    write_json,
)
from carbon_vep.benchmark.synthetic import random_acgt
from carbon_vep.benchmark.vllm import VLLM_EXE
from carbon_vep.config.stages import DEFAULT_SPECULATIVE_TOKENS, ModelSettings, RecoverySettings
from carbon_vep.markdown import table as markdown_table
from carbon_vep.model.drafting import Draft, check_draft
from carbon_vep.model.loading import LoadedModel, load_model
from carbon_vep.suite.recovery import generate_continuations

PROMPT_TOKENS = 2048
NEW_TOKENS = 512
ASSUMED_ACCEPTANCE = (0.6, 0.8, 0.9)  # what the projection is drawn at (arithmetic)


def random_prompts(n: int, tokens: int, k: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [random_acgt(tokens * k, rng) for _ in range(n)]


def rollout(
    target: LoadedModel,
    prompts: list[str],
    new_tokens: int,
    batch_size: int,
    draft: Draft | None = None,
    label: str = "",
) -> tuple[dict, list[str | None]]:
    """One timed `generate_continuations` call (the recovery task's own code) and its record."""
    settings = RecoverySettings(
        new_tokens=new_tokens,
        score_bp=new_tokens * target.vocab.k,
        max_prompt_bp=max(map(len, prompts)),
    )
    reset_device_peak(target.device)
    seconds, texts = timed(
        lambda: generate_continuations(target, prompts, settings, batch_size, draft=draft),
        target.device,
    )
    tokens = new_tokens * sum(t is not None for t in texts)  # min = max new tokens
    record = _record(target, label, 1 if draft else batch_size, prompts, tokens, seconds)
    if draft:
        record["draft"] = draft.record()
    return record, texts


@torch.inference_mode()
def card_rollout(target: LoadedModel, prompt: str, new_tokens: int) -> dict:
    """The reference: `model.generate` called as the Carbon-3B card calls it (greedy, no
    processors of ours, no batching code), on the same prompt, timed the same way."""
    ids = torch.as_tensor(target.vocab.encode(prompt), device=target.device)[None]
    reset_device_peak(target.device)
    seconds, _ = timed(
        lambda: target.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=target.vocab.pad_id,
        ),
        target.device,
    )
    return _record(target, "model.generate as the card calls it", 1, [prompt], new_tokens, seconds)


def _record(
    target: LoadedModel,
    label: str,
    batch_size: int,
    prompts: list[str],
    tokens: int,
    seconds: float,
) -> dict:
    """One run's line: rates, peak device memory; printed as it is made."""
    k = target.vocab.k
    print(
        f"[bench-generate] {label}: {tokens} tokens in {seconds:.2f} s, "
        f"{tokens * k / seconds:,.0f} bp/s",
        file=sys.stderr,
    )
    return {
        "run": label,
        "batch_size": batch_size,
        "prompts": len(prompts),
        "prompt_tokens": len(prompts[0]) // k,
        "new_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "bp_per_s": tokens * k / seconds,
        "peak_gpu_gb": device_peak_gb(target.device),
    }


def first_difference(a: str | None, b: str | None, k: int) -> int | None:
    """The first generated token at which two continuations differ (None: identical)."""
    if a == b:
        return None
    a, b = a or "", b or ""
    same = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return same // k


def projected_speedup(alpha: float, speculative_tokens: int, cost_ratio: float) -> float:
    """Leviathan et al. (arXiv:2211.17192, eq. 1 and Theorem 3.8): expected tokens per target
    step (1 - α^(K+1)) / (1 - α) over the step's cost K·c + 1, with c = draft step / target step
    and verification costing one target step (true while decoding is memory-bound)."""
    k = speculative_tokens
    expected = (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1
    return expected / (k * cost_ratio + 1)


def compare(
    target: LoadedModel,
    draft_model: LoadedModel,
    names: tuple[str, str],
    prompts: list[str],
    new_tokens: int,
    batch_size: int,
    speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS,
) -> dict:
    """Target alone (batch 1 and batched), draft alone, target with the draft: side by side.
    `prompts[:1]` is what the one-at-a-time runs take; the batched run takes them all."""
    check_draft(target, draft_model, *names)
    one = prompts[:1]
    rollout(target, [p[:600] for p in one], 4, 1, label="warm-up")  # kernels, allocator
    card = card_rollout(target, one[0], new_tokens)
    plain, plain_texts = rollout(target, one, new_tokens, 1, label=f"{names[0]} batch 1")
    alone, _ = rollout(draft_model, one, new_tokens, 1, label=f"{names[1]} alone, batch 1")
    draft = Draft(draft_model, tokens=speculative_tokens)
    drafted, drafted_texts = rollout(
        target, one, new_tokens, 1, draft, label=f"{names[0]}, {names[1]} drafting"
    )
    batched, batched_texts = rollout(
        target, prompts, new_tokens, batch_size, label=f"{names[0]} batch {batch_size}"
    )
    cost_ratio = plain["tokens_per_s"] / alone["tokens_per_s"]
    return {
        "target": names[0],
        "draft": names[1],
        "runs": [card, plain, alone, drafted, batched],
        "drafted_identical": drafted_texts == plain_texts,
        "drafted_first_difference_token": first_difference(
            drafted_texts[0], plain_texts[0], target.vocab.k
        ),
        "batched_first_identical": batched_texts[:1] == plain_texts,
        "speedup_measured": drafted["tokens_per_s"] / plain["tokens_per_s"],
        "draft_cost_ratio": cost_ratio,
        "projected_speedup": {
            f"{a:.1f}": projected_speedup(a, speculative_tokens, cost_ratio)
            for a in ASSUMED_ACCEPTANCE
        },
    }


def markdown(result: dict) -> str:
    header = ["run", "batch", "new tokens", "tokens/s", "bp/s", "peak GPU GB", "acceptance"]
    rows = []
    for r in result["runs"]:
        gpu = f"{r['peak_gpu_gb']:.1f}" if r["peak_gpu_gb"] is not None else "–"
        rate = (r.get("draft") or {}).get("acceptance_rate")
        rows.append(
            [
                r["run"],
                r["batch_size"],
                f"{r['new_tokens']:,}",
                f"{r['tokens_per_s']:,.1f}",
                f"{r['bp_per_s']:,.0f}",
                gpu,
                "–" if rate is None else f"{rate:.2f}",
            ]
        )
    lines = [markdown_table(header, rows)]
    projected = ", ".join(f"α={a}: {s:.2f}x" for a, s in result["projected_speedup"].items())
    lines += [
        "",
        f"Drafted predictions identical to the target's alone: {result['drafted_identical']}"
        + (
            f" (first difference at generated token {d})"
            if (d := result.get("drafted_first_difference_token")) is not None
            else ""
        )
        + ". "
        f"Measured speed-up with the draft: {result['speedup_measured']:.2f}x; draft step / "
        f"target step: {result['draft_cost_ratio']:.2f}; projected at higher acceptance "
        f"(arithmetic): {projected}.",
    ]
    return "\n".join(lines)


def _cpu_models(folder: Path) -> tuple[LoadedModel, LoadedModel]:
    """A 4-layer target and a 1-layer draft with the demo's Carbon-layout tokenizer."""
    from carbon_vep.model.demo import build_demo_model

    def load(path: Path) -> LoadedModel:
        return load_model(ModelSettings(str(path), trust_remote_code=True))

    target = build_demo_model(
        folder / "target", hidden_size=256, num_layers=4, intermediate_size=512
    )
    draft = build_demo_model(folder / "draft", hidden_size=64, num_layers=1, seed=1)
    return load(target), load(draft)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS)
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    parser.add_argument("--prompts", type=int, default=4, help="prompts of the batched run")
    parser.add_argument("--speculative-tokens", type=int, default=DEFAULT_SPECULATIVE_TOKENS)
    parser.add_argument(
        "--vllm-exe",
        type=Path,
        default=VLLM_EXE,
        help="carbon-vep of the vLLM environment for the engines phase (default: .venv-vllm's)",
    )
    parser.add_argument(
        "--no-engines", action="store_true", help="skip the recovery jobs on each engine"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_generate_") as tmp:
        target, draft = _cpu_models(Path(tmp))
        prompts = random_prompts(args.prompts, args.prompt_tokens, target.vocab.k)
        result = compare(
            target,
            draft,
            ("target (4 layers)", "draft (1 layer)"),
            prompts,
            args.new_tokens,
            args.prompts,
            args.speculative_tokens,
        )
        print(markdown(result))
        if not args.no_engines:
            phase = engines_phase(
                Path(tmp), prompts, args.new_tokens, args.speculative_tokens, args.vllm_exe
            )
            result["engines"] = phase
            print("\n" + engines_markdown(phase))
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
