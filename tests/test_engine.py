"""The engine and recipes against straightforward full-vocabulary implementations.

The references below do what the published scripts do: one window per variant, full
[length, vocabulary] logits, log-softmax over everything. Our engine must agree within 1e-5.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from carbon_vep.engine import Engine, verify_output_layer
from carbon_vep.model import ModelSpec, load_model
from carbon_vep.recipes import Recipe, score_shard
from carbon_vep.reference import Reference
from carbon_vep.windows import add_windows, reverse_complement

DEMO_FASTA = Path(__file__).resolve().parents[1] / "resources/demo/chr17.hg19.part.fa"
KMERS = ["".join(p) for p in itertools.product("ACGT", repeat=6)]


@pytest.fixture(scope="module")
def loaded(demo_model_dir):
    return load_model(ModelSpec(str(demo_model_dir)))


@pytest.fixture(scope="module")
def reference():
    with Reference(DEMO_FASTA) as ref:
        yield ref


def engine_for(loaded, batch_size=8, **kwargs) -> Engine:
    return Engine(loaded.model, loaded.vocab, loaded.device, batch_size=batch_size, **kwargs)


# ---- straightforward references ------------------------------------------------------------
def full_log_probs(loaded, seq: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids = loaded.tokenizer("<dna>" + seq, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = loaded.model(ids).logits[0].float()
    return torch.log_softmax(logits, dim=-1), ids[0]


def naive_mean_ll(loaded, seq: str) -> float:
    seq = seq[: len(seq) - len(seq) % 6]
    log_probs, ids = full_log_probs(loaded, seq)
    return log_probs[:-1].gather(-1, ids[1:, None]).mean().item()


def naive_nexttoken(loaded, context: str, ref: str, alt: str) -> float:
    """GENERator/Carbon ClinVar recipe: full softmax summed over pure-ACGT vocabulary strings."""
    log_probs, _ = full_log_probs(loaded, context)
    probs = log_probs[-1].exp()
    mass = dict.fromkeys("ACGT", 0.0)
    for string, idx in loaded.tokenizer.get_vocab().items():
        if string and set(string) <= set("ACGT"):
            mass[string[0]] += probs[idx].item()
    return float(np.log(mass[ref] / mass[alt]))


def naive_bp_ll(loaded, seq: str) -> float:
    """Mean log FNS marginal per base, 6-mer block softmax, loops over k-mer strings."""
    seq = seq[: len(seq) - len(seq) % 6]
    log_probs, ids = full_log_probs(loaded, seq)
    dna_ids = torch.tensor([loaded.tokenizer.dna_token_to_id[k] for k in KMERS])
    total, n = 0.0, 0
    for t in range(len(seq) // 6):
        block = torch.softmax(log_probs[t, dna_ids], dim=-1)
        for j, base in enumerate(seq[6 * t : 6 * t + 6]):
            mass = sum(block[i].item() for i, k in enumerate(KMERS) if k[j] == base)
            total += np.log(mass)
            n += 1
    return total / n


def shard_of(reference, rows, recipe, window_bp):
    frame = pl.DataFrame(rows, schema=["ref_chrom", "pos", "ref", "alt"], orient="row")
    return add_windows(frame, reference.lengths, recipe, window_bp)


def snvs(reference, positions):
    rows = []
    for pos in positions:
        ref = reference.fetch("chr17", pos - 1, pos)
        rows += [("chr17", pos, ref, alt) for alt in "ACGT" if alt != ref]
    return rows


# ---- tests ---------------------------------------------------------------------------------
def test_adapter_reads_block_and_prefix_from_tokenizer(loaded):
    vocab = loaded.vocab
    assert vocab.prefix_token == "<dna>" and vocab.k == 6
    assert vocab.kmer_ids[0] == loaded.tokenizer.dna_token_to_id["AAAAAA"]
    assert vocab.kmer_ids[1] == loaded.tokenizer.dna_token_to_id["AAAAAT"]  # ATCG order
    ids = vocab.encode("ACGTACNNNNNN")
    assert ids[-1] == vocab.oov_id and vocab.oov_id not in vocab.encode("ACGTAC" * 3)


def test_output_layer_probe(loaded):
    verify_output_layer(engine_for(loaded), loaded.vocab.encode("ACGTAC" * 5))


def test_centered_recipe_matches_full_logits(loaded, reference):
    shard = shard_of(reference, snvs(reference, [5000, 5003]), "centered", 124)
    scores = score_shard(shard, reference, engine_for(loaded), Recipe("centered"))
    for row in scores.iter_rows(named=True):
        window_row = shard.filter(
            (pl.col("pos") == row["pos"]) & (pl.col("alt") == row["alt"])
        ).row(0, named=True)
        window = reference.fetch("chr17", window_row["window_start"], window_row["window_end"])
        i = window_row["variant_index"]
        assert window[i] == row["ref"] and i == 62
        variant = window[:i] + row["alt"] + window[i + 1 :]
        ref_ll, alt_ll = naive_mean_ll(loaded, window), naive_mean_ll(loaded, variant)
        assert row["ref_ll"] == pytest.approx(ref_ll, abs=1e-5)
        assert row["alt_ll"] == pytest.approx(alt_ll, abs=1e-5)
        assert row["score"] == pytest.approx(-(alt_ll - ref_ll), abs=1e-5)
        assert row["normalization"] == "full_vocab"


def test_rc_average_uses_mirrored_variant_index(loaded, reference):
    shard = shard_of(reference, snvs(reference, [7001])[:1], "centered", 120)
    row = score_shard(
        shard, reference, engine_for(loaded), Recipe("centered", rc_average=True)
    ).row(0, named=True)
    w = shard.row(0, named=True)
    window = reference.fetch("chr17", w["window_start"], w["window_end"])
    i = w["variant_index"]
    variant = window[:i] + row["alt"] + window[i + 1 :]
    rc_ref, rc_var = reverse_complement(window), reverse_complement(variant)
    assert rc_var[len(window) - 1 - i] != rc_ref[len(window) - 1 - i]  # index W-1-i
    fwd = naive_mean_ll(loaded, variant) - naive_mean_ll(loaded, window)
    rev = naive_mean_ll(loaded, rc_var) - naive_mean_ll(loaded, rc_ref)
    assert row["delta_rc"] == pytest.approx(rev, abs=1e-5)
    assert row["delta"] == pytest.approx((fwd + rev) / 2, abs=1e-5)


def test_nexttoken_recipe_matches_published_normaliser(loaded, reference):
    shard = shard_of(reference, snvs(reference, [6000, 6001]), "nexttoken", 100)
    scores = score_shard(shard, reference, engine_for(loaded), Recipe("nexttoken"))
    for row in scores.iter_rows(named=True):
        raw = reference.fetch("chr17", row["pos"] - 1 - 100, row["pos"] - 1)
        context = raw[len(raw) % 6 :]
        expected = naive_nexttoken(loaded, context, row["ref"], row["alt"])
        assert row["score"] == pytest.approx(expected, abs=1e-5)
        assert row["normalization"] == "acgt_strings"


def test_nexttoken_dna_block_is_first_base_marginal(loaded, reference):
    context = reference.fetch("chr17", 8000 - 96, 8000)
    log_probs, _ = full_log_probs(loaded, context)
    dna_ids = [loaded.tokenizer.dna_token_to_id[k] for k in KMERS]
    block = torch.softmax(log_probs[-1, dna_ids], dim=-1)
    first = {b: sum(block[i].item() for i, k in enumerate(KMERS) if k[0] == b) for b in "ACGT"}
    engine = engine_for(loaded)
    ours = engine.next_base_log_probs([loaded.vocab.encode(context)], "dna_block")[0]
    assert np.exp(ours) == pytest.approx([first[b] for b in "ATCG"], abs=1e-6)


def test_fns_recipe_matches_bp_level_reference(loaded, reference):
    shard = shard_of(reference, snvs(reference, [9000])[:1], "fns", 48)
    row = score_shard(shard, reference, engine_for(loaded), Recipe("fns")).row(0, named=True)
    window = reference.fetch("chr17", 9000 - 1 - 24, 9000 - 1 + 24)
    assert row["ref_ll"] == pytest.approx(naive_bp_ll(loaded, window), abs=1e-5)


def test_batch_size_does_not_change_scores(loaded, reference):
    # windows of different lengths (clipped at the contig start) in one batch
    rows = snvs(reference, [30, 200, 5000]) + snvs(reference, [7000])
    shard = shard_of(reference, rows, "centered", 600)
    one = score_shard(shard, reference, engine_for(loaded, batch_size=1), Recipe("centered"))
    eight = score_shard(shard, reference, engine_for(loaded, batch_size=8), Recipe("centered"))
    assert np.allclose(one["score"].to_numpy(), eight["score"].to_numpy(), atol=1e-5)
    shard = shard_of(reference, rows, "nexttoken", 600)
    one = score_shard(shard, reference, engine_for(loaded, batch_size=1), Recipe("nexttoken"))
    eight = score_shard(shard, reference, engine_for(loaded, batch_size=8), Recipe("nexttoken"))
    assert np.allclose(one["score"].to_numpy(), eight["score"].to_numpy(), atol=1e-5)


def test_chunked_normaliser_equals_unchunked(loaded):
    engine = engine_for(loaded, vocab_chunk=1000, position_chunk=7)
    ids = loaded.vocab.encode("ACGTACGGATCCATGCAT" * 4)
    ours = engine.token_log_likelihoods([ids], "full_vocab")[0]
    log_probs, tok_ids = full_log_probs(loaded, "ACGTACGGATCCATGCAT" * 4)
    expected = log_probs[:-1].gather(-1, tok_ids[1:, None])[:, 0].numpy()
    assert np.allclose(ours, expected, atol=1e-5)


def test_variant_in_trimmed_tail_is_skipped_not_dropped(loaded, reference):
    last = reference.lengths["chr17"]
    shard = shard_of(reference, snvs(reference, [last]), "centered", 64)
    scores = score_shard(shard, reference, engine_for(loaded), Recipe("centered"))
    assert scores.height == 3
    assert set(scores["score_status"]) == {"skipped"}
    assert scores["score"].is_null().all()
