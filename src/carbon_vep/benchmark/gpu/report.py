"""Phase 5 of the GPU check: the environment, the JSON and the Markdown section for
docs/benchmarks.md, rewritten after every step (a run cut short keeps what it measured)."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path
from typing import Any

import torch

from carbon_vep.benchmark import generate
from carbon_vep.benchmark.gpu import product
from carbon_vep.benchmark.gpu.device import Budget
from carbon_vep.benchmark.harness import (
    HG38_BASES,
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
    """The run as a section for docs/benchmarks.md: the product's own jobs, the paths, then
    each phase that ran."""
    parts = [product.markdown_part(report.get("product"))]
    parts += [_paths_part(report), _scan_part(report), _ablations_part(report)]
    parts += [_precision_part(report), _niah_part(report), _known_answer_part(report)]
    parts.append(_generation_part(report))
    parts.append(_rollouts_part(report))
    parts.append(_host_memory_part(report))
    if report["profiles"]:
        names = ", ".join(f"`{p}`" for p in report["profiles"])
        parts.append(f"Profiler top-10 tables (by device time): {names}.")
    if report["skipped"]:
        parts.append("Skipped: " + "; ".join(report["skipped"]) + ".")
    env = report["environment"]
    return markdown_section(f"GPU check: {env['device']}, {env['date']}", *parts, level=2)


def _paths_part(report: dict) -> str:
    env = report["environment"]
    intro = (
        f"`make gpu-check` (`python -m carbon_vep.benchmark.gpu`"
        f"{' --smoke' if env['smoke'] else ''}), one process, {report['elapsed_s']:.0f} s. "
        f"torch {env['torch']}, CUDA {env['cuda'] or 'none'}, transformers "
        f"{env['transformers']}. Random-weight models with Carbon's exact shapes (toy shapes "
        f"under --smoke), bf16, on a synthetic genome. Measured bf16 matmul peak: "
        f"**{env['bf16_peak_tflops']:,.1f} TFLOP/s** ({env['peak_matmul_n']:,}³ matmuls, same "
        "process). Times are medians of the timed runs after a warm-up run, the device drained "
        'before each clock read. "% of peak" counts the matmul FLOPs a path must do (body, '
        "attention, the output-layer rows it uses) against the measured peak."
    )
    header = [
        "model",
        "path",
        "items",
        "tokens",
        "s",
        "tokens/s",
        "bp/s",
        "items/s",
        "% of peak",
        "peak alloc GB",
        "batch_tokens",
    ]
    rows = [_path_row(r) for r in report["paths"]]
    return intro + "\n\n" + markdown_table(header, rows) if rows else intro


def _path_row(r: dict) -> list[str]:
    return [
        r["model"],
        r["path"],
        f"{r['items']:,} {r['unit']}",
        f"{r['tokens']:,}",
        f"{r['seconds']:.3f}",
        f"{r['tokens_per_s']:,.0f}",
        f"{r['bp_per_s']:,.0f}",
        f"{r['items_per_s']:,.1f}",
        f"{r['fraction_of_peak']:.1%}",
        "—" if r["peak_allocated_gb"] is None else f"{r['peak_allocated_gb']:.1f}",
        f"{r['batch_tokens']:,}",
    ]


def _scan_part(report: dict) -> str:
    scans = [r for r in report["paths"] if "scan_stats" in r]
    if not scans:
        return ""
    intro = (
        "Scan (per chunk job): share of wall time outside the model's forward passes, and the "
        "device's idle share (wall time minus the device's own busy time, CUDA events) while "
        "the host builds and writes rows on its thread. hg38 GPU-hours: its "
        f"{HG38_BASES:.1e} ACGT bases (3 SNVs each) at this rate on this one GPU."
    )
    header = [
        "model",
        "tiles",
        "SNVs/s",
        "scored bases/s",
        "hg38 GPU-hours",
        "outside forward",
        "device idle",
        "device µs/base",
        "rows built + written µs/base",
        "waited for the writer s",
    ]
    rows = [
        [
            r["model"],
            r["scan_tiles"],
            f"{r['items_per_s']:,.0f}",
            f"{r['scored_bases_per_s']:,.0f}",
            f"{HG38_BASES / r['scored_bases_per_s'] / 3600:.2f}",
            f"{r['outside_forward_share']:.1%}",
            f"{r['device_idle_share']:.1%}",
            f"{r['device_us_per_base']:.2f}",
            f"{r['write_us_per_base']:.2f}",
            f"{r['writer_wait_s']:.2f}",
        ]
        for r in scans
    ]
    return intro + "\n\n" + markdown_table(header, rows)


def _ablations_part(report: dict) -> str:
    if not report["ablations"]:
        return ""
    intro = (
        "The GPU costs removed, before and after on the same inputs (before = the loop as it "
        "was, benchmark/published.py):"
    )
    fixed = ("model", "change", "items", "before_s", "after_s", "speedup")
    rows = [
        [
            r["model"],
            r["change"],
            f"{r['before_s']:.3f}",
            f"{r['after_s']:.3f}",
            f"{r['speedup']:.2f}x",
            "; ".join(f"{k}: {_note(k, v)}" for k, v in r.items() if k not in fixed),
        ]
        for r in report["ablations"]
    ]
    header = ["model", "change", "before s", "after s", "speed-up", "notes"]
    return intro + "\n\n" + markdown_table(header, rows)


def _precision_part(report: dict) -> str:
    if not report["precision"]:
        return ""
    intro = (
        "bf16 against float32, same weights, same inputs (float32 is the reference; random "
        "weights: the scores are small, so this shows rounding, not accuracy):"
    )
    header = [
        "model",
        "case",
        "precision",
        "n",
        "Spearman of scores",
        "max abs Δ LL",
        "median abs Δ LL",
        "score sd (fp32)",
    ]
    rows = [
        [
            r["model"],
            r["case"],
            r["precision"],
            r["n"],
            f"{r['spearman_score']:.4f}",
            f"{r['max_abs_ll_difference']:.2e}",
            f"{r['median_abs_ll_difference']:.2e}",
            f"{r['score_sd_float32']:.2e}",
        ]
        for r in report["precision"]
    ]
    return intro + "\n\n" + markdown_table(header, rows)


def _niah_part(report: dict) -> str:
    if not report["niah"]:
        return ""
    names = ", ".join(sorted({r["model"] for r in report["niah"]}))
    intro = (
        "Genomic-NIAH on our engine, in the check's process (benchmark/gpu/niah.py): the "
        f"{names}-shaped model, a neardup_d2 cell at each context, one row a batch, the prompt "
        "prefilled in chunks of `prefill chunk` tokens (the default 8,192) or whole; the time "
        "of a context's first run includes its first-use costs (no untimed row); the official "
        "script's three passes (evaluation/genome_niah_eval.py: `generate`, then for each of "
        "the two values the model body over prompt + value and the output layer on the "
        "value's positions only) on the cell's first row, in the same process; ours ÷ official "
        "= our seconds a row (peak memory) over theirs. "
        "Arithmetic: config/gpus.py at 50% of an H100's bf16 peak."
    )
    header = [
        "context",
        "rows",
        "prefill chunk",
        "attention (kernel of a later chunk)",
        "ours s/row",
        "ours rows/s",
        "ours peak GB",
        "official s/row",
        "official peak GB",
        "ours ÷ official s/row",
        "ours ÷ official peak GB",
        "same pred",
        "max abs Δ LL",
        "same preds as the first row of this context",
        "arithmetic s/row",
        "arithmetic GB",
    ]
    return intro + "\n\n" + markdown_table(header, [_niah_row(r) for r in report["niah"]])


def _niah_row(r: dict) -> list[str]:
    ours, theirs = r["ours"], r.get("published", {})
    agreement, plan = r.get("agreement"), r["arithmetic"]
    ratio = r.get("ours_over_published") or _ours_over(ours, theirs)

    def seconds(side: dict) -> str:
        return side.get("error") or (f"{side['seconds_per_row']:.2f}" if side else "not run")

    def gigabytes(side: dict) -> str:
        peak = side.get("peak_allocated_gb")
        return "—" if peak is None else f"{peak:.1f}"

    chunk = r["prefill_chunk"]
    return [
        f"{r['context_tokens']:,}",
        str(r["rows"]),
        f"{chunk:,}" if chunk else "whole prompt",
        f"{r.get('attention', 'sdpa')} ({r.get('kernel', '—')})",
        seconds(ours),
        f"{ours['rows_per_s']:.3g}" if "rows_per_s" in ours else "—",
        gigabytes(ours),
        seconds(theirs),
        gigabytes(theirs),
        f"{ratio['seconds_per_row']:.2f}" if "seconds_per_row" in ratio else "—",
        f"{ratio['peak_allocated_gb']:.2f}" if "peak_allocated_gb" in ratio else "—",
        ("yes" if agreement["same_pred"] else "no") if agreement else "—",
        f"{max(agreement['target_ll_difference'], agreement['negative_ll_difference']):.1e}"
        if agreement
        else "—",
        _same_as_first(r),
        f"{plan['h100_seconds_per_row']:.2f}",
        f"{plan['paired_gb']:.1f}",
    ]


def _ours_over(ours: dict, theirs: dict) -> dict:
    """Ours ÷ the official way, for a row recorded without the ratio (an earlier run's JSON)."""
    out = {}
    for key in ("seconds_per_row", "peak_allocated_gb"):
        both = "seconds_per_row" in ours and "seconds_per_row" in theirs
        if both and ours.get(key) is not None and theirs.get(key):
            out[key] = ours[key] / theirs[key]
    return out


def _same_as_first(r: dict) -> str:
    same = r.get("agreement_with_first")
    if same is None:
        return "—"
    return f"{same['same_pred_rows']}/{r['rows']}, Δ LL ≤ {same['max_ll_difference']:.1e}"


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
        "Known answer (benchmark/known_answer.py: a tiny Llama trained on a genome with a "
        "planted motif; 30 motif-breaking vs 30 background SNVs):"
    )
    rows = [[r["recipe"], r["precision"], f"{r['auroc']:.3f}"] for r in report["known_answer"]]
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
        "Long greedy rollouts on our engine (benchmark/gpu/rollouts.py, benchmark/generate.py): "
        f"{result['target']} alone, batched, and with {result['draft']} drafting (transformers' "
        "assisted generation, one prompt at a time); random weights on both, so the acceptance "
        "is that of two unrelated models."
    )
    return intro + "\n\n" + generate.markdown(result)


def _note(key: str, value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1%}" if "idle" in key else f"{value:.3g}"
    return str(value)


def write_report(report: dict, out: Path, budget: Budget) -> None:
    """The JSON and the Markdown as they stand (after every step: a cut-short run keeps them)."""
    report["elapsed_s"] = budget.elapsed()
    write_json(out / "gpu_check.json", report)
    write_text(out / "gpu_check.md", markdown(report))
