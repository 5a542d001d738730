"""Long rollouts as recovery jobs on each engine, alone and with the draft, side by side.

`make bench-generate`'s second phase (docs/generation.md): the same prompts run through
`carbon-vep score-recovery` four times, each a whole job in a fresh process: our engine, our
engine with a 1-layer draft (transformers' assisted generation), vLLM (from `.venv-vllm`), and
vLLM with the same draft (its draft-model speculative decoding). Per job: the rollouts' output
tokens/s and bp/s from the job's own times (engine start excluded), the wall time with it, peak
RSS, the draft's acceptance from the job's metrics, and whether its predictions equal ours
alone. The models have Carbon's vocabulary and tokenizer and Carbon-3B's head dimension (96:
vLLM's CPU attention has no kernel for the demo model's 16); float32, random weights.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl

from carbon_vep.benchmark.vllm import HEAD96, OURS_EXE, VLLM_EXE, job_times, run_task
from carbon_vep.markdown import table as markdown_table

TARGET_LAYERS, DRAFT_LAYERS = 4, 1


def engine_models(work: Path) -> tuple[Path, Path]:
    """A 4-layer target and a 1-layer draft that share the demo's tokenizer, head dim 96."""
    from carbon_vep.model.demo import build_demo_model

    target = build_demo_model(work / "target96", num_layers=TARGET_LAYERS, seed=5, **HEAD96)
    draft = build_demo_model(work / "draft96", num_layers=DRAFT_LAYERS, seed=6, **HEAD96)
    return target, draft


def recovery_table(work: Path, prompts: list[str], new_tokens: int, k: int) -> Path:
    """The prompts as a recovery task whose labels are as long as the rollouts."""
    label = "A" * (new_tokens * k)
    path = work / "rollouts.tsv"
    path.write_text("sequence\tlabel\n" + "".join(f"{p}\t{label}\n" for p in prompts))
    return path


def engines_phase(
    work: Path,
    prompts: list[str],
    new_tokens: int,
    speculative_tokens: int,
    vllm_exe: Path | None = VLLM_EXE,
) -> dict:
    """The four jobs (module docstring); vLLM's two are skipped, with the reason, when its
    environment is missing."""
    target, draft = engine_models(work)
    table = recovery_table(work, prompts, new_tokens, 6)
    flags = ("--new-tokens", str(new_tokens), "--max-prompt-bp", str(max(map(len, prompts))))
    drafting = ("--draft-model", str(draft), "--num-speculative-tokens", str(speculative_tokens))
    runs = [
        ("ours", OURS_EXE, "transformers", ()),
        ("ours, drafted", OURS_EXE, "transformers", drafting),
    ]
    skipped = None
    if vllm_exe is not None and Path(vllm_exe).exists():
        runs += [("vLLM", vllm_exe, "vllm", ()), ("vLLM, drafted", vllm_exe, "vllm", drafting)]
    else:
        skipped = f"no {vllm_exe}: run `make setup-vllm` for the vLLM jobs"
        print(f"[bench-generate] vLLM skipped: {skipped}", file=sys.stderr)
    jobs, predictions = [], {}
    for i, (name, exe, engine, extra) in enumerate(runs):
        out = work / f"rollouts_{i}.parquet"
        batch = ("--batch-size", str(len(prompts)))
        measured = run_task(exe, engine, "rollouts", table, target, out, *batch, *flags, *extra)
        predictions[name] = pl.read_parquet(out)["prediction"].to_list()
        jobs.append(_job(name, engine, measured, job_times(out), out, len(prompts) * new_tokens))
    for job in jobs:
        job["identical_to_ours"] = predictions[job["run"]] == predictions["ours"]
    return {"jobs": jobs, "vllm_skipped": skipped, "new_tokens": new_tokens}


def _job(name: str, engine: str, measured, times: dict, out: Path, tokens: int) -> dict:
    metrics = json.loads(out.with_suffix(".json").read_text())
    speculative = metrics.get("speculative") or {}
    record = {
        "run": name,
        "engine": engine,
        "output_tokens": tokens,
        "start_s": times["start_s"],
        "rollout_s": times["score_s"],
        "tokens_per_s": tokens / times["score_s"],
        "bp_per_s": 6 * tokens / times["score_s"],
        "wall_s": measured.seconds,
        "peak_rss_mb": measured.peak_rss_mb,
        "acceptance_rate": speculative.get("acceptance_rate"),
    }
    print(
        f"[bench-generate] {name}: {tokens} tokens in {times['score_s']:.2f} s "
        f"({record['tokens_per_s']:,.1f} tokens/s) after a start of {times['start_s']:.1f} s",
        file=sys.stderr,
    )
    return record


def markdown(result: dict) -> str:
    header = ["job", "output tokens", "rollouts s", "tokens/s", "bp/s", "engine start s"]
    header += ["wall s", "peak RSS MB", "acceptance", "predictions = ours"]
    rows = [
        [
            j["run"],
            f"{j['output_tokens']:,}",
            f"{j['rollout_s']:.2f}",
            f"{j['tokens_per_s']:,.1f}",
            f"{j['bp_per_s']:,.0f}",
            f"{j['start_s']:.1f}",
            f"{j['wall_s']:.1f}",
            f"{j['peak_rss_mb']:,.0f}",
            "–" if j["acceptance_rate"] is None else f"{j['acceptance_rate']:.2f}",
            "yes" if j["identical_to_ours"] else "no",
        ]
        for j in result["jobs"]
    ]
    text = markdown_table(header, rows)
    if result["vllm_skipped"]:
        text += f"\n\nvLLM skipped: {result['vllm_skipped']}."
    return text
