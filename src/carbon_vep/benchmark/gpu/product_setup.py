"""What the GPU check's product step runs on (benchmark/gpu/product.py): its sizes (full, and
the CPU smoke's), the checkpoints as a user has them (random-weight bf16 Llamas of Carbon-3B's
and Carbon-500M's shapes, saved with `save_pretrained` and their Carbon-layout tokenizer), the
inputs on a synthetic genome, and the run's GPU config (the H100 profile's `config:` values)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import yaml

from carbon_vep.benchmark.gpu.workload import (
    pair_rows,
    recovery_rows,
    save_checkpoint,
    with_model,
)
from carbon_vep.benchmark.harness import PROJECT_ROOT
from carbon_vep.benchmark.synthetic import random_acgt, write_fasta, write_vcf
from carbon_vep.config.stages.scoring import ShardSettings

PROFILE = "slurm-h100"  # the profile whose `config:` values the run takes
TARGET, DRAFT = "carbon3b", "carbon500m"


@dataclass(frozen=True)
class ProductSizes:
    """The run's inputs. Full: the published windows and contexts, small counts (the step must
    leave most of a 10-minute device call to the rest of the check); smoke: a CPU's seconds."""

    positions: int = 32_768  # Carbon's native positions
    # 144 variants a dataset, and a 1.6 Mbp scan: on the H200 (2026-11-28) 36 and then 72
    # variants a job were ~3 s of scoring a side, where a job's first-pass costs weigh as much
    # as its rate; more variants a job, not more jobs, moves the ratio to the rate
    sites: int = 48  # SNV sites, 3 variants each, labels alternating
    centered_bp: int = 8192
    nexttoken_bp: int = 24_000
    # the product's default (500): the 144 variants in one score_shard job, as a user's run of
    # this panel has them and as the official script scores them in one process (runs 8-12:
    # two jobs of 72, each paying its start-up probe and first passes)
    shard_size: int = ShardSettings.shard_size
    tile_bp: int = 49_146
    min_context: int = 24_000
    scan_bp: int = 1_600_000  # scored bases: 64 tiles, four of the profile's batches
    prompts: int = 8
    prompt_bp: int = 6144
    new_tokens: int = 20  # drafted, one prompt at a time: 40 took 74 s on the H200 (2026-11-28)
    pairs: int = 8
    pair_bp: int = 3000
    niah_rows: int = 2  # a cell at the native context
    yarn_rows: int = 1  # a cell past it (64k, 128k: the official passes are the longest)
    yarn_factor: int = 4
    threads: int = 0  # jobs' torch threads (0: torch's default)
    rerun_batch_tokens: int = 8192  # the batch_budgets rerun's (a few windows a batch)


SMOKE_PRODUCT = ProductSizes(
    positions=512,
    sites=4,
    centered_bp=600,
    nexttoken_bp=600,
    shard_size=6,
    tile_bp=1200,
    min_context=600,
    scan_bp=1800,
    prompts=2,
    prompt_bp=120,
    new_tokens=6,
    pairs=2,
    pair_bp=120,
    niah_rows=2,
    yarn_rows=1,
    threads=1,
    rerun_batch_tokens=256,  # a toy window or two a batch
)


def checkpoint(
    tokenizer, vocab, device, name: str, shapes: dict, folder: Path, sizes: ProductSizes
) -> Path:
    """A random-weight bf16 Llama of this shape, saved into `folder` (built on the device and
    freed after: workload.with_model)."""
    with_model(
        tokenizer,
        vocab,
        device,
        name,
        shapes,
        lambda model: save_checkpoint(model, folder),
        sizes.positions,
    )
    return folder


def checkpoints(
    tokenizer, vocab, device, shapes: dict, folder: Path, sizes: ProductSizes
) -> dict[str, Path]:
    """The run's two checkpoints under `folder`: the target (Carbon-3B's shape) and the
    recovery draft (Carbon-500M's), by their config keys."""
    return {
        key: checkpoint(tokenizer, vocab, device, name, shapes, folder / key, sizes)
        for key, name in ((TARGET, "Carbon-3B"), (DRAFT, "Carbon-500M"))
    }


@dataclass(frozen=True)
class ProductInputs:
    genome: Path
    haystack: Path
    panel: Path
    recovery: Path
    pairs: Path
    scan_region: str


