"""Benchmark: our engine vs the official scripts' approach, restated (benchmark.published).

Runs both in one process, alternating (ours, reference, ours, reference, ...), on the same model
and inputs, and prints a Markdown table with variants/s, bp/s, peak memory and the ratios.

CPU (always): the demo model — a 2-layer body with Carbon's full 155,776-entry vocabulary, so the
output layer weighs what Carbon's does. Times are medians of the interleaved runs. Peak memory is
measured once per approach in a fresh spawned process: its peak RSS (Linux VmHWM) above its RSS
with the model loaded, so memory one approach freed cannot hide another's.
GPU (when CUDA is available): random-weight bf16 models with the exact Carbon-500M and Carbon-3B
shapes; tokens/s, bp/s and the fraction of the bf16 matmul peak measured in the same run. Every
other GPU measurement (each recipe, the scan, the removed costs, bf16 against float32) is in
`make gpu-check` (benchmark.gpu).

Usage: python -m carbon_vep.benchmark.engine [--reps 2] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import polars as pl
import torch

from carbon_vep.benchmark import published
from carbon_vep.benchmark.harness import (
    PROJECT_ROOT,
    bf16_peak_tflops,
    device_peak_gb,
    median_interleaved,
    peak_rss_above_start_mb,
    timed,
    write_json,
)
from carbon_vep.config.gpus import CARBON_SHAPES
from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import ModelSettings, RecipeSettings, TileSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.markdown import table as markdown_table
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.scan.tiles import scan_region
from carbon_vep.scoring.shard import score_shard

BLOCK = {name: RecipeSettings(name, "dna_block") for name in ("centered", "nexttoken")}

FASTA = PROJECT_ROOT / "resources/demo/chr17.hg19.part.fa"
CHROM = "chr17"


@dataclass
class Workload:
    name: str
    n_variants: int
    bp: int
    approaches: dict[str, Callable[[], object]]


@dataclass
class Row:
    workload: str
    approach: str
    n_variants: int
    bp: int
    seconds: float
    peak_mb: float

    @property
    def variants_per_s(self) -> float:
        return self.n_variants / self.seconds

    @property
    def bp_per_s(self) -> float:
        return self.bp / self.seconds


def _child_peak(quick: bool, workload_index: int, approach: str, queue) -> None:
    with torch.inference_mode(), open_reference(FASTA) as ref:
        workload = build_workloads(ref, quick)[workload_index]
        queue.put(peak_rss_above_start_mb(workload.approaches[approach]))


def child_peak_mb(quick: bool, workload_index: int, approach: str) -> float:
    """Peak memory of one approach, measured alone in a fresh (spawned) process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child_peak, args=(quick, workload_index, approach, queue))
    process.start()
    value = queue.get()
    process.join()
    return value


# ---- workloads -----------------------------------------------------------------------------
def snvs(reference, start: int, n_bases: int) -> list[tuple[str, int, str, str]]:
    out = []
    for pos in range(start, start + n_bases):
        ref = reference.fetch(CHROM, pos - 1, pos)
        out += [(CHROM, pos, ref, alt) for alt in "ACGT" if alt != ref]
    return out


def shard(reference, variants, recipe: str, window_bp: int) -> pl.DataFrame:
    frame = pl.DataFrame(variants, schema=["ref_chrom", "pos", "ref", "alt"], orient="row")
    return RECIPES[recipe].add_windows(frame, reference.lengths, window_bp)


