"""The engine and recipes against the official scripts' way and plain full-vocabulary references.

benchmark/published.py restates what the official scripts do (vep_eval.py: batches of 2,
identical sequences once, full logits and a full-vocabulary log-softmax; clinvar_vep_eval.py:
one context per variant, batches of 4, the last position's full softmax summed by first base);
the helpers below are plain full-logits references. Our engine must agree within 1e-5.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import polars as pl
import pytest
import torch

from carbon_vep.benchmark import published
from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import RecipeSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.genome.windows import reverse_complement
from carbon_vep.model.engine import Engine
from carbon_vep.model.probe import verify_output_layer
from carbon_vep.scoring.shard import score_shard

KMERS = ["".join(p) for p in itertools.product("ACGT", repeat=6)]


def engine_for(loaded, batch_size=8, **kwargs) -> Engine:
    return Engine(loaded.model, loaded.vocab, loaded.device, batch_size=batch_size, **kwargs)


# ---- references (benchmark/published.py: the official scripts' way; full logits) ----
def full_log_probs(loaded, seq: str) -> tuple[torch.Tensor, torch.Tensor]:
    return published.full_log_probs(loaded.model, loaded.tokenizer, "<dna>", seq)


def naive_mean_ll(loaded, seq: str) -> float:
    return published.window_mean_ll(loaded.model, loaded.tokenizer, "<dna>", seq)


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
    return RECIPES[recipe].add_windows(frame, reference.lengths, window_bp)


def snvs_on(reference, chrom, positions):
    rows = []
    for pos in positions:
        ref = reference.fetch(chrom, pos - 1, pos)
        rows += [(chrom, pos, ref, alt) for alt in "ACGT" if alt != ref]
    return rows


def snvs(reference, positions):
    return snvs_on(reference, "chr17", positions)


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
    scores = score_shard(shard, reference, engine_for(loaded), RecipeSettings("centered"))
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
        shard, reference, engine_for(loaded), RecipeSettings("centered", rc_average=True)
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
    scores = score_shard(shard, reference, engine_for(loaded), RecipeSettings("nexttoken"))
    for row in scores.iter_rows(named=True):
        variant = ("chr17", row["pos"], row["ref"], row["alt"])
        (expected,) = published.nexttoken_scores(
            loaded.model, loaded.tokenizer, "<dna>", reference, [variant], 100
        )
        assert row["score"] == pytest.approx(expected, abs=1e-5)
        assert row["normalization"] == "acgt_strings"


def _forward_rows(model):
    """A forward hook recording the [batch, length] of every model call; the hook's handle."""
    calls = []
    handle = model.register_forward_hook(
        lambda m, args, kw, out: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True
    )
    return calls, handle


def test_centered_published_batches_dedupes_and_pads_as_the_script(loaded, reference):
    """vep_eval.py's way at its batch of 2: identical sequences once, a batch mixing a clipped
    window (contig start) with a whole one, padded; with and without --rev_comp_avg, equal to
    our engine."""
    rows = snvs(reference, [30])[:2] + snvs(reference, [5000])  # 3 + 4 unique sequences
    for rc in (False, True):
        shard = shard_of(reference, rows, "centered", 240)
        ours = score_shard(
            shard, reference, engine_for(loaded), RecipeSettings("centered", rc_average=rc)
        )
        calls, handle = _forward_rows(loaded.model)
        try:
            theirs = published.centered_scores(
                loaded.model, loaded.tokenizer, "<dna>", reference, rows, 240, rc_average=rc
            )
        finally:
            handle.remove()
        assert [c[0] for c in calls] == ([2, 2, 2, 1] if not rc else [2] * 7)
        assert len({c[1] for c in calls}) == 2  # the clipped and the whole windows' lengths
        assert np.allclose(ours["score"].to_numpy(), theirs, atol=1e-5)


