"""The GPU check's steps that run the product again with one thing changed, beside the product
step's own run: the same checkpoints, inputs and Snakefile, a config derived from the product's,
each job through `carbon-vep` as before, read from the jobs' records and the merged outputs.

- `precision`: the models in float32. The bf16 product's answers against these (the panel's
  log-likelihoods and scores, the perturbation pairs' scores, the scan's per-base log
  marginals): how far bf16 moves an answer, on the jobs users run.
- `batch_budgets`: the engines' token budget at ProductSizes.rerun_batch_tokens (8,192) instead
  of the profile's 131,072: windows batch, and scan tiles group, differently; the largest
  difference that makes to an answer in bf16 (batching may round differently, never move a
  result).
- `compiled_layers`: the recipes, the scan and Genomic-NIAH at the native context with the
  decoder layers' steps around attention compiled (ModelSettings.compile_layers, a `--config`
  override): per rule, the rate after the load without the jobs' compile phase against the
  product's, and the largest difference the compiled kernels make to an answer in bf16.
- `profiles`: the centered recipe and the scan under torch's profiler (model.job_record's
  PROFILE_ENV), the ten costliest operators of each job, the device's timeline and the whole
  trace (model.job_profile).
- `carbon_500m`: the recipes and the scan with Carbon-500M's shape as the scored model.

Every rerun scores each dataset as one shard, as the product does at its default shard size on
the device (the CPU smoke's product cuts two shards a dataset, so there its answers are also
those of another shard size).
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import yaml

from carbon_vep.benchmark.gpu.product import (
    MODEL_RULES,
    figure,
    job_records,
    rule_table,
    rules_markdown,
    run_workflow,
)
from carbon_vep.benchmark.gpu.product_setup import DRAFT, TARGET, ProductSizes
from carbon_vep.benchmark.harness import VARIANT_COLUMNS
from carbon_vep.config.niah_grid import niah_config_name
from carbon_vep.markdown import table as markdown_table
from carbon_vep.model.compiled_layers import COMPILE_PHASE
from carbon_vep.model.job import PROBE_PHASE
from carbon_vep.model.job_record import PROFILE_ENV, RECORDS_ENV
from carbon_vep.workflow.paths import RunPaths

RERUNS = {
    "precision": "the product's jobs again in float32: how far bf16 moves each answer",
    "batch_budgets": "the product's recipes and scan at another token budget: bf16 differences",
    "compiled_layers": "the product's recipes, scan and native Genomic-NIAH with the decoder "
    "layers compiled: rates without the compile against the product's (a recipe and a cell "
    "each), bf16 differences",
    "profiles": "torch-profiler tables of the product's centered and scan jobs",
    "carbon_500m": "the product's recipes and scan with Carbon-500M's shape",
}
# the largest share of a part's tokens in passes that compiled at which its rate without the
# compile is still compared with the product's (compiled_rates)
COMPARABLE_COMPILE_SHARE = 0.5
SCORE_COLUMNS = ("score", "ref_ll", "alt_ll")
PAIR_COLUMNS = ("margin", "score_original", "score_perturbed")
NIAH_COLUMNS = ("ll_margin", "target_ll", "negative_ll")


def rerun(
    step: str,
    product_folder: Path,
    env: dict[str, str],
    timeout_s: float,
    shapes: dict,
    peak: float,
    sizes: ProductSizes,
) -> dict[str, Any]:
    """Run the product's workflow again with `step`'s change; its rule table, and its answers
    against the product's where the step compares them."""
    base = yaml.safe_load((product_folder / "config.yaml").read_text())
    folder = product_folder.parent / f"product_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    config = _changed(step, base, folder)
    overrides = {
        "batch_budgets": [f"batch_tokens={sizes.rerun_batch_tokens}"],
        "compiled_layers": ["compile_layers=True"],
    }.get(step, [])
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = dict(env, **{RECORDS_ENV: str(folder / "jobs")})
    if step == "profiles":
        env[PROFILE_ENV] = str(folder / "profiles")
    # compiled_layers: the NIAH cell first, the one part no earlier run measured compiled (run
    # 12, 2026-11-29: the recipes and the scan took the step's 120 s and its job was cut)
    first = _niah_targets(config) if step == "compiled_layers" else []
    done = run_workflow(path, folder, env, timeout_s, overrides, _targets(config), first)
    records = job_records(folder / "jobs")
    shape = shapes["Carbon-500M" if step == "carbon_500m" else "Carbon-3B"]
    result: dict[str, Any] = {
        "step": step,
        "change": RERUNS[step],
        "snakemake": done,
        "rules": rule_table(records, shape, peak),
    }
    # a rerun that failed or met its limit still reports what its finished jobs wrote (outputs
    # are written whole or not at all, and only outputs both runs have are compared)
    result["failed"] = done["returncode"] != 0 or any(r["failed"] for r in result["rules"])
    if step in ("precision", "batch_budgets", "compiled_layers"):
        result["differences"] = differences(Path(base["outdir"]), Path(config["outdir"]))
    if step == "compiled_layers":
        product_jobs = job_records(product_folder / "jobs")
        result["rates"] = compiled_rates(product_jobs, records, list(config["datasets"]))
    if step == "profiles":
        result["profiles"] = {
            p.stem: p.read_text() for p in sorted((folder / "profiles").glob("*.txt"))
        }
        result["traces"] = [str(p) for p in sorted((folder / "profiles").glob("*.trace.json.gz"))]
    return result


