"""The GPU check's Genomic-NIAH phase on our engine, in this process: a cell at 32k, 64k and 128k
tokens scored by `suite.niah.NiahScorer` (one prefill a row, in chunks of `prefill_chunk`,
generation and both value likelihoods off its KV cache), and one row of each context the way
the official `evaluation/genome_niah_eval.py` scores it (`suite.niah_published.three_pass_row`:
`generate`, then for each value the model body over prompt + value and the output layer on the
value's positions only). Per context: seconds a row and rows/s, peak allocated memory, each
approach's, and ours ÷ the official way's (time and peak memory, same process); the answers
compared on the rows both scored; an approach that runs out of memory is recorded as such with
the memory it had reached.

The model is the run's random-weight Carbon-3B (or the shape `--model` names) in bf16 with the
default rotary embedding: YaRN, which the published recipe turns on past 32k, changes the rotary
frequencies only, not the work.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import torch

from carbon_vep.benchmark.gpu.device import Budget
from carbon_vep.benchmark.gpu.workload import Model, haystack_fasta
from carbon_vep.benchmark.harness import device_peak_gb, reset_device_peak, timed
from carbon_vep.columns import Status
from carbon_vep.config.gpus import CARBON_SHAPES, niah_memory_bytes, niah_row_seconds
from carbon_vep.config.stages import NiahSettings
from carbon_vep.model.attention import LOWER_RIGHT_SDPA, kernel, register
from carbon_vep.model.engine import Engine
from carbon_vep.suite.niah import NiahScorer, score_rows
from carbon_vep.suite.niah_build import CellSpec, write_cell
from carbon_vep.suite.niah_cells import read_cell
from carbon_vep.suite.niah_published import three_pass_cell_row

CONTEXTS = (32_768, 65_536, 131_072)
ROWS = {32_768: 4, 65_536: 2, 131_072: 2}  # ours; the official way runs the first row
SMOKE_CONTEXTS = (512, 1024)
SMOKE_ROWS = 2
TASK = "neardup_d2"


DEFAULT_CHUNKS = (NiahSettings().prefill_chunk,)


def niah_phase(
    model: Model,
    work: Path,
    device: torch.device,
    smoke: bool,
    budget: Budget,
    chunks: tuple[int, ...] = DEFAULT_CHUNKS,
    contexts: tuple[int, ...] | None = None,
    rows_each: int | None = None,
) -> list[dict]:
    """Per context, ours (once per prefill chunk in `chunks`, 0 = the whole prompt in one
    pass) and the official script's three passes side by side, with ours ÷ theirs (module
    docstring); `contexts` and `rows_each` replace the defaults."""
    contexts = contexts or (SMOKE_CONTEXTS if smoke else CONTEXTS)
    shape = CARBON_SHAPES[model.name]
    fasta = haystack_fasta(work, max(contexts) * 8)
    register()
    scorer = NiahScorer(
        Engine(model.loaded.model, model.loaded.vocab, device, batch_size=1), model.loaded.tokenizer
    )
    results = []
    for ctx in contexts:
        rows = rows_each or (SMOKE_ROWS if smoke else ROWS.get(ctx, 1))
        per_row = 0.0 if smoke else niah_row_seconds(shape, ctx, "H100")
        if not budget.allows(f"Genomic-NIAH at {ctx:,} tokens", 10 + 2 * (rows + 3) * per_row):
            break
        cell_path = work / f"niah_{ctx}.parquet"
        write_cell(CellSpec(TASK, ctx, rows, seed=3), fasta, cell_path)
        cell = read_cell(cell_path)
        for i, (chunk, attention) in enumerate(_variants(chunks, ctx)):
            if i and not budget.allows(
                f"Genomic-NIAH at {ctx:,} tokens, chunk {chunk}, {attention}",
                10 + 2 * rows * per_row,
            ):
                break
            row = {
                "model": model.name,
                "task": TASK,
                "context_tokens": ctx,
                "rows": rows,
                "prefill_chunk": chunk,
                "attention": attention,
                "kernel": _kernel(model.shape, chunk, ctx, attention, device),
                "arithmetic": _arithmetic(shape, ctx, chunk),
            }
            scorer.prefill_chunk = chunk
            model.loaded.model.set_attn_implementation(attention)
            row["ours"], scored = _ours(scorer, cell, device)
            if i == 0:
                first = scored
            elif scored is not None and first is not None:
                row["agreement_with_first"] = _same_answers(first, scored)
            if i == 0 and budget.allows(
                f"Genomic-NIAH official three passes at {ctx:,} tokens", 10 + 4 * per_row
            ):
                row["published"], answer = _published(model, cell.row(0, named=True), device)
                if answer is not None and scored is not None:
                    row["agreement"] = _agreement(scored.row(0, named=True), answer)
                if ratio := _ours_over_published(row["ours"], row["published"]):
                    row["ours_over_published"] = ratio
            results.append(row)
            _print(row)
    model.loaded.model.set_attn_implementation("sdpa")
    return results


def _same_answers(first, scored) -> dict:
    """How a variant's answers compare with the context's first variant's, row by row."""
    return {
        "same_pred_rows": int((first["pred"] == scored["pred"]).sum()),
        "max_ll_difference": max(
            float((first[c] - scored[c]).abs().max()) for c in ("target_ll", "negative_ll")
        ),
    }