def write_inputs(folder: Path, sizes: ProductSizes) -> ProductInputs:
    """A random genome (numpy seed 5) with a panel contig and a scan contig, a haystack for
    NIAH, and the task files (recovery prompts and their next 30 bp, shuffled-middle pairs)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    spacing = max(sizes.centered_bp // 4, 60)
    first = sizes.nexttoken_bp + sizes.centered_bp
    panel_bp = first + sizes.sites * spacing + sizes.centered_bp
    panel = random_acgt(panel_bp, rng)
    scan_bp = sizes.scan_bp + 2 * sizes.min_context
    genome = write_fasta(folder / "genome.fa", {"panel": panel, "scan": random_acgt(scan_bp, rng)})
    ctx = 4 * sizes.positions  # the longest YaRN cell's context
    haystack = write_fasta(folder / "haystack.fa", {"hay": random_acgt(ctx * 6 * 2, rng)})
    sites = [first + i * spacing for i in range(sizes.sites)]
    return ProductInputs(
        genome=genome,
        haystack=haystack,
        panel=_write_panel(folder / "panel.vcf", panel, sites),
        recovery=_write_recovery(folder / "recovery.tsv", panel, sites, sizes),
        pairs=_write_pairs(folder / "pairs.tsv", panel, sites, sizes, rng),
        scan_region=f"scan:{sizes.min_context + 1}-{sizes.min_context + sizes.scan_bp}",
    )


def _write_panel(path: Path, contig: str, sites: list[int]) -> Path:
    """Every SNV of each site (its three alternates in one record), labelled 1 or 0 by site."""
    records = []
    for i, pos in enumerate(sites):
        ref = contig[pos - 1]
        alts = ",".join(b for b in "ACGT" if b != ref)
        records.append(("panel", pos, ref, alts, f"LABEL={i % 2}"))
    label = '##INFO=<ID=LABEL,Number=1,Type=Integer,Description="1 or 0, alternating by site">'
    return write_vcf(path, {"panel": len(contig)}, records, (label,))


def _write_recovery(path: Path, contig: str, sites: list[int], sizes: ProductSizes) -> Path:
    rows = recovery_rows(contig, sites, sizes.prompts, sizes.prompt_bp)
    pl.DataFrame(rows).with_columns(type=pl.lit("x")).write_csv(path, separator="\t")
    return path


def _write_pairs(path: Path, contig: str, sites, sizes: ProductSizes, rng) -> Path:
    rows = pair_rows(contig, sites, sizes.pairs, sizes.pair_bp, rng)
    pl.DataFrame(rows).write_csv(path, separator="\t")
    return path


# ---- the config ------------------------------------------------------------------------------
def profile_config(name: str) -> list[str]:
    """A profile's `config:` values ("key=value"), as `--workflow-profile` passes them."""
    profile = yaml.safe_load((PROJECT_ROOT / "profiles" / name / "config.yaml").read_text())
    return [str(item) for item in profile.get("config", [])]


def write_config(
    folder: Path, models: dict[str, Path], inputs: ProductInputs, device, sizes: ProductSizes
) -> Path:
    """The run's config: both models on the device in bf16, every model rule's work once."""
    model = dict(trust_remote_code=True, dtype="bfloat16", device=device.type, batch_size=8)
    only = [TARGET]
    panel = dict(panel=str(inputs.panel), reference=str(inputs.genome), build="synthetic")
    panel |= dict(label_column="LABEL", info_fields=["LABEL"], models=only)
    niah = dict(source="build", reference=str(inputs.haystack), tasks=["neardup_d2"], models=only)
    rows = dict(rows=sizes.niah_rows, rows_per_job=sizes.niah_rows)
    # the published override (config/suite.yaml's genomic_niah_yarn4): YaRN x4 from the native
    # positions, max_position_embeddings twice them (65,536 for Carbon); cells at twice and
    # four times the native context
    yarn = dict(yarn_factor=sizes.yarn_factor, yarn_original_positions=sizes.positions)
    yarn |= dict(yarn_max_positions=2 * sizes.positions)
    yarn |= dict(rows=sizes.yarn_rows, rows_per_job=sizes.yarn_rows)
    config = {
        "outdir": str(folder / "results"),
        "shard_size": sizes.shard_size,
        "bootstrap": 0,
        "models": {
            TARGET: dict(model, path=str(models[TARGET]), draft_model=DRAFT),
            DRAFT: dict(model, path=str(models[DRAFT])),
        },
        "datasets": {
            "centered": dict(panel, recipe="centered", window_bp=sizes.centered_bp),
            "nexttoken": dict(panel, recipe="nexttoken", window_bp=sizes.nexttoken_bp),
        },
        "scans": {
            "scan": dict(
                reference=str(inputs.genome),
                build="synthetic",
                regions=[inputs.scan_region],
                tile_bp=sizes.tile_bp,
                min_context=sizes.min_context,
                tracks=True,
                models=only,
            )
        },
        "tasks": {
            "recovery": dict(
                kind="sequence_recovery",
                path=str(inputs.recovery),
                new_tokens=sizes.new_tokens,
                models=only,
            ),
            "perturbation": dict(kind="perturbation", path=str(inputs.pairs), models=only),
        },
        "niah": {
            "native": dict(niah, contexts=[sizes.positions], **rows),  # no YaRN, as published
            "yarn": dict(niah, contexts=[2 * sizes.positions, 4 * sizes.positions], **yarn),
        },
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
