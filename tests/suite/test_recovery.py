"""Sequence recovery: the published prompt, accuracy, decoders, and generation through the model."""

import itertools

import numpy as np
import polars as pl
import pytest
import torch

from carbon_vep.config.stages import EvaluationSettings, ModelSettings, RecoverySettings
from carbon_vep.model.loading import load_model
from carbon_vep.model.tokens import BASES, suppressed_token_ids
from carbon_vep.suite.recovery import (
    base_matches,
    fns_conditional_choice,
    fns_marginal_choice,
    generate_continuations,
    prompt_bases,
    recover,
    recovery_metrics,
)


def test_prompt_is_the_rightmost_whole_kmers_up_to_the_limit():
    seq = "".join(BASES[i % 4] for i in range(20))
    assert prompt_bases(seq, 6144, 6) == seq[2:]  # 20 bp -> the last 18
    assert prompt_bases(seq, 13, 6) == seq[8:]  # limit 13 -> the last 12
    assert prompt_bases("ACGTA", 6144, 6) == ""  # shorter than one token: prefix only


def test_accuracy_denominator_is_fixed_and_short_predictions_lose_bases():
    label = "ACGT" * 8
    assert base_matches(label, label, 30) == 30
    assert base_matches(label[:12], label, 30) == 12  # 18 missing bases count as wrong
    assert base_matches("T" + label[1:], label, 30) == 29
    assert base_matches(label + "GG", label, 30) == 30  # bases past 30 are not scored


def _grid_distribution(probabilities: dict[str, float], k: int) -> torch.Tensor:
    kmers = ["".join(p) for p in itertools.product(BASES, repeat=k)]
    rest = (1 - sum(probabilities.values())) / (len(kmers) - len(probabilities))
    p = torch.tensor([probabilities.get(x, rest) for x in kmers])
    return p.log()[None, :]


def test_fns_decoders_differ_from_the_token_argmax_as_defined():
    """k=2: AA is the most likely 2-mer, T the likeliest first base, A the likeliest second."""
    probs = {"AA": 0.30, "TT": 0.26, "TC": 0.24}
    log_p = _grid_distribution(probs, 2)
    kmers = ["".join(p) for p in itertools.product(BASES, repeat=2)]
    assert kmers[int(log_p.argmax())] == "AA"  # token-level greedy
    assert kmers[int(fns_marginal_choice(log_p, 2))] == "TA"  # m_0: T .50, m_1: A .30+
    assert kmers[int(fns_conditional_choice(log_p, 2))] == "TT"  # T, then T | T


def test_fns_marginal_choice_matches_brute_force_for_6mers():
    rng = np.random.default_rng(0)
    log_p = torch.log_softmax(torch.as_tensor(rng.normal(0, 2, (5, 4096))), dim=-1)
    grid = log_p.exp().reshape(5, *([4] * 6)).numpy()
    for row, index in enumerate(fns_marginal_choice(log_p, 6).tolist()):
        bases = [
            int(np.argmax(grid[row].sum(axis=tuple(a for a in range(6) if a != j))))
            for j in range(6)
        ]
        assert index == sum(b * 4 ** (5 - j) for j, b in enumerate(bases))


def test_fns_conditional_choice_matches_brute_force_for_6mers():
    rng = np.random.default_rng(1)
    log_p = torch.log_softmax(torch.as_tensor(rng.normal(0, 2, (5, 4096))), dim=-1)
    grid = log_p.exp().reshape(5, *([4] * 6)).numpy()
    for row, index in enumerate(fns_conditional_choice(log_p, 6).tolist()):
        current, bases = grid[row], []
        for _ in range(6):
            joint = current.reshape(4, -1).sum(axis=1)
            bases.append(int(np.argmax(joint)))
            current = current[bases[-1]]
        assert index == sum(b * 4 ** (5 - j) for j, b in enumerate(bases))


@pytest.fixture(scope="module")
def loaded(demo_model_dir):
    return load_model(ModelSettings(str(demo_model_dir), trust_remote_code=True))


def test_special_tokens_and_dna_tags_are_suppressed(loaded):
    tok = loaded.tokenizer
    ids = set(suppressed_token_ids(tok))
    tags = {tok.convert_tokens_to_ids(t) for t in ("<dna>", "</dna>", "<oov>")}
    assert tags | {tok.eos_token_id} <= ids
    assert not ids & set(loaded.vocab.kmer_ids.tolist())


@pytest.mark.parametrize("decoder", ["token", "fns_marginal", "fns_conditional"])
def test_generation_is_the_same_alone_and_in_a_batch(loaded, decoder):
    rng = np.random.default_rng(2)
    prompts = ["".join(rng.choice(list(BASES), n)) for n in (36, 36, 60, 36, 12)]
    settings = RecoverySettings(decoder=decoder)
    together = generate_continuations(loaded, prompts, settings, batch_size=3)
    alone = [generate_continuations(loaded, [p], settings, 1)[0] for p in prompts]
    assert together == alone
    if decoder != "token":  # FNS decoders emit k-mers only: 5 tokens = 30 bases
        assert all(len(c) == 30 and set(c) <= set(BASES) for c in together)


def test_recover_keeps_every_row_and_scores_against_the_label(loaded):
    rng = np.random.default_rng(3)
    seqs = ["".join(rng.choice(list(BASES), 66)) for _ in range(3)]
    table = pl.DataFrame(
        {
            "sequence": [*seqs, None],
            "label": ["A" * 40, "c" * 30, "G" * 30, "A" * 30],
            "type": ["x", "x", "y", "y"],
        }
    ).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"), pl.lit("f").alias("source")
    )
    settings = RecoverySettings(decoder="fns_marginal")
    out = recover(table, loaded, settings, 8)
    assert out["row_id"].to_list() == [0, 1, 2, 3]
    assert out["status"].to_list() == ["scored", "scored", "scored", "invalid"]
    assert out["label"][0] == "A" * 30 and out["label"][1] == "C" * 30  # cut, upper-cased
    assert out["prompt_bp"][0] == 66 and out["prompt_non_acgt"][0] == 0
    for row in out.filter(pl.col("status") == "scored").to_dicts():
        assert row["n_match"] == base_matches(row["prediction"], row["label"], 30)
        assert row["accuracy"] == pytest.approx(row["n_match"] / 30)


def test_recovery_metrics_are_row_means_with_per_type_means():
    predictions = pl.DataFrame(
        {
            "status": ["scored", "scored", "scored", "invalid"],
            "accuracy": [0.5, 1.0, 0.0, None],
            "type": ["a", "a", "b", "b"],
            "label": ["A" * 30] * 3 + [None],
            "prompt_non_acgt": [0, 0, 1, None],
        }
    )
    result = recovery_metrics(predictions, RecoverySettings(), EvaluationSettings(bootstrap=100))
    assert result["metrics"]["accuracy"] == pytest.approx(0.5)
    assert result["by_type"] == {"a": {"n": 2, "accuracy": 0.75}, "b": {"n": 1, "accuracy": 0.0}}
    assert result["status_counts"] == {"invalid": 1, "scored": 3}
    assert "/ 30" in result["definitions"]["accuracy"]
    assert any("non-ACGT" in w for w in result["warnings"])
    assert 0.0 <= result["confidence_intervals"]["accuracy"]["low"] <= 0.5
