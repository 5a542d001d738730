"""Phase 4 of the GPU check: bf16 against float32 on the same weights and inputs, and the AUROC of
a trained known-answer model (benchmark.known_answer) in each precision."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import polars as pl
import torch

from carbon_vep.benchmark import known_answer
from carbon_vep.benchmark.gpu.workload import NO_BOOTSTRAP, Inputs, Model
from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import (
    LabelSettings,
    ModelSettings,
    PanelSettings,
    RecipeSettings,
    TileSettings,
)
from carbon_vep.evaluate.metrics import vep_metrics
from carbon_vep.genome.reference import open_reference
from carbon_vep.genome.windows import unique_variants
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.scan.tiles import scan_region
from carbon_vep.scoring.merge import merge_scores
from carbon_vep.scoring.shard import score_shard
from carbon_vep.variants.ingest import ingest_panel


def spearman(x, y) -> float:
    frame = pl.DataFrame({"x": np.asarray(x, float), "y": np.asarray(y, float)})
    return float(frame.select(pl.corr("x", "y", method="spearman")).item())


def compare_precision(model: Model, reference, inputs: Inputs) -> list[dict]:
    """The same inputs through the same weights in float32 (reference), bf16, and bf16 with
    the output layer in float32."""
    sizes = inputs.sizes
    fp32_model = copy.deepcopy(model.loaded.model).float()
    fp32 = Engine(
        fp32_model,
        model.loaded.vocab,
        model.loaded.device,
        batch_size=8,
        batch_tokens=model.batch_tokens,
    )
    engines = {"bf16": model.engine(), "bf16 + upcast_output_layer": model.engine(upcast=True)}
    centered = inputs.shard(reference, "centered", sizes.centered_bp, sizes.compare_sites)
    nexttoken = inputs.shard(reference, "nexttoken", sizes.nexttoken_bp, sizes.compare_sites)
    tiles = TileSettings(sizes.tile_bp, sizes.min_context)
    scan_end = min(inputs.scan_bp, sizes.tile_bp)

    def recipe(shard, name, normalization="published"):
        settings = RecipeSettings(name, normalization)
        return lambda e: score_shard(shard, reference, e, settings)

    cases = {  # every scoring path of paths.py, in its order
        "centered, full_vocab": recipe(centered, "centered"),
        "centered, dna_block": recipe(centered, "centered", "dna_block"),
        "fns (bp, dna_block)": recipe(centered, "fns"),
        "nexttoken, acgt_strings": recipe(nexttoken, "nexttoken"),
        "nexttoken, dna_block": recipe(nexttoken, "nexttoken", "dna_block"),
        "scan (log FNS marginals)": lambda e: _scan_rows(e, reference, scan_end, tiles),
    }
    rows = []
    for case, run in cases.items():
        expected = run(fp32)
        for label, engine in engines.items():
            got = run(engine)
            # the raw log-likelihoods where the path has them (fns: its score alone)
            lls = [c for c in ("ref_ll", "alt_ll") if c in expected.columns] or ["score"]
            diff = np.abs(np.concatenate([got[c].to_numpy() - expected[c].to_numpy() for c in lls]))
            rows.append(
                {
                    "model": model.name,
                    "case": case,
                    "precision": label,
                    "n": expected.height,
                    "spearman_score": spearman(got["score"], expected["score"]),
                    "max_abs_ll_difference": float(diff.max()),
                    "median_abs_ll_difference": float(np.median(diff)),
                    "score_sd_float32": float(expected["score"].std()),
                }
            )
    del fp32, fp32_model
    if model.loaded.device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def _scan_rows(engine, reference, end, tiles) -> pl.DataFrame:
    """Per SNV of the scan: score, and the log marginals of ref and alt as ref_ll / alt_ll."""
    from carbon_vep.scan.tiles import snv_scores

    snvs = snv_scores(scan_region(engine, reference, "scan", 0, end, tiles))
    return snvs.with_columns(ref_ll=pl.col("p_ref").log(), alt_ll=pl.col("p_alt").log())


def known_answer_aurocs(device: torch.device, work: Path, steps: int) -> list[dict]:
    """AUROC of the trained motif model (support/known_answer.py) in float32, bf16 and bf16
    with upcast_output_layer, through the package's loading and scoring path."""
    work.mkdir(parents=True, exist_ok=True)
    world = known_answer.build_world(work, steps=steps, device=str(device))
    panel = known_answer.write_panel(world)
    labels = LabelSettings(label_column="label")
    rows: list[dict] = []
    configs = {
        "float32": ("float32", False),
        "bf16": ("bfloat16", False),
        "bf16 + upcast_output_layer": ("bfloat16", True),
    }
    for label, (dtype, upcast) in configs.items():
        spec = ModelSettings(
            str(world["model"]),
            dtype=dtype,
            device=str(device),
            trust_remote_code=True,
            upcast_output_layer=upcast,
        )
        loaded = load_model(spec)
        engine = Engine(
            loaded.model, loaded.vocab, loaded.device, batch_size=8, upcast_output_layer=upcast
        )
        with open_reference(world["fasta"]) as reference:
            checked, _ = ingest_panel(panel, reference, PanelSettings(build="synthetic"))
            for recipe in ("centered", "nexttoken"):
                windows = RECIPES[recipe].add_windows(
                    unique_variants(checked), reference.lengths, known_answer.WINDOW_BP[recipe]
                )
                scores = score_shard(windows, reference, engine, RecipeSettings(recipe))
                merged = merge_scores(checked, [scores])
                auroc = vep_metrics(merged, labels, NO_BOOTSTRAP)["metrics"]["auroc"]
                rows.append(
                    {"recipe": recipe, "precision": label, "auroc": auroc, "n": merged.height}
                )
    return rows