def test_nexttoken_published_batches_of_four_with_padding(loaded, reference):
    """clinvar_vep_eval.py's way at its batch of 4: contexts of different lengths (one clipped
    at the contig start) padded in one batch, the last real position read; equal to ours."""
    rows = snvs(reference, [40]) + snvs(reference, [6000, 6001])  # 9 variants
    shard = shard_of(reference, rows, "nexttoken", 600)
    ours = score_shard(shard, reference, engine_for(loaded), RecipeSettings("nexttoken"))
    calls, handle = _forward_rows(loaded.model)
    try:
        theirs = published.nexttoken_scores(
            loaded.model, loaded.tokenizer, "<dna>", reference, rows, 600
        )
    finally:
        handle.remove()
    assert [c[0] for c in calls] == [4, 4, 1]  # one context a variant, none shared
    expected = dict(zip([(r[1], r[3]) for r in rows], theirs, strict=True))
    for row in ours.iter_rows(named=True):
        assert row["score"] == pytest.approx(expected[(row["pos"], row["alt"])], abs=1e-5)


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
    row = score_shard(shard, reference, engine_for(loaded), RecipeSettings("fns")).row(
        0, named=True
    )
    window = reference.fetch("chr17", 9000 - 1 - 24, 9000 - 1 + 24)
    assert row["ref_ll"] == pytest.approx(naive_bp_ll(loaded, window), abs=1e-5)


def test_batch_size_does_not_change_scores(loaded, reference):
    # windows of different lengths (clipped at the contig start) in one batch
    rows = snvs(reference, [30, 200, 5000]) + snvs(reference, [7000])
    shard = shard_of(reference, rows, "centered", 240)
    one = score_shard(
        shard, reference, engine_for(loaded, batch_size=1), RecipeSettings("centered")
    )
    eight = score_shard(
        shard, reference, engine_for(loaded, batch_size=8), RecipeSettings("centered")
    )
    assert np.allclose(one["score"].to_numpy(), eight["score"].to_numpy(), atol=1e-5)
    shard = shard_of(reference, rows, "nexttoken", 600)
    one = score_shard(
        shard, reference, engine_for(loaded, batch_size=1), RecipeSettings("nexttoken")
    )
    eight = score_shard(
        shard, reference, engine_for(loaded, batch_size=8), RecipeSettings("nexttoken")
    )
    assert np.allclose(one["score"].to_numpy(), eight["score"].to_numpy(), atol=1e-5)


def test_chunked_normaliser_equals_unchunked(loaded):
    engine = engine_for(loaded, vocab_chunk=1000, position_chunk=7, cpu_tile=(5, 1000))
    ids = loaded.vocab.encode("ACGTACGGATCCATGCAT" * 4)
    ours = published.token_log_likelihoods(engine, [ids], "full_vocab")[0]
    log_probs, tok_ids = full_log_probs(loaded, "ACGTACGGATCCATGCAT" * 4)
    expected = log_probs[:-1].gather(-1, tok_ids[1:, None])[:, 0].numpy()
    assert np.allclose(ours, expected, atol=1e-5)


@pytest.mark.parametrize("head", ["float32", "float32 with a bias", "float64 (not in place)"])
def test_cpu_normaliser_tiles_equal_one_logsumexp(loaded, head):
    """The CPU's tiled normaliser, tiles cut with remainders both ways (73 rows in tiles of 7,
    155,776 entries in tiles of 1,000), against one log-sum-exp over full logits: a tile edge
    off by one, a dropped last tile or a bias added to the wrong entries moves it by > 1e-3."""
    engine = engine_for(loaded, cpu_tile=(7, 1000))
    weight = engine.out_weight.double()
    bias = torch.zeros(weight.shape[0], dtype=torch.float64)
    if "bias" in head:
        bias = torch.randn(weight.shape[0], generator=torch.Generator().manual_seed(0)) * 3
        engine.out_bias = bias.float()
        bias = engine.out_bias.double()
    if "float64" in head:
        engine.head_dtype = torch.float64
    hidden = engine.hidden_states([loaded.vocab.encode("ACGTACGGATCCATGCAT" * 24)])[0][0]
    assert hidden.shape[0] == 73
    expected = torch.logsumexp(hidden.double() @ weight.T + bias, dim=-1)
    threads = torch.get_num_threads()
    ours = engine.full_logsumexp(hidden)  # 11 row tiles: one thread each of torch's threads
    assert torch.get_num_threads() == threads  # restored after the call
    assert torch.allclose(ours.double(), expected, atol=1e-5, rtol=0)
    alone = torch.cat([engine.full_logsumexp(hidden[i : i + 1]) for i in (0, 40, 72)])
    assert torch.allclose(alone, ours[[0, 40, 72]], atol=1e-6, rtol=0)  # other rows: no effect