def _changed(step: str, base: dict, folder: Path) -> dict:
    """The product's config with the step's change (batch_budgets': a `--config` override)."""
    config = copy.deepcopy(base)
    config["outdir"] = str(folder / "results")
    config["shard_size"] = 10**6  # one shard a dataset
    kept = {"precision": "tasks", "compiled_layers": "niah"}.get(step)  # a section it compares
    for section in ("niah", "tasks"):
        if section != kept:
            config.pop(section, None)
    if step == "precision":
        for model in config["models"].values():
            model["dtype"] = "float32"
        config["tasks"].pop("recovery", None)  # greedy text: compared as exact, not as a margin
        return config
    if step == "batch_budgets":
        return config
    if step == "compiled_layers":  # the prefill of the native context (§4's 3x at 32k)
        config["niah"].pop("yarn", None)
        return config
    if step == "profiles":
        config["datasets"].pop("nexttoken")
        return config
    # carbon_500m: the draft's checkpoint scored as the model
    config["models"] = {DRAFT: config["models"][DRAFT]}
    for entry in (*config["datasets"].values(), *config["scans"].values()):
        entry["models"] = [DRAFT]
    return config


def _targets(config: dict) -> list[str]:
    """The outputs a rerun compares or counts (the merged scores, the pairs' predictions, the
    scan's positions), not the whole run: no results table, report or tracks."""
    paths = RunPaths(config["outdir"])
    targets = []
    for dataset, entry in config["datasets"].items():
        targets += [paths.scores.format(dataset=dataset, model=m) for m in entry["models"]]
    for task, entry in config.get("tasks", {}).items():
        targets += [paths.task_predictions.format(task=task, model=m) for m in entry["models"]]
    for scan, entry in config["scans"].items():
        for model in entry["models"]:
            scan_dir = paths.scan_dir.format(scan=scan, model=model)
            targets += [f"{scan_dir}/positions/{r.split(':')[0]}.parquet" for r in entry["regions"]]
    return targets + _niah_targets(config)


def _niah_targets(config: dict) -> list[str]:
    """The predictions of every Genomic-NIAH cell of `config`."""
    paths, targets = RunPaths(config["outdir"]), []
    for niah, entry in config.get("niah", {}).items():
        for task, context, model in itertools.product(
            entry["tasks"], entry["contexts"], entry["models"]
        ):
            cell = niah_config_name(task, context)
            targets.append(paths.niah_predictions.format(niah=niah, cell=cell, model=model))
    return targets