def _variants(chunks: tuple[int, ...], ctx: int) -> list[tuple[int, str]]:
    """(prefill chunk, attention implementation) pairs to run: each chunk with the jobs'
    attention (model.attention), and first the first real chunk (shorter than the prompt) with
    transformers' own sdpa and its materialised mask: the change's before and after."""
    ours = [(chunk, LOWER_RIGHT_SDPA) for chunk in chunks]
    before = [(chunk, "sdpa") for chunk in chunks if 0 < chunk < ctx][:1]
    return before + ours


def _kernel(shape: dict, chunk: int, ctx: int, attention: str, device: torch.device) -> str:
    """The attention kernel a later chunk reaches (model.attention.kernel, on tensors of this
    shape); the whole prompt runs SDPA's causal kernel."""
    if not 0 < chunk < ctx:
        return "causal (whole prompt)"
    if attention != LOWER_RIGHT_SDPA:
        return "boolean mask"
    dim = shape["head_dim"]
    query = torch.zeros(1, shape["num_attention_heads"], chunk, dim, device=device)
    key = torch.zeros(1, shape["num_key_value_heads"], 2 * chunk, dim, device=device)
    return kernel(query.bfloat16(), key.bfloat16(), key.bfloat16())


def _ours(scorer: NiahScorer, cell, device: torch.device) -> tuple[dict, object]:
    scorer.paired = True
    seconds, scored, measured = _attempt(lambda: score_rows(cell, scorer, 1), device)
    if scored is None:
        return measured, None
    failed = int((scored["status"] == Status.FAILED.value).sum())
    return measured | {
        "seconds": seconds,
        "seconds_per_row": seconds / cell.height,
        "rows_per_s": cell.height / seconds,
        "paired": scorer.paired,
        "failed_rows": failed,
    }, scored


def _published(model: Model, row: dict, device: torch.device) -> tuple[dict, object]:
    seconds, answer, measured = _attempt(lambda: three_pass_cell_row(model.loaded, row), device)
    if answer is None:
        return measured, None
    return measured | {"seconds_per_row": seconds}, answer


def _attempt(run, device: torch.device) -> tuple[float, object, dict]:
    """`run` timed, with the peak memory it reached: (seconds, result, {peak}), or, when it
    runs out of memory, (nan, None, {error, peak, message}) with the memory released."""
    reset_device_peak(device)
    try:
        seconds, result = timed(run, device)
    except torch.OutOfMemoryError as error:
        failure = {
            "error": "out of memory",
            "peak_allocated_gb": device_peak_gb(device),
            "message": str(error).splitlines()[0][:200],
        }
    else:
        return seconds, result, {"peak_allocated_gb": device_peak_gb(device)}
    gc.collect()  # out of the except block: its traceback no longer holds the tensors
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return float("nan"), None, failure


def _ours_over_published(ours: dict, published: dict) -> dict | None:
    """Ours ÷ the official way, measured in this process: seconds a row and peak allocated
    memory (None unless both ran)."""
    if "seconds_per_row" not in ours or "seconds_per_row" not in published:
        return None
    ratio = {"seconds_per_row": ours["seconds_per_row"] / published["seconds_per_row"]}
    mine, theirs = ours.get("peak_allocated_gb"), published.get("peak_allocated_gb")
    if mine is not None and theirs:
        ratio["peak_allocated_gb"] = mine / theirs
    return ratio


def _agreement(ours: dict, answer) -> dict:
    return {
        "same_pred": ours["pred"] == answer.pred,
        "target_ll_difference": abs(ours["target_ll"] - answer.target_ll),
        "negative_ll_difference": abs(ours["negative_ll"] - answer.negative_ll),
    }


def _arithmetic(shape: dict, ctx: int, chunk: int) -> dict:
    return {
        "h100_seconds_per_row": niah_row_seconds(shape, ctx, "H100"),
        "paired_gb": niah_memory_bytes(shape, ctx, chunk)["total"] / 1e9,
    }


def _print(row: dict) -> None:
    ours, published = row["ours"], row.get("published", {})
    theirs = published.get("error") or (
        f"{published['seconds_per_row']:.2f} s a row" if published else "not run"
    )
    mine = ours.get("error") or f"{ours['seconds_per_row']:.2f} s a row"
    ratio = row.get("ours_over_published")
    share = ""
    if ratio:
        memory = ratio.get("peak_allocated_gb")
        share = f"; ours ÷ official: {ratio['seconds_per_row']:.2f} of the time" + (
            f", {memory:.2f} of the peak memory" if memory is not None else ""
        )
    print(
        f"[gpu-check] Genomic-NIAH {row['context_tokens']:,} tokens, prefill chunk "
        f"{row['prefill_chunk']} ({row['attention']}, {row['kernel']}): ours {mine}, "
        f"official script's three passes {theirs}{share}",
        file=sys.stderr,
    )