def test_variant_in_trimmed_tail_is_skipped_not_dropped(loaded, reference):
    last = reference.lengths["chr17"]
    shard = shard_of(reference, snvs(reference, [last]), "centered", 64)
    scores = score_shard(shard, reference, engine_for(loaded), RecipeSettings("centered"))
    assert scores.height == 3
    assert set(scores["score_status"]) == {"contig_end"}
    assert scores["score"].is_null().all()


def test_prefix_sharing_equals_separate_windows(loaded, reference):
    rows = snvs(reference, [5000, 5007])
    for recipe_name in ("centered", "fns"):
        shard = shard_of(reference, rows, recipe_name, 240)
        engine = engine_for(loaded)
        shared = score_shard(shard, reference, engine, RecipeSettings(recipe_name, rc_average=True))
        separate = score_shard(
            shard,
            reference,
            engine,
            RecipeSettings(recipe_name, rc_average=True, share_prefix=False),
        )
        for column in ("ref_ll", "alt_ll", "delta", "delta_rc", "score"):
            assert np.allclose(shared[column].to_numpy(), separate[column].to_numpy(), atol=1e-5)


def test_block_normalised_centered_differs_from_full_vocab(loaded, reference):
    shard = shard_of(reference, snvs(reference, [5000])[:1], "centered", 120)
    engine = engine_for(loaded)
    full = score_shard(shard, reference, engine, RecipeSettings("centered")).row(0, named=True)
    block = score_shard(shard, reference, engine, RecipeSettings("centered", "dna_block")).row(
        0, named=True
    )
    # the block normaliser drops the model's mass on non-DNA tokens: log-probs are higher
    assert block["ref_ll"] > full["ref_ll"] and block["normalization"] == "dna_block"


def test_window_with_n_is_scored_and_counted(loaded, tmp_path):
    from support.files import random_dna, write_fasta

    seq = random_dna(600, 5)
    seq = seq[:200] + "N" * 12 + seq[212:]
    path = write_fasta(tmp_path / "n.fa", {"chrN": seq})
    with open_reference(path) as ref:
        shard = shard_of(
            ref, [("chrN", 300, seq[299], "A" if seq[299] != "A" else "C")], "centered", 240
        )
        row = score_shard(shard, ref, engine_for(loaded), RecipeSettings("centered")).row(
            0, named=True
        )
    assert row["score_status"] == "scored" and row["window_non_acgt"] == 12
    assert np.isfinite(row["score"])


def test_out_of_memory_marks_the_item_not_the_shard(loaded, reference, monkeypatch):
    engine = engine_for(loaded, batch_size=4)
    shard = shard_of(reference, snvs(reference, [6000, 6100]), "nexttoken", 60)
    original = engine.last_hidden_states  # what the right-end contexts run through
    poisoned = engine.vocab.encode(reference.fetch("chr17", 6099 - 60, 6099)).tolist()

    def flaky(batch):
        if any(list(ids) == poisoned for ids in batch):
            raise torch.OutOfMemoryError("simulated")
        return original(batch)

    monkeypatch.setattr(engine, "last_hidden_states", flaky)
    scores = score_shard(shard, reference, engine, RecipeSettings("nexttoken"))
    status = dict(zip(scores["pos"].to_list(), scores["score_status"].to_list(), strict=False))
    assert status == {6000: "scored", 6100: "failed"}
    assert scores.filter(pl.col("pos") == 6100)["score_reason"][0].startswith("out of memory")


