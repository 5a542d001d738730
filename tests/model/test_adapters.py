"""Adapters beyond Carbon: a GENERator-style pure k-mer vocabulary with a `<s>` prefix.

The tokenizer (support.kmer_model) has no `dna_token_to_id` and no dna_config.json, so the
adapter must find the k-mer block by scanning the vocabulary and the prefix from the BOS token.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from support.kmer_model import build_kmer_model

from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import ModelSettings, RecipeSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.scoring.shard import score_shard

DEMO_FASTA = Path(__file__).resolve().parents[2] / "resources/demo/chr17.hg19.part.fa"


@pytest.fixture(scope="module", params=[6, 3], ids=["k6", "k3"])
def kmer_model(request, tmp_path_factory):
    path = build_kmer_model(tmp_path_factory.mktemp(f"kmer{request.param}"), request.param)
    return request.param, load_model(ModelSettings(str(path), trust_remote_code=False))


def test_adapter_finds_block_and_bos_prefix(kmer_model):
    k, loaded = kmer_model
    vocab = loaded.vocab
    assert vocab.k == k and vocab.prefix_token == "<s>" and vocab.prefix_id == 1
    assert vocab.kmer_ids[0] == 32 and vocab.kmer_ids[1] == 33  # A...A, A...AT in ATCG order
    assert vocab.oov_id is None
    with pytest.raises(ValueError, match="no <oov>"):
        vocab.encode("N" * k)


def test_centered_recipe_matches_full_logits(kmer_model):
    k, loaded = kmer_model
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=8)
    with open_reference(DEMO_FASTA) as ref:
        pos = 5000
        base = ref.fetch("chr17", pos - 1, pos)
        alt = "A" if base != "A" else "C"
        frame = pl.DataFrame(
            [("chr17", pos, base, alt)], schema=["ref_chrom", "pos", "ref", "alt"], orient="row"
        )
        shard = RECIPES["centered"].add_windows(frame, ref.lengths, 120)
        row = score_shard(shard, ref, engine, RecipeSettings("centered")).row(0, named=True)
        window = ref.fetch("chr17", pos - 1 - 60, pos - 1 + 60)
    variant = window[:60] + alt + window[61:]

    def naive(seq: str) -> float:
        seq = seq[: len(seq) - len(seq) % k]
        ids = loaded.tokenizer("<s>" + seq, add_special_tokens=False, return_tensors="pt").input_ids
        assert ids.shape[1] == len(seq) // k + 1  # one prefix, no doubled BOS
        with torch.no_grad():
            lp = torch.log_softmax(loaded.model(ids).logits[0, :-1].float(), dim=-1)
        return lp.gather(-1, ids[0, 1:, None]).mean().item()

    assert row["ref_ll"] == pytest.approx(naive(window), abs=1e-5)
    assert row["score"] == pytest.approx(naive(window) - naive(variant), abs=1e-5)


def test_nexttoken_marginal_sums_first_base(kmer_model):
    k, loaded = kmer_model
    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=8)
    context = "ACGTTGCA" * k
    ids = loaded.tokenizer("<s>" + context, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        probs = torch.softmax(loaded.model(ids).logits[0, -1].float(), dim=-1)
    kmers = ["".join(p) for p in itertools.product("ATCG", repeat=k)]
    expected = [sum(probs[32 + i].item() for i, s in enumerate(kmers) if s[0] == b) for b in "ATCG"]
    # a pure k-mer vocabulary: the published ACGT-string normaliser is the full-vocab marginal
    for norm in ("acgt_strings", "full_vocab"):
        got = np.exp(engine.next_base_log_probs([loaded.vocab.encode(context)], norm)[0])
        assert got == pytest.approx(expected, abs=1e-6)
