"""Perturbation pairs: scores as in the centered recipe, strict comparison, ties counted."""

import numpy as np
import polars as pl
import pytest
import torch

from carbon_vep.benchmark import published
from carbon_vep.config.stages import EvaluationSettings, ModelSettings, PerturbationSettings
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.model.tokens import BASES
from carbon_vep.suite.perturbation import perturbation_metrics, score_pairs, whole_kmers


@pytest.fixture(scope="module")
def engine(demo_model_dir):
    loaded = load_model(ModelSettings(str(demo_model_dir), trust_remote_code=True))
    return Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)


def _table(originals, perturbed):
    return pl.DataFrame({"original_sequence": originals, "sequence": perturbed}).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"), pl.lit("f").alias("source")
    )


def test_whole_kmers_cuts_from_the_right():
    assert whole_kmers("ACGTACGTACGTA", 6) == "ACGTACGTACGT"
    assert whole_kmers("ACGTAC", 6) == "ACGTAC"


def _centered_score(engine, seq, scoring):
    """Mean log-likelihood of `<dna>` + seq cut to whole 6-mers, computed independently."""
    ids = engine.vocab.encode(whole_kmers(seq, 6))
    if scoring == "token":  # mean token log-prob, full-vocabulary normaliser
        return float(published.token_log_likelihoods(engine, [ids], "full_vocab")[0].mean())
    hidden, _ = engine.hidden_states([ids])  # mean log FNS marginal of each base
    with torch.inference_mode():
        marginals = engine.kmer_base_marginals(engine.dna_log_probs(hidden[0, :-1], "dna_block"))
    codes = torch.as_tensor([BASES.index(b) for b in whole_kmers(seq, 6)]).reshape(-1, 6)
    return float(marginals.gather(2, codes[..., None]).mean())


@pytest.mark.parametrize("scoring", ["token", "bp"])
def test_pairs_are_scored_like_the_centered_recipe(engine, scoring):
    rng = np.random.default_rng(0)
    originals = ["".join(rng.choice(list(BASES), 65)) for _ in range(3)]
    perturbed = [o[:20] + "CAG" * 5 + o[35:] for o in originals]
    pairs = score_pairs(_table(originals, perturbed), engine, PerturbationSettings(scoring))
    expected = [_centered_score(engine, s, scoring) for s in originals]
    assert pairs["score_original"].to_list() == pytest.approx(expected, abs=1e-5)
    expected = [_centered_score(engine, s, scoring) for s in perturbed]
    assert pairs["score_perturbed"].to_list() == pytest.approx(expected, abs=1e-5)
    assert (pairs["margin"] == pairs["score_original"] - pairs["score_perturbed"]).all()
    assert (pairs["correct"] == (pairs["margin"] > 0)).all()


def test_ties_are_wrong_and_bad_rows_are_kept(engine):
    rng = np.random.default_rng(1)
    seq = "".join(rng.choice(list(BASES), 60))
    table = _table([seq, seq, "ACGTAC" * 3, None], [seq, seq[::-1], "ACGTA" * 3, "ACGTAC"])
    pairs = score_pairs(table, engine, PerturbationSettings())
    assert pairs["row_id"].to_list() == [0, 1, 2, 3]
    assert pairs["status"].to_list() == ["scored", "scored", "invalid", "invalid"]
    assert pairs["tie"][0] and not pairs["correct"][0]
    assert "lengths differ" in pairs["reason"][2] and "missing" in pairs["reason"][3]


def test_a_pair_past_the_models_positions_is_invalid_not_scored(engine, monkeypatch):
    """A 72 bp pair needs 13 positions (12 tokens + `<dna>`): on a model with 12 it is invalid
    with the reason (it used to be scored past the model's positions), a 66 bp pair is scored."""
    monkeypatch.setattr(engine.model.config, "max_position_embeddings", 12)
    rng = np.random.default_rng(4)
    seqs = ["".join(rng.choice(list(BASES), n)) for n in (72, 66)]
    pairs = score_pairs(_table(seqs, [s[::-1] for s in seqs]), engine, PerturbationSettings())
    assert pairs["status"].to_list() == ["invalid", "scored"]
    assert pairs["reason"][0] == "longer than the model's context: 13 positions, it supports 12"


def test_rows_do_not_depend_on_their_order(engine):
    rng = np.random.default_rng(2)
    originals = ["".join(rng.choice(list(BASES), 48)) for _ in range(4)]
    perturbed = ["".join(rng.choice(list(BASES), 48)) for _ in range(4)]
    forward = score_pairs(_table(originals, perturbed), engine, PerturbationSettings())
    backward = score_pairs(_table(originals[::-1], perturbed[::-1]), engine, PerturbationSettings())
    assert forward["margin"].to_list() == pytest.approx(backward["margin"].to_list()[::-1])


def test_accuracy_counts_ties_as_wrong_by_hand():
    pairs = pl.DataFrame(
        {
            "status": ["scored"] * 4 + ["invalid"],
            "correct": [True, False, False, True, None],
            "tie": [False, True, False, False, None],
            "margin": [0.2, 0.0, -0.1, 0.3, None],
            "non_acgt": [0, 0, 0, 0, None],
        }
    )
    result = perturbation_metrics(pairs, PerturbationSettings(), EvaluationSettings(bootstrap=50))
    assert result["metrics"]["accuracy"] == pytest.approx(2 / 4)
    assert result["n_ties"] == 1 and result["n_correct"] == 2 and result["n_scored"] == 4
    assert result["metrics"]["mean_margin"] == pytest.approx(0.1)
    assert result["status_counts"] == {"invalid": 1, "scored": 4}
    assert "ties count as wrong" in result["definitions"]["accuracy"]


def test_score_perturbation_with_no_pair_to_score_stops_before_the_model_loads(tmp_path, caplog):
    """Every pair invalid (lengths differ): exit 2 with one ERROR naming the file and the
    reasons, nothing written, no model loaded (the model named does not exist); not exit 0
    with a null accuracy."""
    from carbon_vep.cli import main

    tasks = tmp_path / "pert.tsv"
    tasks.write_text(
        "original_sequence\tsequence\n"
        "ACGTACGTACGTACGT\tACGTACGTACGTACG\nACGTACGTACGTAC\tACGTACGTACGTACGT\n"
    )
    out, metrics = tmp_path / "p.parquet", tmp_path / "p.json"
    argv = ["score-perturbation", "--tasks-file", str(tasks), "--model", str(tmp_path / "none")]
    argv += ["--out", str(out), "--metrics", str(metrics), "--task", "p", "--model-key", "m"]
    assert main(argv) == 2
    (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert str(tasks) in error and "none of the 2 rows can be scored" in error
    assert "lengths differ (16 vs 15 bp)" in error
    assert not out.exists() and not metrics.exists()