def compiled_rates(
    product: list[dict], compiled: list[dict], datasets: list[str]
) -> list[dict[str, Any]]:
    """Per part of the work both runs did (a rule; score_shard per dataset of `datasets`,
    score_niah per cell): tokens/s after the load in the product, and in the compiled run with
    and without its passes that compiled (the jobs' `compile_layers` phase: their seconds and
    their tokens), and the ratio of the last to the first; jobs that failed left out. The
    ratio's two rates leave out each job's start-up probe too (its `probe` phase): a job's
    one-off, which weighed twice on the product's side where it ran two jobs a dataset and the
    rerun one (runs 8-12, and the CPU smoke; run 12: 0.39-0.44 s a job).

    The rate without the compile keeps all of a job's work outside its passes (inputs,
    windows, outputs) over only the tokens that did not compile, so it is biased low by the
    compile passes' share of the tokens; past COMPARABLE_COMPILE_SHARE no ratio is given (run
    12's right-end jobs compiled on 67% of their tokens: at equal speed a pass and ~0.5 s of such
    work a job would read ~0.7x). Where the jobs timed their passes (`pass_s`, model.pass_clock)
    the passes' own rates are compared as well (`_pass_rates`), which carry none of that work."""
    succeeded = ([r for r in jobs if r.get("succeeded", True)] for jobs in (compiled, product))
    ours, base = (_by_part(jobs, datasets) for jobs in succeeded)
    rows = []
    for part in (p for p in ours if p in base):
        tokens, base_tokens = (sum(r["tokens"] for r in jobs[part]) for jobs in (ours, base))
        after, base_after = (sum(r["after_load_s"] for r in jobs[part]) for jobs in (ours, base))
        compile_s = sum(r.get("phases", {}).get(COMPILE_PHASE, 0.0) for r in ours[part])
        compile_tokens = sum(r.get("phase_tokens", {}).get(COMPILE_PHASE, 0) for r in ours[part])
        probe, base_probe = (
            sum(r.get("phases", {}).get(PROBE_PHASE, 0.0) for r in jobs[part])
            for jobs in (ours, base)
        )
        row = {"rule": part, "compile_s": round(compile_s, 2), "compile_tokens": compile_tokens}
        if tokens:
            row["compile_token_share"] = round(compile_tokens / tokens, 3)
        if base_after > base_probe and after > compile_s + probe and tokens > compile_tokens:
            row["product_tokens_per_s"] = round(base_tokens / (base_after - base_probe), 1)
            row["tokens_per_s"] = round(tokens / after, 1)
            row["tokens_per_s_without_compile"] = round(
                (tokens - compile_tokens) / (after - compile_s - probe), 1
            )
            if row["compile_token_share"] <= COMPARABLE_COMPILE_SHARE:
                row["ratio_without_compile"] = round(
                    row["tokens_per_s_without_compile"] / row["product_tokens_per_s"], 3
                )
        rows.append(row | _pass_rates(ours[part], base[part], compile_s, compile_tokens))
    return rows


def _pass_rates(
    ours: list[dict], base: list[dict], compile_s: float, compile_tokens: int
) -> dict[str, float]:
    """Tokens/s within the model's passes (the jobs' `pass_s` and `pass_tokens`, from the end
    of their probes): the product's, and the compiled run's without its passes that compiled
    (their `compile_layers` seconds and tokens: those passes' spans), and their ratio; nothing
    where a job did not time its passes (records from before 2026-11-30) or none is left."""
    if any("pass_s" not in r for r in (*ours, *base)):
        return {}
    seconds, base_seconds = (sum(r["pass_s"] for r in jobs) for jobs in (ours, base))
    tokens, base_tokens = (sum(r["pass_tokens"] for r in jobs) for jobs in (ours, base))
    if base_seconds <= 0 or seconds <= compile_s or tokens <= compile_tokens:
        return {}
    product = base_tokens / base_seconds
    compiled = (tokens - compile_tokens) / (seconds - compile_s)
    return {
        "product_pass_tokens_per_s": round(product, 1),
        "pass_tokens_per_s_without_compile": round(compiled, 1),
        "pass_ratio": round(compiled / product, 3),
    }


