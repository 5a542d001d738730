"""The GPU check's report: the environment, the JSON and the Markdown section for
docs/benchmarks.md, rewritten after every step (a run cut short keeps what it measured). The
product's sections are written by their steps' modules (product, reruns)."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

import torch

from carbon_vep.benchmark.gpu import product, reruns, rollouts
from carbon_vep.benchmark.gpu.device import Budget
from carbon_vep.benchmark.harness import (
    markdown_section,
    write_json,
    write_text,
)
from carbon_vep.config.gpus import VLLM_PAGE_TOKENS
from carbon_vep.markdown import table as markdown_table


def environment(device: torch.device, smoke: bool, peak: float, peak_n: int) -> dict:
    import transformers

    threads = torch.get_num_threads()
    cpu = f"CPU ({platform.machine()}, {threads} thread{'s' if threads > 1 else ''})"
    env = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "smoke": smoke,
        "bf16_peak_tflops": peak,
        "peak_matmul_n": peak_n,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env |= {
            "gpu_memory_gb": props.total_memory / 1e9,
            "cudnn": torch.backends.cudnn.version(),
            "flash_sdp_enabled": torch.backends.cuda.flash_sdp_enabled(),
        }
    return env


def markdown(report: dict) -> str:
    """The run as a section for docs/benchmarks.md: the product's own jobs and their reruns,
    then each other step that ran."""
    parts = [_environment_part(report), product.markdown_part(report.get("product"))]
    parts += [reruns.markdown_part(r) for r in report["reruns"].values()]
    parts.append(_known_answer_part(report))
    parts.append(_generation_part(report))
    parts.append(_rollouts_part(report))
    parts.append(_host_memory_part(report))
    if report["skipped"]:
        parts.append("Skipped: " + "; ".join(report["skipped"]) + ".")
    env = report["environment"]
    return markdown_section(f"GPU check: {env['device']}, {env['date']}", *parts, level=2)


def _environment_part(report: dict) -> str:
    env = report["environment"]
    return (
        f"`make gpu-check` (`python -m carbon_vep.benchmark.gpu`"
        f"{' --smoke' if env['smoke'] else ''}), {report.get('elapsed_s', 0):.0f} s. "
        f"torch {env['torch']}, CUDA {env['cuda'] or 'none'}, transformers "
        f"{env['transformers']}. Random-weight models with Carbon's exact shapes (toy shapes "
        f"under --smoke) on a synthetic genome. Measured bf16 matmul peak: "
        f"**{env['bf16_peak_tflops']:,.1f} TFLOP/s** ({env['peak_matmul_n']:,}³ matmuls, same "
        "process): what each rule's share of the peak is of."
    )


def _host_memory_part(report: dict) -> str:
    if not report.get("host_memory"):
        return ""
    intro = (
        "A model job's host memory (benchmark/gpu/host_memory.py): a random-weight bf16 "
        "checkpoint of each shape written to disk, loaded by a fresh process the way every "
        "model job loads (`model.loading.load_model`); its peak resident set (`ru_maxrss`) "
        "against the `mem_mb` the model rules ask for (config/gpus.py `host_memory_mb`)."
    )
    header = ["model", "checkpoint GB", "peak RSS GB", "RSS on the device GB", "load s"]
    header += ["mem_mb asked GB", "asked / peak"]
    rows = [
        [
            r["model"],
            f"{r['checkpoint_gb']:.2f}",
            f"{r['peak_rss_gb']:.2f}",
            f"{r['rss_after_gb']:.2f}",
            f"{r['load_s']:.1f}",
            f"{r['mem_mb_asked'] / 1000:.0f}",
            f"{r['mem_mb_asked'] / 1000 / r['peak_rss_gb']:.2f}x",
        ]
        for r in report["host_memory"]
    ]
    return intro + "\n\n" + markdown_table(header, rows)


def _known_answer_part(report: dict) -> str:
    if not report["known_answer"]:
        return ""
    intro = (
        "Known answer (benchmark/known_answer.py: a tiny Llama trained here on a genome with a "
        "planted motif; 30 motif-breaking vs 30 background SNVs), scored by `carbon-vep score` "
        "and `carbon-vep metrics` jobs:"
    )
    rows = [
        [r["recipe"], r["precision"], r.get("error") or f"{r['auroc']:.3f}"]
        for r in report["known_answer"]
    ]
    return intro + "\n\n" + markdown_table(["recipe", "precision", "AUROC"], rows)


def _generation_part(report: dict) -> str:
    if not report["generation"]:
        return ""
    intro = (
        "Genomic-NIAH on vLLM against our engine (benchmark/gpu/generation.py): the same cell "
        "(neardup_d2, YaRN 4 past 32k) through `carbon-vep score-niah` on each engine, one job "
        "each; rows/s is the scoring alone (the job's log), start-up beside it. vLLM's KV "
        "cache, its rows at once, and the likelihood requests' share of prompt tokens read "
        "from the prefix cache; arithmetic: config/gpus.py vllm_niah_plan."
    )
    header = [
        "context",
        "rows",
        "dtype",
        "ours rows/s",
        "vLLM rows/s",
        "ours start s",
        "vLLM start s",
        "vLLM KV tokens",
        "rows at once",
        "LL cache reads",
        "same pred",
        "same ll_correct",
        "max abs Δ LL",
        "arithmetic",
    ]
    rows = [_generation_row(r) for r in report["generation"]]
    return intro + "\n\n" + markdown_table(header, rows)


def _generation_row(r: dict) -> list[str]:
    ours, theirs = r["transformers"], r["vllm"]
    agreement = r.get("agreement", {})
    kv = theirs.get("kv_cache_tokens")
    cache = theirs.get("prefix_cache", {}).get("likelihood")
    plan = r.get("arithmetic")
    page = VLLM_PAGE_TOKENS

    def rate(side: dict) -> str:
        return f"{side['rows_per_s']:.3g}" if "rows_per_s" in side else side.get("error", "—")

    return [
        f"{r['context_tokens']:,}",
        str(r["rows"]),
        r["dtype"],
        rate(ours),
        rate(theirs),
        f"{ours.get('start_s', 0):.1f}",
        f"{theirs.get('start_s', 0):.1f}",
        f"{kv:,}" if kv else "—",
        f"{kv // (r['context_tokens'] + page):,}" if kv else "—",
        f"{cache['cached_tokens'] / cache['prompt_tokens']:.0%}" if cache else "—",
        f"{agreement['same_pred']:.0%}" if agreement else "—",
        f"{agreement['same_ll_correct']:.0%}" if agreement else "—",
        f"{agreement['max_ll_difference']:.1e}" if agreement else "—",
        (
            f"{plan['gpu']}: {plan['pages'] * page:,.0f} KV tokens, {plan['rows_at_once']:.0f} "
            f"at once, {plan['rows_per_s']:.2g} rows/s"
        )
        if plan
        else "—",
    ]


def _rollouts_part(report: dict) -> str:
    result = report.get("rollouts")
    if not result:
        return ""
    intro = (
        "Long greedy rollouts as the product's recovery jobs (benchmark/gpu/rollouts.py: "
        "`carbon-vep score-recovery`, each job a process of its own, rates from its own rollout "
        f"seconds) on the product's checkpoints: {result['target']} alone, batched, and with "
        f"{result['draft']} drafting (transformers' assisted generation, one prompt at a "
        "time); random weights on both, so the acceptance is that of two unrelated models."
    )
    return intro + "\n\n" + rollouts.markdown(result)


def write_report(report: dict, out: Path, budget: Budget) -> None:
    """The JSON and the Markdown as they stand (after every step: a cut-short run keeps them)."""
    report["elapsed_s"] = budget.elapsed()
    write_json(out / "gpu_check.json", report)
    write_text(out / "gpu_check.md", markdown(report))
