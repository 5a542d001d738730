"""Known answer: a tiny Llama trained here on a genome with a planted motif must find it.

The synthetic genome and the model are benchmark/known_answer.py's: random sequence with one
48 bp motif planted every ~140 bp, and a 1-layer Llama with a Carbon-like hybrid tokenizer that
learns, in a few seconds on one CPU thread, that a motif continues itself. It is saved with
`save_pretrained`, loaded with `load_model`, and run through the real path: ingest -> windows
-> score_shard -> merge -> vep_metrics, recovery, perturbation.

- SNVs with at least 12 motif bases to their left and 6 from them to the motif's end (so the
  6-mer holding them is all motif, whatever the token phase) are positives, SNVs in background
  far from any motif negatives: AUROC >= 0.9 under centered, fns and nexttoken, and positives score
  higher (a flipped sign fails this; the sign warning fires on flipped scores).
- Shuffled labels give AUROC near 0.5.
- The next-token context shifted by one base (it then contains the variant's own base) loses
  the signal, so an off-by-one window in the recipes would fail this test.
- Sequence recovery of prompts ending inside a motif beats chance (0.25) clearly; prompts ending
  in background do not. Perturbation pairs (motif scrambled) are told apart.
"""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest

from carbon_vep.benchmark import known_answer
from carbon_vep.benchmark.known_answer import MIN_LEFT_MOTIF, MOTIF_BP, WINDOW_BP
from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import (
    EvaluationSettings,
    LabelSettings,
    MetricSettings,
    ModelSettings,
    PanelSettings,
    PerturbationSettings,
    RecipeSettings,
    RecoverySettings,
)
from carbon_vep.evaluate.metrics import auroc, vep_metrics
from carbon_vep.genome.reference import open_reference
from carbon_vep.genome.windows import unique_variants
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.scoring.merge import merge_scores
from carbon_vep.scoring.shard import score_shard
from carbon_vep.suite.perturbation import score_pairs
from carbon_vep.suite.rollouts import recover
from carbon_vep.variants.ingest import ingest_panel

pytestmark = pytest.mark.slow  # a model is trained first (~25 s alone, more beside others)

OPTIONS = MetricSettings(evaluation=EvaluationSettings(bootstrap=0))
LABELS = LabelSettings(label_column="label")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The trained model on disk, the genome FASTA, the motif and its start positions."""
    return known_answer.build_world(tmp_path_factory.mktemp("known_answer"))


@pytest.fixture(scope="module")
def loaded(world):
    return load_model(ModelSettings(str(world["model"]), trust_remote_code=True))


@pytest.fixture(scope="module")
def panel(world):
    return known_answer.write_panel(world)


def _score(world, panel_path, loaded, recipe: str, shift: int = 0) -> pl.DataFrame:
    """The real path; `shift` moves every window right by that many bases (a deliberate bug)."""
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=8)
    with open_reference(world["fasta"]) as reference:
        checked, _ = ingest_panel(panel_path, reference, PanelSettings(build="synthetic"))
        variants = RECIPES[recipe].add_windows(
            unique_variants(checked), reference.lengths, WINDOW_BP[recipe]
        )
        variants = variants.with_columns(pl.col("window_start", "window_end") + shift)
        scores = score_shard(variants, reference, engine, RecipeSettings(recipe))
    return merge_scores(checked, [scores])


@pytest.fixture(scope="module")
def scored(world, panel, loaded):
    return {r: _score(world, panel, loaded, r) for r in ("centered", "fns", "nexttoken")}


@pytest.mark.parametrize("recipe", ["centered", "fns", "nexttoken"])
def test_motif_breaking_variants_score_as_damaging(scored, recipe):
    merged = scored[recipe]
    assert merged.height == 60 and (merged["status"] == "scored").all()
    result = vep_metrics(merged, LABELS, OPTIONS)
    assert result["n_labelled"] == 60 and result["n_positive"] == 30
    assert result["metrics"]["auroc"] >= 0.9, result["metrics"]
    by_label = merged.group_by("label").agg(pl.col("score").mean()).sort("label")
    negative_mean, positive_mean = by_label["score"].to_list()
    assert positive_mean > negative_mean  # larger = more damaging, not the reverse
    assert not result["warnings"]


@pytest.mark.parametrize("recipe", ["centered", "nexttoken"])
def test_flipped_sign_is_caught(scored, recipe):
    flipped = scored[recipe].with_columns(-pl.col("score"))
    result = vep_metrics(flipped, LABELS, OPTIONS)
    assert result["metrics"]["auroc"] <= 0.1
    assert any("sign flipped" in w for w in result["warnings"])


def test_shuffled_labels_give_chance_auroc(scored):
    merged = scored["centered"]
    labels = merged["label"].cast(pl.Int64).to_numpy()
    scores = merged["score"].to_numpy()
    rng = np.random.default_rng(0)
    shuffled = [auroc(rng.permutation(labels), scores) for _ in range(50)]
    assert abs(float(np.mean(shuffled)) - 0.5) < 0.06


def test_context_shifted_by_one_base_loses_the_signal(world, panel, loaded, scored):
    """With the variant's own base in its context the next-token score is about the next base:
    the AUROC falls far below the correct window's, so an off-by-one window cannot pass."""
    shifted = _score(world, panel, loaded, "nexttoken", shift=1)
    right = vep_metrics(scored["nexttoken"], LABELS, OPTIONS)["metrics"]["auroc"]
    wrong = vep_metrics(shifted, LABELS, OPTIONS)["metrics"]["auroc"]
    assert right >= 0.9 and wrong < 0.75


def _recovery_rows(world, inside: bool, rng: random.Random) -> pl.DataFrame:
    genome, starts = world["genome"], world["starts"]
    rows = []
    for here, after in zip(starts[2:22], starts[3:23], strict=True):
        if inside:  # the prompt ends 12-18 bp into a motif; the label is more motif
            end = here + rng.randint(MIN_LEFT_MOTIF, MOTIF_BP - 30)
        else:  # the prompt ends in background; the label does not reach the next motif
            end = here + MOTIF_BP + 5
            assert end + 30 <= after
        rows.append({"sequence": genome[end - 90 : end], "label": genome[end : end + 30]})
    return pl.DataFrame(rows).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.lit("t").alias("source"),
        pl.lit("motif" if inside else "background").alias("type"),
    )


@pytest.mark.parametrize("decoder", ["token", "fns_marginal", "fns_conditional"])
def test_recovery_beats_chance_inside_motifs_only(world, loaded, decoder):
    rng = random.Random(3)
    settings = RecoverySettings(decoder=decoder)
    inside = recover(_recovery_rows(world, True, rng), loaded, settings, 8)
    outside = recover(_recovery_rows(world, False, rng), loaded, settings, 8)
    assert inside["accuracy"].mean() >= 0.8
    assert outside["accuracy"].mean() < 0.45


def test_perturbation_prefers_the_intact_motif(world, loaded):
    genome, starts = world["genome"], world["starts"]
    rng = random.Random(5)
    rows = []
    for s in starts[2:22]:
        original = genome[s - 24 : s + MOTIF_BP + 24]
        motif = list(original[24 : 24 + MOTIF_BP])
        rng.shuffle(motif)
        rows.append(
            {
                "original_sequence": original,
                "sequence": original[:24] + "".join(motif) + original[24 + MOTIF_BP :],
            }
        )
    table = pl.DataFrame(rows).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"), pl.lit("t").alias("source")
    )
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=8)
    pairs = score_pairs(table, engine, PerturbationSettings())
    assert pairs["correct"].mean() >= 0.9