def build_workloads(ref, quick: bool) -> list[Workload]:
    """The same model and inputs for every approach (the demo model: Carbon's vocabulary)."""
    loaded = load_model(
        ModelSettings(
            str(build_demo_model(PROJECT_ROOT / "resources/demo_model")), trust_remote_code=True
        )
    )
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)
    model, tok, prefix = loaded.model, loaded.tokenizer, loaded.vocab.prefix_token
    window = ref.fetch(CHROM, 10_000, 18_190)  # one centered window: 1,366 tokens
    rows_h = engine.hidden_states([loaded.vocab.encode(window)])[0][0]
    dense = snvs(ref, 20_001, 4 if quick else 8)  # saturation mutagenesis: 3 alts per site
    dense_shard = shard(ref, dense, "centered", 8192)
    sparse = snvs(ref, 25_000, 40)[::20][: 3 if quick else 6]  # ClinVar-like: far apart
    sparse_shard = shard(ref, sparse, "nexttoken", 24_000)
    n_bases, context = (24 if quick else 48), 2_400
    positions = list(range(30_001, 30_001 + n_bases))
    kmer_ids = loaded.vocab.kmer_ids.tolist()
    return [
        Workload(
            "one 8,190 bp window: output layer only",
            1,
            len(window),
            {
                "ours: 4,096 DNA rows (FNS marginals)": lambda: engine.kmer_base_marginals(
                    engine.dna_log_probs(rows_h, "dna_block")
                ),
                "ours: chunked full-vocabulary normaliser": lambda: engine.full_logsumexp(rows_h),
                "reference: full logits + log-softmax": lambda: torch.log_softmax(
                    model.lm_head(rows_h).float(), dim=-1
                ),
            },
        ),
        Workload(
            "dense saturation, centered 8 kbp",
            len(dense),
            len(dense) * 8192,
            {
                "ours (published semantics: full_vocab)": lambda: score_shard(
                    dense_shard, ref, engine, RecipeSettings("centered")
                ),
                "reference (official vep_eval.py way)": lambda: published.centered_scores(
                    model, tok, prefix, ref, dense, 8192
                ),
                "ours, 6-mer block normalised (dna_block)": lambda: score_shard(
                    dense_shard, ref, engine, BLOCK["centered"]
                ),
            },
        ),
        Workload(
            "sparse ClinVar-like, right-end 24 kbp",
            len(sparse),
            len(sparse) * 24_000,
            {
                "ours (published semantics: acgt_strings)": lambda: score_shard(
                    sparse_shard, ref, engine, RecipeSettings("nexttoken")
                ),
                "reference (official clinvar_vep_eval.py way)": lambda: published.nexttoken_scores(
                    model, tok, prefix, ref, sparse, 24_000
                ),
                "ours, 6-mer block normalised (dna_block)": lambda: score_shard(
                    sparse_shard, ref, engine, BLOCK["nexttoken"]
                ),
            },
        ),
        Workload(
            f"scan of every SNV, {n_bases} bp, >= {context} bp context",
            3 * n_bases,
            n_bases,
            {
                "ours (scan: one pass per tile)": lambda: scan_region(
                    engine,
                    ref,
                    CHROM,
                    30_000,
                    30_000 + n_bases,
                    TileSettings(context + 600, context),
                ),
                "reference (one window per base)": lambda: published.per_base_marginals(
                    model, tok, prefix, kmer_ids, ref, CHROM, positions, context
                ),
            },
        ),
    ]


def cpu_rows(reps: int, quick: bool) -> list[Row]:
    rows = []
    with torch.inference_mode(), open_reference(FASTA) as ref:
        workloads = build_workloads(ref, quick)
        for index, workload in enumerate(workloads):
            seconds = median_interleaved(workload.approaches, reps, workload.name)
            for approach, secs in seconds.items():
                memory = child_peak_mb(quick, index, approach)
                rows.append(
                    Row(workload.name, approach, workload.n_variants, workload.bp, secs, memory)
                )
    return rows


# ---- GPU -------------------------------------------------------------------------------------