def _by_part(jobs: list[dict], datasets: list[str]) -> dict[str, list[dict]]:
    """Model jobs by the part of the work they did, in MODEL_RULES' order: the rule, a panel
    job's dataset (its output under `/<dataset>/`; those of other datasets left out) and a
    Genomic-NIAH job's entry and cell (`suite/niah/<entry>/<cell>/`)."""
    parts: dict[str, list[dict]] = {}
    for command, rule in MODEL_RULES.items():
        for record in (r for r in jobs if r["command"] == command):
            out = Path(record.get("out") or "")
            if command == "score-shard":
                dataset = next((d for d in datasets if d in out.parts), None)
                if dataset is None:
                    continue
                rule_part = f"{rule} {dataset}"
            elif command == "score-niah" and "niah" in out.parts:
                at = out.parts.index("niah")
                rule_part = f"{rule} {'/'.join(out.parts[at + 1 : at + 3])}"
            else:
                rule_part = rule
            parts.setdefault(rule_part, []).append(record)
    return parts


# ---- answers against the product's ----------------------------------------------------------
def differences(product_out: Path, rerun_out: Path) -> list[dict[str, Any]]:
    """Per output the two runs share: rows compared, the largest and the median absolute
    difference of its values, and the Spearman of its scores where it has them."""
    paths = first, second = RunPaths(str(product_out)), RunPaths(str(rerun_out))
    rows = []
    for dataset in ("centered", "nexttoken"):
        a, b = (Path(p.scores.format(dataset=dataset, model=TARGET)) for p in paths)
        if a.exists() and b.exists():
            rows.append(_compare(dataset, _scored(a), _scored(b), VARIANT_COLUMNS, SCORE_COLUMNS))
    a, b = (Path(p.task_predictions.format(task="perturbation", model=TARGET)) for p in paths)
    if a.exists() and b.exists():
        rows.append(_compare("perturbation", _scored(a), _scored(b), ["row_id"], PAIR_COLUMNS))
    for a in sorted(Path(first.scan_dir.format(scan="scan", model=TARGET)).glob("positions/*")):
        b = Path(second.scan_dir.format(scan="scan", model=TARGET)) / "positions" / a.name
        if b.exists():
            frames = [pl.read_parquet(p) for p in (a, b)]
            marginals = tuple(c for c in frames[0].columns if c.startswith("log_"))
            rows.append(_compare(f"scan {a.stem}", *frames, ["chrom", "pos"], marginals))
    niah = Path(first.outdir) / "suite/niah"
    for a in sorted(niah.glob(f"*/*/{TARGET}/predictions.parquet")):
        b = Path(second.outdir) / "suite/niah" / a.relative_to(niah)
        if b.exists():
            cell = str(a.relative_to(niah).parent.parent)
            rows.append(_compare(f"niah {cell}", *map(_scored, (a, b)), ["uid"], NIAH_COLUMNS))
    return rows


def _scored(path: Path) -> pl.DataFrame:
    return pl.read_parquet(path).filter(pl.col("status") == "scored")