def test_encode_adds_exactly_one_prefix(loaded):
    ids = loaded.vocab.encode("ACGTAC" * 3)
    assert ids[0] == loaded.vocab.prefix_id and list(ids).count(loaded.vocab.prefix_id) == 1
    with pytest.raises(ValueError, match="multiple of k"):
        loaded.vocab.encode("ACGTA")


class _WrongKmerMap:
    """A tokenizer whose advertised k-mer map assumes alphabetical (ACGT) order."""

    def __init__(self, tok):
        self._tok = tok
        self.dna_token_to_id = {k: tok.first_kmer_id + i for i, k in enumerate(sorted(KMERS))}

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def __call__(self, *args, **kwargs):
        return self._tok(*args, **kwargs)

    def __len__(self):
        return len(self._tok)


def test_self_check_catches_a_wrong_kmer_map(loaded):
    from carbon_vep.errors import TokenizerMismatchError
    from carbon_vep.model.tokens import dna_vocab

    with pytest.raises(TokenizerMismatchError, match="k-mer order"):
        dna_vocab(_WrongKmerMap(loaded.tokenizer))


def test_window_longer_than_model_context_is_refused(loaded, tmp_path):
    from support.files import random_dna, write_fasta

    from carbon_vep.errors import ContextTooLongError

    limit = loaded.model.config.max_position_embeddings  # 8,192 tokens for the demo model
    path = write_fasta(tmp_path / "long.fa", {"chrL": random_dna(6 * limit + 600, 3)})
    with open_reference(path) as ref:
        shard = shard_of(ref, snvs_on(ref, "chrL", [6 * limit + 300])[:1], "nexttoken", 6 * limit)
        with pytest.raises(ContextTooLongError, match=f"supports {limit:,}.*`--window-bp`"):
            score_shard(shard, ref, engine_for(loaded), RecipeSettings("nexttoken"))


def test_the_engine_and_the_plan_refuse_a_tile_alike(loaded, tmp_path):
    """One definition of the usable context (model.context): the engine's refusal of the loaded
    model and the plan's from a local config.json say the same, bar where the positions were
    read; a tile of the usable context passes both."""
    from carbon_vep.config.stages import TileSettings
    from carbon_vep.errors import ContextTooLongError
    from carbon_vep.model.context import usable_bp
    from carbon_vep.scan.plan import check_tile_context

    limit = loaded.model.config.max_position_embeddings
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": limit}))
    engine, fits = engine_for(loaded), usable_bp(limit, 6)
    engine.check_window_bp(fits, "scan tiles", "tile_bp")
    assert check_tile_context(TileSettings(fits, 24_000), {"m": str(folder)}) == []
    with pytest.raises(ContextTooLongError) as at_load:
        engine.check_window_bp(fits + 6, "scan tiles", "tile_bp")
    with pytest.raises(ContextTooLongError) as at_plan:
        check_tile_context(TileSettings(fits + 6, 24_000), {"m": str(folder)})
    loaded_text, planned_text = str(at_load.value), str(at_plan.value)
    assert "of its loaded config" in loaded_text and f"model m ({folder};" in planned_text

    def without_the_model(text):
        return re.sub(r" but model .* supports ", " but MODEL supports ", text)

    assert without_the_model(loaded_text) == without_the_model(planned_text)
    assert f"lower `--tile-bp` to at most {fits:,}" in loaded_text


class _NoKmerAttribute(_WrongKmerMap):
    """The demo tokenizer without `dna_token_to_id`: the map must come from dna_config.json."""

    def __init__(self, tok):
        self._tok = tok

    def __getattr__(self, name):
        if name == "dna_token_to_id":
            raise AttributeError(name)
        return getattr(self._tok, name)


def test_kmer_map_from_dna_config_json(loaded):
    from carbon_vep.model.tokens import dna_vocab

    vocab = dna_vocab(_NoKmerAttribute(loaded.tokenizer))
    assert np.array_equal(vocab.kmer_ids, loaded.vocab.kmer_ids)
