"""The official scripts' approach as a job of its own, beside the product's jobs on the same inputs:
`python -m carbon_vep.benchmark.reference_job --task centered|nexttoken|niah ...`.

It loads the checkpoint as the official scripts do (AutoTokenizer / AutoModelForCausalLM
`from_pretrained` with remote code, in the asked dtype, moved to the device, `eval()`), then,
timed from the load on, scores the task the official way (benchmark.published: vep_eval.py's
centered windows at batch 2, clinvar_vep_eval.py's right-end contexts at batch 4;
suite.niah_published: genome_niah_eval.py's generate and likelihood passes), writes its answers
(Parquet) and a record (JSON: load and scoring seconds, rows, the GPU's and the host's peaks), as
the product's jobs write theirs (model.job_record). What the comparison reads: the GPU check's
product step (benchmark/gpu/product.py) runs it on the product's own inputs, `make bench-niah`
(benchmark.niah) beside `carbon-vep score-niah`.

Past the native positions (niah), `--yarn-factor F --yarn-original-positions N
--yarn-max-positions M` override the rope configuration before the weights load, as
genome_niah_eval.py's `--with_yarn` does (`yarn_config`); absent, the checkpoint runs natively.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import polars as pl
import pysam
import torch

from carbon_vep.atomic import write_json, write_parquet
from carbon_vep.benchmark import published
from carbon_vep.genome.reference import open_reference
from carbon_vep.model.tokens import dna_vocab
from carbon_vep.rss import peak_rss_bytes
from carbon_vep.suite.niah_cells import read_cell
from carbon_vep.suite.niah_published import three_pass_row

TASKS = ("centered", "nexttoken", "niah")
_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def yarn_config(path: str, factor: float, original_positions: int, max_positions: int):
    """The checkpoint's config under the official script's YaRN override (genome_niah_eval.py
    `_load_hf` with `--with_yarn`, there with the constants factor 4, original 32,768 and
    max_position_embeddings 65,536 whatever the context): max_position_embeddings set, then
    one dict {rope_type and type "yarn", factor, original_max_position_embeddings, and the
    rope_theta of the config's rope parameters (else its rope_theta) when it has one} written
    as both `rope_parameters` and `rope_scaling`; the config goes to `from_pretrained`."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    config.max_position_embeddings = max_positions
    current = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    theta = dict(current or {}).get("rope_theta", getattr(config, "rope_theta", None))
    params = {
        "rope_type": "yarn",
        "type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": original_positions,
    }
    if theta is not None:
        params["rope_theta"] = theta
    config.rope_parameters = dict(params)
    with warnings.catch_warnings():  # transformers 5 calls rope_scaling deprecated
        warnings.simplefilter("ignore", FutureWarning)
        config.rope_scaling = dict(params)
    return config


def load(path: str, dtype: str, device: str, yarn: dict | None = None):
    """The checkpoint as the official scripts load it; `yarn`: yarn_config's arguments."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = published.with_pad_token(
        AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    )
    extra = {"config": yarn_config(path, **yarn)} if yarn else {}
    model = AutoModelForCausalLM.from_pretrained(
        path, trust_remote_code=True, dtype=_DTYPES[dtype], attn_implementation="sdpa", **extra
    )
    return model.to(device).eval(), tokenizer


def yarn_arguments(args) -> dict | None:
    """The YaRN override the flags ask for (None: native); the other two flags need the
    factor."""
    if not args.yarn_factor:
        if args.yarn_original_positions or args.yarn_max_positions:
            raise SystemExit("--yarn-original-positions / --yarn-max-positions need --yarn-factor")
        return None
    if not (args.yarn_original_positions and args.yarn_max_positions):
        raise SystemExit("--yarn-factor needs --yarn-original-positions and --yarn-max-positions")
    return {
        "factor": float(args.yarn_factor),
        "original_positions": args.yarn_original_positions,
        "max_positions": args.yarn_max_positions,
    }


def panel_snvs(panel: str) -> list[tuple[str, int, str, str]]:
    """Every single-base (REF, ALT) pair of a VCF, in file order."""
    with pysam.VariantFile(panel) as vcf:
        return [
            (rec.chrom, rec.pos, rec.ref, alt)
            for rec in vcf
            for alt in rec.alts or ()
            if len(rec.ref) == 1 and len(alt) == 1 and alt in "ACGT"
        ]


def score_panel(args, model, tokenizer) -> pl.DataFrame:
    variants = panel_snvs(args.panel)
    prefix = dna_vocab(tokenizer).prefix_token
    with open_reference(args.reference) as reference, torch.inference_mode():
        if args.task == "centered":
            scores = published.centered_scores(
                model, tokenizer, prefix, reference, variants, args.window_bp
            )
        else:
            scores = published.nexttoken_scores(
                model, tokenizer, prefix, reference, variants, args.window_bp
            )
    frame = pl.DataFrame(variants, schema=["chrom", "pos", "ref", "alt"], orient="row")
    return frame.with_columns(score=pl.Series(scores, dtype=pl.Float64))


def score_cell(args, model, tokenizer, phases: dict[str, float]) -> pl.DataFrame:
    """The cell's rows the official way; `phases` gains their generation's and likelihood
    passes' seconds."""
    vocab = dna_vocab(tokenizer)
    cell = read_cell(args.cell, vocab.k)  # the negative value cut from its sequence
    rows = []
    with torch.inference_mode():
        for row in cell.iter_rows(named=True):
            result = three_pass_row(
                model,
                tokenizer,
                vocab,
                row["prompt"],
                row["value"],
                row["negative_value"],
                row["value_len_bp"],
                phases,
            )
            rows.append(
                {
                    "uid": row["uid"],
                    "pred": result.pred,
                    "target_ll": result.target_ll,
                    "negative_ll": result.negative_ll,
                }
            )
    return pl.DataFrame(rows)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=TASKS, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", default="bfloat16", choices=list(_DTYPES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--reference", help="FASTA (centered, nexttoken)")
    parser.add_argument("--panel", help="VCF of the variants (centered, nexttoken)")
    parser.add_argument("--window-bp", type=int, default=8192, help="window or context, bp")
    parser.add_argument("--cell", help="a Genomic-NIAH cell (niah)")
    parser.add_argument("--out", required=True, help="the answers (Parquet)")
    parser.add_argument("--record", required=True, help="the job's record (JSON)")
    parser.add_argument("--yarn-factor", type=float, help="YaRN factor (absent: native)")
    parser.add_argument("--yarn-original-positions", type=int, help="YaRN's pretraining length")
    parser.add_argument("--yarn-max-positions", type=int, help="max_position_embeddings")
    args = parser.parse_args(argv)
    yarn = yarn_arguments(args)
    began = time.perf_counter()
    model, tokenizer = load(args.model, args.dtype, args.device, yarn)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    loaded = time.perf_counter()
    phases: dict[str, float] = {}
    if args.task == "niah":
        answers = score_cell(args, model, tokenizer, phases)
    else:
        answers = score_panel(args, model, tokenizer)
    if cuda:
        torch.cuda.synchronize()
    done = time.perf_counter()
    write_parquet(answers, args.out)
    record = {
        "task": args.task,
        "rows": answers.height,
        "load_s": round(loaded - began, 3),
        "score_s": round(done - loaded, 3),
        "host_peak_rss_bytes": peak_rss_bytes(),
        "device": args.device,
        "dtype": args.dtype,
        "yarn": yarn,
        "phases": {name: round(seconds, 3) for name, seconds in phases.items()},
    }
    if cuda:
        record["gpu_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        record["gpu_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    write_json(record, Path(args.record))
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main()