def _compare(name: str, a: pl.DataFrame, b: pl.DataFrame, keys, columns) -> dict[str, Any]:
    both = a.select(*keys, *columns).join(b.select(*keys, *columns), on=keys, suffix="_rerun")
    diff = np.concatenate(
        [
            (both[c].cast(pl.Float64) - both[f"{c}_rerun"].cast(pl.Float64)).abs().to_numpy()
            for c in columns
        ]
    )
    row = {
        "output": name,
        "rows": both.height,
        "unmatched": max(a.height, b.height) - both.height,
        "values": ", ".join(columns),
        "max_abs_difference": float(np.nanmax(diff)) if diff.size else 0.0,
        "median_abs_difference": float(np.nanmedian(diff)) if diff.size else 0.0,
    }
    score = columns[0]
    if score in ("score", "margin") and both.height > 1:
        rho = both.select(pl.corr(score, f"{score}_rerun", method="spearman")).item()
        row["spearman"] = None if rho is None else float(rho)
        row["score_sd"] = float(both[f"{score}_rerun"].std() or 0.0)
    return row


# ---- the report's section --------------------------------------------------------------------
def markdown_part(result: dict[str, Any]) -> str:
    done = result["snakemake"]
    verdict = "**failed**" if result["failed"] else "every job succeeded"
    parts = [
        f"Rerun `{result['step']}`: {result['change']} ({verdict}, exit {done['returncode']}, "
        f"{done['wall_s']:.0f} s).",
        rules_markdown(result["rules"]),
    ]
    if result.get("differences"):
        against = "float32 (the reference)" if result["step"] == "precision" else "the product"
        parts.append(f"The product's bf16 answers against this run's, {against}:")
        header = ["output", "rows", "unmatched", "values", "max abs Δ", "median abs Δ"]
        header += ["Spearman of scores", "score sd"]
        rows = [
            [
                r["output"],
                r["rows"],
                r["unmatched"],
                r["values"],
                f"{r['max_abs_difference']:.2e}",
                f"{r['median_abs_difference']:.2e}",
                f"{r['spearman']:.4f}" if r.get("spearman") is not None else "—",
                f"{r['score_sd']:.2e}" if "score_sd" in r else "—",
            ]
            for r in result["differences"]
        ]
        parts.append(markdown_table(header, rows))
    if result.get("rates"):
        parts.append(
            "Tokens/s after the load, the product's against this run's (its passes that "
            "compiled left out, then counted; the ratio's rates without the jobs' start-up "
            "probe; no ratio where the passes that compiled held over "
            f"{COMPARABLE_COMPILE_SHARE:.0%} of the tokens: the work outside the passes would "
            "weigh on too few tokens; then the same within the model's passes alone, where "
            "the jobs timed them, which that work does not weigh on):"
        )
        header = ["rule", "compile s (tokens, share)", "product tokens/s"]
        header += ["compiled, without the compile", "ratio", "compiled, all"]
        header += ["in the passes: product", "compiled, without the compile", "ratio"]
        rows = [
            [
                r["rule"],
                f"{r['compile_s']:.1f} ({r['compile_tokens']:,}, "
                f"{figure(r.get('compile_token_share'), '.0%')})",
                figure(r.get("product_tokens_per_s"), ",.0f"),
                figure(r.get("tokens_per_s_without_compile"), ",.0f"),
                f"{r['ratio_without_compile']:.2f}x" if "ratio_without_compile" in r else "—",
                figure(r.get("tokens_per_s"), ",.0f"),
                figure(r.get("product_pass_tokens_per_s"), ",.0f"),
                figure(r.get("pass_tokens_per_s_without_compile"), ",.0f"),
                f"{r['pass_ratio']:.2f}x" if "pass_ratio" in r else "—",
            ]
            for r in result["rates"]
        ]
        parts.append(markdown_table(header, rows))
    if result.get("profiles"):
        names = ", ".join(f"`{name}`" for name in result["profiles"])
        parts.append(
            f"Profiler top-10 tables and device timelines in profiles.txt: {names}; their "
            "whole traces (Chrome's format) in profile_traces.tar."
        )
    if done.get("tail"):
        parts.append("Snakemake's tail:\n\n```\n" + done["tail"] + "\n```")
    return "\n\n".join(parts)
