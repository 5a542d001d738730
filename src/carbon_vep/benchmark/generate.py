"""Long greedy rollouts as the product's recovery jobs, alone, batched and with a draft model
(docs/generation.md). One runner for `make bench-generate` (here, on the CPU) and the GPU check's
`rollouts` step (benchmark/gpu/rollouts.py, on the product step's checkpoints).

Each run is a whole `carbon-vep score-recovery` job in a fresh process, as users run it: ours at
batch 1 (one prompt), again with our captured loop (`--decode-cache captured`: on CUDA the
layers' steps compiled, the step replayed as a CUDA graph; docs/generation.md#captured-decode-steps)
and on transformers' static KV cache (`--decode-cache static`: on CUDA its decode step compiled,
CUDA graphs; docs/generation.md#static-kv-cache), ours batched (every prompt in one batch),
batched captured and batched on the static cache, the draft alone at batch 1 (its step cost),
ours with the draft (K proposals a step; one prompt) in our captured loop
(model.captured_drafting) and in transformers' assisted generation; with a vLLM environment,
vLLM and vLLM with the same draft (every prompt). Per job, read from what the job writes: the
rollouts' seconds after the engine start (`--times`), hence output tokens/s and bp/s; ours
without transformers' draft, the steady rate at its median decode step (the `--times` JSON's
`decode_steps`: one-off costs left out); its record (model.job_record: load, GPU peaks on
CUDA); the draft's acceptance (the metrics JSON's `speculative`); its predictions, compared
with ours alone (a static-cache or captured job: with its dynamic twin). The launcher's wait4
gives wall time and peak RSS. Arithmetic beside it: the draft/target step-cost ratio (from the
two batch-1 jobs) and the speed-up it projects at a higher acceptance.

The card's plain `model.generate` is not run: our batch-1 job is that call (greedy, one prompt,
the model's KV cache), with the published recipe's special-token suppression, and no job runs
`generate` without it (docs/generation.md#how-fast-measured-as-recovery-jobs).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.benchmark.harness import TIMED_OUT, StepFailed, job_env, run_command, write_json
from carbon_vep.benchmark.synthetic import random_acgt
from carbon_vep.benchmark.vllm import HEAD96, OURS_EXE, VLLM_EXE, job_times, task_command
from carbon_vep.config.stages import DEFAULT_SPECULATIVE_TOKENS
from carbon_vep.markdown import table as markdown_table
from carbon_vep.model.job_record import RECORDS_ENV

PROMPT_TOKENS = 2048
NEW_TOKENS = 512
K = 6  # bases a token (Carbon's 6-mers): prompts are drawn in bases, rates given in bp
ASSUMED_ACCEPTANCE = (0.6, 0.8, 0.9)  # what the projection is drawn at (arithmetic)
STOPPED_LOG_CHARS = 1500  # of a job stopped at the time limit: its stderr's end, kept
# key: (label, model "target"/"draft", prompts "one"/"all", drafted, engine, decode cache);
# the static-cache and captured jobs' predictions are compared with ours dynamic on the same
# prompts
STATIC = ("transformers", "static")
CAPTURED = ("transformers", "captured")
# In the order they run: under a time limit (the GPU check) the captured loop and the static
# cache, issue 53's decoding question, come before the draft, whose acceptance between two
# random-weight models says nothing (on the H200, 2026-11-28, the draft jobs used the whole
# allowance); the captured loop first, the one built for that question.
JOBS = {
    "ours": ("ours, batch 1", "target", "one", False, "transformers", "dynamic"),
    "ours_captured": ("ours, batch 1, captured steps", "target", "one", False, *CAPTURED),
    "ours_batched": ("ours, batched", "target", "all", False, "transformers", "dynamic"),
    "ours_batched_captured": ("ours, batched, captured steps", "target", "all", False, *CAPTURED),
    "ours_static": ("ours, batch 1, static cache", "target", "one", False, *STATIC),
    "ours_batched_static": ("ours, batched, static cache", "target", "all", False, *STATIC),
    "draft": ("draft alone, batch 1", "draft", "one", False, "transformers", "dynamic"),
    "ours_drafted_captured": ("ours with the draft, captured", "target", "one", True, *CAPTURED),
    "ours_drafted": ("ours with the draft", "target", "one", True, "transformers", "dynamic"),
    "vllm": ("vLLM", "target", "all", False, "vllm", "dynamic"),
    "vllm_drafted": ("vLLM with the draft", "target", "all", True, "vllm", "dynamic"),
}
OURS_JOBS = [key for key, job in JOBS.items() if job[4] == "transformers"]


def random_prompts(n: int, tokens: int, k: int = K, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [random_acgt(tokens * k, rng) for _ in range(n)]


def recovery_table(path: Path, prompts: list[str], new_tokens: int) -> Path:
    """The prompts as a recovery task whose labels are as long as the rollouts."""
    label = "A" * (new_tokens * K)
    path.write_text("sequence\tlabel\n" + "".join(f"{p}\t{label}\n" for p in prompts))
    return path


def rollout_jobs(
    target: Path,
    draft: Path,
    work: Path,
    prompts: list[str],
    new_tokens: int,
    env: dict[str, str],
    device: str = "cpu",
    dtype: str = "float32",
    speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS,
    ours: str = "carbon-vep",
    vllm: Path | None = None,
    time_limit_s: float | None = None,
    only: list[str] | None = None,
) -> dict:
    """The jobs of the module docstring on these checkpoints (`ours`, `vllm`: the carbon-vep
    launchers of each environment, resolved on env's PATH; vLLM's jobs are skipped, with the
    reason, without one) and what they give side by side. Within `time_limit_s` (the GPU
    check's budget): a job still running at the limit is stopped, it and the jobs after it
    are listed under `stopped`, and the figures of those that ran stand. `only`: these jobs
    alone (in JOBS' order)."""
    work.mkdir(parents=True, exist_ok=True)
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    tables = {
        "one": recovery_table(work / "prompts_one.tsv", prompts[:1], new_tokens),
        "all": recovery_table(work / "prompts_all.tsv", prompts, new_tokens),
    }
    keys = list(OURS_JOBS)
    skipped = None
    if vllm is not None and Path(vllm).exists():
        keys += ["vllm", "vllm_drafted"]
    else:
        skipped = f"no {vllm}: run `make setup-vllm` for the vLLM jobs" if vllm else "no vLLM here"
    keys = [key for key in keys if only is None or key in only]
    jobs, predictions, k = {}, {}, speculative_tokens
    static_failed: dict[str, str] = {}
    stopped: dict[str, str] = {}
    stopped_logs: dict[str, str] = {}
    for key in keys:
        left = None if deadline is None else deadline - time.monotonic()
        if stopped or (left is not None and left <= 0):
            stopped[key] = "not started: the time limit was reached"
            continue
        label, model, which, drafted, engine, cache = JOBS[key]
        out = work / f"{key}.parquet"
        records = work / "records" / key
        batch = len(prompts) if which == "all" else 1
        argv = task_command(
            [str(vllm if engine == "vllm" else ours)],
            engine,
            "rollouts",
            tables[which],
            target if model == "target" else draft,
            out,
            *("--device", device, "--dtype", dtype, "--batch-size", str(batch)),
            *("--new-tokens", str(new_tokens), "--max-prompt-bp", str(max(map(len, prompts)))),
            *(("--draft-model", str(draft), "--num-speculative-tokens", str(k)) if drafted else ()),
            *(("--decode-cache", cache) if cache != "dynamic" else ()),
        )
        try:
            measured = run_command(
                argv, env=dict(env, **{RECORDS_ENV: str(records)}), timeout_s=left
            )
        except StepFailed as failure:
            if failure.returncode == TIMED_OUT and left is not None:
                stopped[key] = f"stopped at the time limit ({left:.0f} s left when it started)"
                print(f"[bench-generate] {label}: {stopped[key]}", file=sys.stderr)
                # where its time went: its log's last lines, timestamped (run 13, 2026-11-29:
                # the captured job was cut with nothing to say how far it had come)
                stopped_logs[key] = str(failure)[-STOPPED_LOG_CHARS:]
                continue
            if key not in STATIC_TWINS:
                raise
            # the compiled path's first runs on a GPU: its failure keeps the other jobs' figures
            static_failed[key] = str(failure)[-1500:]
            print(f"[bench-generate] {label}: failed", file=sys.stderr)
            continue
        jobs[key] = read_job(key, out, records, measured.seconds, measured.peak_rss_mb, new_tokens)
        jobs[key] |= {"label": label, "engine": engine, "batch_size": batch, "decode_cache": cache}
        predictions[key] = pl.read_parquet(out)["prediction"].to_list()
        _print(jobs[key])
    result = compare(jobs, predictions, speculative_tokens)
    return {
        "target": target.name,
        "draft": draft.name,
        "device": device,
        "dtype": dtype,
        "prompts": len(prompts),
        "prompt_tokens": len(prompts[0]) // K,
        "new_tokens": new_tokens,
        "speculative_tokens": speculative_tokens,
        **result,
        "static_failed": static_failed,
        "stopped": stopped,
        "stopped_logs": stopped_logs,
        "vllm_skipped": skipped,
    }


def read_job(
    key: str, out: Path, records: Path, wall_s: float, peak_rss_mb: float, new_tokens: int
) -> dict:
    """One job's figures from what it wrote: its times (rollouts after the engine start), its
    record (load; GPU peak on CUDA; vLLM's jobs write none), its metrics (the draft's record)."""
    times = job_times(out)
    metrics = json.loads(out.with_suffix(".json").read_text())
    speculative = metrics.get("speculative")
    steps = times.get("decode_steps") or {}  # ours without a draft (suite.rollouts.StepClock)
    found = sorted(records.glob("*.json")) if records.is_dir() else []
    record = json.loads(found[0].read_text()) if found else {}
    scored = metrics.get("n_scored", times.get("rows", 0))
    tokens = scored * new_tokens  # min = max new tokens: every scored row generated them all
    seconds = times["score_s"]
    gpu = record.get("gpu_peak_reserved_bytes")
    return {
        "run": key,
        "rows": times.get("rows"),
        "output_tokens": tokens,
        "start_s": times["start_s"],
        "rollout_s": seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "bp_per_s": K * tokens / seconds if seconds > 0 else None,
        "wall_s": round(wall_s, 2),
        "load_s": record.get("load_s"),
        "peak_gpu_gb": None if gpu is None else gpu / 1e9,
        "peak_rss_mb": round(peak_rss_mb),
        "acceptance_rate": (speculative or {}).get("acceptance_rate"),
        "speculative": speculative,
        "median_step_ms": steps.get("median_step_ms"),
        "steady_tokens_per_s": steps.get("steady_tokens_per_s"),
        "captured": steps.get("captured"),  # what the captured loop ran (compiled, captured)
    }


def compare(jobs: dict[str, dict], predictions: dict[str, list], speculative_tokens: int) -> dict:
    """Each job's predictions against ours alone on the prompts both ran (a one-prompt job and
    the batched one's first prompt: ours at batch 1; vLLM's: ours batched; the draft's, another
    model's, against nothing; a static-cache job against ours dynamic on the same prompts); the
    speed-up measured with the draft, the one projected from the measured step-cost ratio
    (arithmetic), and each static-cache job against its dynamic twin (`static_cache`)."""
    unknown = ("compared_with", "identical", "differing_prompts", "first_difference_token")
    for key, job in jobs.items():
        same = "ours" if key == "ours_batched" or len(predictions[key]) == 1 else "ours_batched"
        if key == "draft" or same not in predictions:  # another model, or its twin never ran
            job |= dict.fromkeys(unknown)
            continue
        theirs = predictions[same]
        ours = predictions[key][: len(theirs)]
        job["compared_with"] = same
        pairs = [(a, b) for a, b in zip(ours, theirs, strict=False) if a != b]
        job["identical"] = not pairs
        job["differing_prompts"] = len(pairs)
        job["first_difference_token"] = first_difference(*pairs[0], K) if pairs else None
    plain, alone, drafted = (jobs.get(k, {}) for k in ("ours", "draft", "ours_drafted"))
    ratio = _ratio(plain.get("tokens_per_s"), alone.get("tokens_per_s"))
    return {
        "jobs": list(jobs.values()),
        "drafted_identical": drafted.get("identical"),
        "drafted_first_difference_token": drafted.get("first_difference_token"),
        "batched_first_identical": jobs.get("ours_batched", {}).get("identical"),
        "acceptance_rate": drafted.get("acceptance_rate"),
        "speedup_measured": _ratio(drafted.get("tokens_per_s"), plain.get("tokens_per_s")),
        "draft_cost_ratio": ratio,
        "projected_speedup": {
            f"{a:.1f}": projected_speedup(a, speculative_tokens, ratio) for a in ASSUMED_ACCEPTANCE
        }
        if ratio
        else {},
        "static_cache": static_cache(jobs),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


STATIC_TWINS = {  # a static-cache or captured job: its dynamic twin
    "ours_captured": "ours",
    "ours_batched_captured": "ours_batched",
    "ours_static": "ours",
    "ours_batched_static": "ours_batched",
    "ours_drafted_captured": "ours",
}


def static_cache(jobs: dict[str, dict]) -> dict[str, dict]:
    """Each static-cache or captured job that ran against its dynamic twin: identical
    predictions, and the speed-up over the rollouts (one-off costs in: on CUDA the compile and
    the CUDA-graph capture) and at the steady step (the median decode step, one-off costs
    out; the captured loop's replayed steps, timed together), and what the captured loop ran."""

    out = {}
    for key, twin in STATIC_TWINS.items():
        if key in jobs and twin in jobs:
            job, plain = jobs[key], jobs[twin]
            out[key] = {
                "compared_with": twin,
                "identical": job["identical"],
                "speedup_rollouts": _ratio(job["tokens_per_s"], plain["tokens_per_s"]),
                "speedup_steady": _ratio(job["steady_tokens_per_s"], plain["steady_tokens_per_s"]),
                "captured": job.get("captured"),
            }
    return out


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


def _print(job: dict) -> None:
    print(
        f"[bench-generate] {job['label']}: {job['output_tokens']} tokens in "
        f"{job['rollout_s']:.2f} s after an engine start of {job['start_s']:.1f} s",
        file=sys.stderr,
    )


def _figure(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _same(job: dict) -> str:
    if job["identical"] is None:
        return "–"
    verdict = "yes"
    if not job["identical"]:
        n, token = job["differing_prompts"], job["first_difference_token"]
        verdict = f"no: {n} prompt(s), the first from token {token}"
    return f"{verdict} ({job['compared_with']})"


def markdown(result: dict) -> str:
    header = ["job", "batch", "output tokens", "rollouts s", "tokens/s", "bp/s", "steady tokens/s"]
    header += ["engine start s", "wall s", "peak GPU GB", "peak RSS MB", "acceptance"]
    header += ["predictions = ours"]
    rows = [
        [
            j["label"],
            j["batch_size"],
            f"{j['output_tokens']:,}",
            f"{j['rollout_s']:.2f}",
            _figure(j["tokens_per_s"], ",.1f"),
            _figure(j["bp_per_s"], ",.0f"),
            _figure(j.get("steady_tokens_per_s"), ",.1f"),
            f"{j['start_s']:.1f}",
            f"{j['wall_s']:.1f}",
            _figure(j["peak_gpu_gb"], ".1f"),
            f"{j['peak_rss_mb']:,}",
            _figure(j["acceptance_rate"], ".2f"),
            _same(j),
        ]
        for j in result["jobs"]
    ]
    projected = ", ".join(f"α={a}: {s:.2f}x" for a, s in result["projected_speedup"].items())
    lines = [
        f"Target `{result['target']}`, draft `{result['draft']}`, on {result['device']} in "
        f"{result['dtype']}: {result['prompt_tokens']:,}-token prompts, {result['new_tokens']} "
        f"new tokens, K = {result['speculative_tokens']}. Each row is a `carbon-vep "
        "score-recovery` job in a fresh process; its rates are over its rollouts, after the "
        "engine start (its first `generate` call's one-off costs included); steady tokens/s "
        "is ours without a draft at its median decode step (one-off costs such as a compile "
        "left out).",
        "",
        markdown_table(header, rows),
        "",
        f"Measured speed-up with the draft: {_figure(result['speedup_measured'], '.2f')}x at "
        f"acceptance {_figure(result['acceptance_rate'], '.2f')}; draft step / target step "
        "(batch-1 jobs): "
        f"{_figure(result['draft_cost_ratio'], '.2f')}; projected at higher acceptance "
        f"(arithmetic): {projected or '–'}.",
    ]
    for key, twin in (result.get("static_cache") or {}).items():
        same = "identical" if twin["identical"] else "not identical"
        how = twin.get("captured") or {}
        ran = f" Ran: {'; '.join(f'{k} {v}' for k, v in how.items())}." if how else ""
        lines += [
            "",
            f"{_loop(key)} (`{key}`) against `{twin['compared_with']}`: predictions {same}; "
            f"speed-up {_figure(twin['speedup_rollouts'], '.2f')}x over the rollouts, "
            f"{_figure(twin['speedup_steady'], '.2f')}x at the steady step.{ran}",
        ]
    for key, failure in (result.get("static_failed") or {}).items():
        last = failure.strip().splitlines()[-1] if failure.strip() else "no message"
        lines += ["", f"{_loop(key)} (`{key}`) failed: {last}"]
    for key, why in (result.get("stopped") or {}).items():
        lines += ["", f"`{key}`: {why}."]
    if result["vllm_skipped"]:
        lines += ["", f"vLLM skipped: {result['vllm_skipped']}."]
    return "\n".join(lines)


def _loop(key: str) -> str:
    return "Captured decode steps" if JOBS[key][5] == "captured" else "Static KV cache"


def engine_models(work: Path) -> tuple[Path, Path]:
    """A 4-layer target and a 1-layer draft with the demo's tokenizer and Carbon-3B's head
    dimension, 96 (vLLM's CPU attention has no kernel for the demo model's 16)."""
    from carbon_vep.model.demo import build_demo_model

    target = build_demo_model(work / "target", num_layers=4, seed=5, **HEAD96)
    draft = build_demo_model(work / "draft", num_layers=1, seed=6, **HEAD96)
    return target, draft


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS)
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    parser.add_argument("--prompts", type=int, default=4, help="prompts of the batched jobs")
    parser.add_argument("--speculative-tokens", type=int, default=DEFAULT_SPECULATIVE_TOKENS)
    parser.add_argument(
        "--vllm-exe",
        type=Path,
        default=VLLM_EXE,
        help="carbon-vep of the vLLM environment (default: .venv-vllm's)",
    )
    parser.add_argument("--no-vllm", action="store_true", help="skip the vLLM jobs")
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), help="these jobs alone")
    args = parser.parse_args(argv)
    env = job_env()
    with tempfile.TemporaryDirectory(prefix="bench_generate_") as tmp:
        target, draft = engine_models(Path(tmp))
        result = rollout_jobs(
            target,
            draft,
            Path(tmp) / "jobs",
            random_prompts(args.prompts, args.prompt_tokens),
            args.new_tokens,
            env,
            speculative_tokens=args.speculative_tokens,
            ours=str(OURS_EXE),
            vllm=None if args.no_vllm else args.vllm_exe,
            only=args.jobs,
        )
    print(markdown(result))
    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