def model_rows(
    device: torch.device,
    shapes: dict[str, dict],
    n_windows: int = 32,
    tokens: int = 1366,
    peak_n: int = 8192,
) -> list[dict]:
    """Centered windows (1,366 tokens) through random bf16 models of the given shapes.

    FLOPs counted: 2 x (body parameters + output rows used) per token; attention's own
    FLOPs (~4% at 1,366 tokens for the 3B shape) are left out, so the fraction is a floor.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    from carbon_vep.model.tokens import DnaVocab

    peak = bf16_peak_tflops(device, peak_n, 20)
    results = []
    for name, shape in shapes.items():
        config = LlamaConfig(
            vocab_size=155_776, max_position_embeddings=32_768, tie_word_embeddings=True, **shape
        )
        model = LlamaForCausalLM(config).to(device, torch.bfloat16).eval()
        vocab = DnaVocab(
            k=6,
            prefix_id=151_669,
            prefix_token="<dna>",
            kmer_ids=torch.arange(151_672, 151_672 + 4096).numpy(),
            oov_id=151_671,
            pad_id=0,
            vocab_size=155_776,
        )
        engine = Engine(model, vocab, device, batch_size=8)
        ids = [torch.randint(151_672, 151_672 + 4096, (tokens,)).numpy() for _ in range(n_windows)]
        n_body = sum(p.numel() for n_, p in model.named_parameters() if "embed" not in n_)
        for normalization in ("full_vocab", "dna_block"):
            published.token_log_likelihoods(engine, ids[:8], normalization)  # warm-up
            run = partial(published.token_log_likelihoods, engine, ids, normalization)
            seconds = statistics.median(timed(run, device)[0] for _ in range(3))
            n_tokens = n_windows * tokens
            head_rows = 155_776 if normalization == "full_vocab" else 4096
            flops = n_tokens * 2 * (n_body + head_rows * shape["hidden_size"])
            allocated = device_peak_gb(device)
            results.append(
                {
                    "model": name,
                    "normalization": normalization,
                    "tokens_per_s": n_tokens / seconds,
                    "bp_per_s": 6 * n_tokens / seconds,
                    "windows_per_s": n_windows / seconds,
                    "fraction_of_bf16_peak": flops / seconds / 1e12 / peak,
                    "bf16_peak_tflops": peak,
                    "peak_allocated_gb": allocated,
                }
            )
        del model, engine
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def gpu_rows() -> list[dict]:
    # the sizes this benchmark has always compared (Carbon-8B would add a 16 GB model)
    return model_rows(
        torch.device("cuda"), {k: CARBON_SHAPES[k] for k in ("Carbon-3B", "Carbon-500M")}
    )


# ---- report ----------------------------------------------------------------------------------
def table(rows: list[Row]) -> str:
    """Each approach's row with its ratios against the workload's reference approach."""
    cells = []
    for row in rows:
        ref = next(r for r in rows if r.workload == row.workload and r.approach.startswith("ref"))
        speed = row.variants_per_s / ref.variants_per_s
        memory = ref.peak_mb / max(row.peak_mb, 1.0)
        ratios = ["—", "—"] if row is ref else [f"{speed:.2f}x", f"{memory:.1f}x less"]
        cells.append(
            [
                row.workload,
                row.approach,
                row.n_variants,
                f"{row.seconds:.2f}",
                f"{row.variants_per_s:.2f}",
                f"{row.bp_per_s:,.0f}",
                f"{row.peak_mb:,.0f}",
                *ratios,
            ]
        )
    header = [
        "workload",
        "approach",
        "variants",
        "s",
        "variants/s",
        "bp/s",
        "peak MB",
        "speed vs ref",
        "memory vs ref",
    ]
    return markdown_table(header, cells)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smaller workloads (smoke test)")
    parser.add_argument("--json", default=None, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads", file=sys.stderr)
    rows = cpu_rows(args.reps, args.quick)
    print(table(rows))
    payload: dict = {"cpu": [r.__dict__ | {"variants_per_s": r.variants_per_s} for r in rows]}
    if torch.cuda.is_available():
        payload["gpu"] = gpu_rows()
        for r in payload["gpu"]:
            print(json.dumps(r))
    else:
        print("\nNo CUDA device: GPU rows not measured.")
    write_json(args.json, payload)


if __name__ == "__main__":
    main()
