"""The GPU check's known_answer step: the AUROC of a model trained here (benchmark.known_answer:
the right answer is known) in float32, bf16 and bf16 with the output layer upcast, scored in this
process (the model is trained in it; how far bf16 moves the product's own answers is the
`precision` rerun's, benchmark/gpu/reruns.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from carbon_vep.benchmark import known_answer
from carbon_vep.benchmark.gpu.workload import NO_BOOTSTRAP
from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import (
    LabelSettings,
    ModelSettings,
    PanelSettings,
    RecipeSettings,
)
from carbon_vep.evaluate.metrics import vep_metrics
from carbon_vep.genome.reference import open_reference
from carbon_vep.genome.windows import unique_variants
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.scoring.merge import merge_scores
from carbon_vep.scoring.shard import score_shard
from carbon_vep.variants.ingest import ingest_panel


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
