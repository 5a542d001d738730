"""The known GPU costs removed from the engine, each checked against the code as it was (the
`masked_*` / `per_item_*` references in support/engine_as_it_was.py) on the same inputs, for
identical values, and for what it removes (host reads counted on the CPU: support/host_reads.py):

- no attention mask on a batch of equal-length sequences (SDPA can then take its fused causal
  kernel); windows bucketed by length so that batches are equal-length wherever they can be;
- no host read per item: per-item sums stay on the device and come back in one copy per batch;
- `upcast_output_layer`: every product with the output layer in float32.

Equality is exact (`==` on float32 values) wherever the change leaves the arithmetic alone:
dropping an all-ones mask runs the same causal kernel (transformers itself drops such a mask,
after reading it back), and moving the host read leaves every sum as it was.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import engine_as_it_was as as_it_was
from support.files import random_dna
from support.host_reads import HostReads

from carbon_vep.model.engine import Engine
from carbon_vep.model.window_groups import window_groups_scores


def engine_for(loaded, batch_size=8, **kwargs) -> Engine:
    return Engine(loaded.model, loaded.vocab, loaded.device, batch_size=batch_size, **kwargs)


def windows(n: int, bp: int, seed: int) -> list[str]:
    return [random_dna(bp, seed + i) for i in range(n)]


def snv(seq: str, i: int) -> str:
    return seq[:i] + ("A" if seq[i] != "A" else "C") + seq[i + 1 :]


# ---- no attention mask for equal lengths ------------------------------------------------------
def test_equal_lengths_go_without_a_mask_and_give_identical_states(loaded, monkeypatch):
    engine = engine_for(loaded)
    batch = [engine.vocab.encode(s) for s in windows(3, 120, 1)]
    masks = []
    forward = engine.forward
    monkeypatch.setattr(
        engine,
        "forward",
        lambda ids, mask=None, cache=None: (masks.append(mask), forward(ids, mask, cache))[1],
    )
    hidden, _ = engine.hidden_states(batch)
    assert masks == [None]
    assert torch.equal(hidden, as_it_was.masked_hidden_states(engine, batch))
    engine.hidden_states([batch[0], batch[1][:-3]])  # mixed lengths: padded, with a mask
    assert masks[-1] is not None and masks[-1].sum() == 2 * 21 - 3


def test_batches_hold_one_length_where_the_data_allows(loaded, monkeypatch):
    """5 windows of 15 tokens, 5 of 18 and 6 of 21, batch 4: sorted batches would mix lengths
    twice ([15, 18, 18, 18], [18, 18, 21, 21]); bucketed, each length fills its own batch and
    only the leftovers (one 15, one 18, two 21) share a padded one. Same number of batches,
    same values."""
    engine = engine_for(loaded, batch_size=4)
    seqs = windows(6, 120, 10) + windows(5, 84, 30) + windows(5, 102, 40)
    shapes = []
    forward = engine.forward
    monkeypatch.setattr(
        engine,
        "forward",
        lambda ids, mask=None, cache=None: (
            shapes.append((np.shape(ids), mask is None)),
            forward(ids, mask, cache),
        )[1],
    )
    scores = engine.sequence_scores(seqs, "token", "dna_block")
    assert shapes == [((4, 15), True), ((4, 18), True), ((4, 21), True), ((4, 21), False)]
    one_batch = engine_for(loaded, batch_size=16).sequence_scores(seqs, "token", "dna_block")
    assert [s.mean for s in scores] == pytest.approx([s.mean for s in one_batch], abs=1e-6)


# ---- one transfer per batch -------------------------------------------------------------------
SCORINGS = [("token", "full_vocab"), ("token", "dna_block"), ("bp", "dna_block")]


@pytest.mark.parametrize(("kind", "normalization"), SCORINGS)
def test_one_transfer_per_batch_gives_identical_sums(loaded, kind, normalization):
    engine = engine_for(loaded, batch_size=4)
    seqs = windows(6, 96, 40) + ["ACGTNNACGTAC" * 8]  # an <oov> token and non-ACGT bases
    ours = engine.sequence_scores(seqs, kind, normalization)
    before = as_it_was.per_item_sequence_scores(engine, seqs, kind, normalization)
    assert [(s.total, s.count) for s in ours] == before


@pytest.mark.parametrize("kind", ["token", "bp"])
def test_window_groups_read_back_once_with_identical_sums(loaded, kind):
    engine = engine_for(loaded)
    ref = random_dna(120, 50)
    alts = [snv(ref, 61), snv(ref, 61)[:61] + "T" + ref[62:], snv(ref, 63)]
    [(ref_score, alt_scores)] = window_groups_scores(engine, [(ref, alts)], kind, "full_vocab")
    before_ref, before_alts = as_it_was.per_item_window_group(engine, ref, alts, kind, "full_vocab")
    # the same terms; summed on the device in float64 where the loop summed each in float32
    assert (ref_score.total, ref_score.count) == pytest.approx(before_ref, rel=1e-6)
    for score, before in zip(alt_scores, before_alts, strict=True):
        assert (score.total, score.count) == pytest.approx(before, rel=1e-6)


def _count_copies(engine, monkeypatch) -> list[int]:
    copies = []
    to_host = engine.to_host
    monkeypatch.setattr(engine, "to_host", lambda x: (copies.append(1), to_host(x))[1])
    return copies


def test_host_reads_do_not_grow_with_the_items_of_a_batch(loaded, monkeypatch):
    """One copy back per batch, and the host reads inside a batch (transformers reads one value
    per forward pass) the same for 1 item as for 8: none is per item."""
    engine = engine_for(loaded, batch_size=8)
    copies = _count_copies(engine, monkeypatch)
    seqs = windows(8, 96, 60)
    counts = {}
    for n in (1, 8):
        for kind, normalization in (("token", "full_vocab"), ("bp", "dna_block")):
            with HostReads() as reads:
                engine.sequence_scores(seqs[:n], kind, normalization)
            counts[n, kind] = reads.total
    assert counts[1, "token"] == counts[8, "token"] <= 1
    assert counts[1, "bp"] == counts[8, "bp"] <= 1
    assert len(copies) == 4  # one per batch
    with HostReads() as reads:
        as_it_was.per_item_sequence_scores(engine, seqs, "token", "full_vocab")
    assert reads.total >= 8 + counts[8, "token"]  # the loop as it was: a read per item at least
    ref = seqs[0]
    with HostReads() as reads:
        window_groups_scores(engine, [(ref, [snv(ref, 50), snv(ref, 53)])], "bp", "dna_block")
    assert reads.total == 0 and len(copies) == 5  # a window group: one copy, nothing else


# ---- float32 output layer -----------------------------------------------------------------
@pytest.fixture(scope="module")
def bf16_loaded(demo_model_dir):
    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.model.loading import load_model

    return load_model(ModelSettings(str(demo_model_dir), trust_remote_code=True, dtype="bfloat16"))


@torch.inference_mode()
def test_upcast_output_layer_computes_the_head_in_float32(bf16_loaded):
    engine = engine_for(bf16_loaded, upcast_output_layer=True)
    plain = engine_for(bf16_loaded)
    ids = engine.vocab.encode(random_dna(96, 70))
    hidden = engine.hidden_states([ids])[0][0]
    weight = engine.out_weight.float()
    kmers = torch.as_tensor(engine.vocab.kmer_ids)
    expected = torch.log_softmax(hidden.float() @ weight[kmers].T, dim=-1)
    assert torch.allclose(engine.dna_log_probs(hidden, "dna_block"), expected, atol=1e-6, rtol=0)
    full = torch.log_softmax(hidden.float() @ weight.T, dim=-1)[:, kmers]
    assert torch.allclose(engine.dna_log_probs(hidden, "full_vocab"), full, atol=1e-5, rtol=0)
    rounded = plain.dna_log_probs(hidden, "dna_block")  # bf16 logits: rounded before the softmax
    assert not torch.equal(rounded, expected)
    assert torch.allclose(rounded, expected, atol=0.05, rtol=0)


def test_upcast_output_layer_reaches_generation_and_the_probe(demo_model_dir):
    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.model.loading import Float32OutputLayer, load_model
    from carbon_vep.model.probe import verify_output_layer

    spec = ModelSettings(
        str(demo_model_dir), trust_remote_code=True, dtype="bfloat16", upcast_output_layer=True
    )
    loaded = load_model(spec)
    head = loaded.model.get_output_embeddings()
    assert isinstance(head, Float32OutputLayer)
    assert head.weight is loaded.model.get_input_embeddings().weight  # still tied, still bf16
    assert head.weight.dtype == torch.bfloat16
    ids = torch.as_tensor(loaded.vocab.encode(random_dna(60, 80))[None, :])
    with torch.inference_mode():
        assert loaded.model(input_ids=ids).logits.dtype == torch.float32
    verify_output_layer(engine_for(loaded, upcast_output_layer=True), ids[0].numpy())
