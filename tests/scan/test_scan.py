"""Scan mode: tiling, agreement with the per-variant next-token recipe, exact conditionals."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
import torch

from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import RecipeSettings, TileSettings
from carbon_vep.model.engine import Engine
from carbon_vep.scan.tiles import scan_region, snv_scores
from carbon_vep.scan.tiling import parse_region, tile_region, tiles_for_positions
from carbon_vep.scoring.shard import score_shard

ATCG = ["".join(p) for p in itertools.product("ATCG", repeat=6)]


@pytest.fixture(scope="module")
def engine(loaded):
    return Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)


@pytest.mark.parametrize(
    ("length", "start", "end", "window", "context"),
    [
        (10_000, 0, 10_000, 600, 240),
        (10_000, 3_001, 7_777, 300, 100),
        (1_003, 0, 1_003, 120, 60),
        (100, 0, 100, 600, 240),  # a contig shorter than one tile: last 4 bases fit no 6-mer
    ],
)
def test_tiles_cover_each_base_once_with_enough_context(length, start, end, window, context):
    tiles = tile_region(length, start, end, window, context)
    covered = [p for t in tiles for p in range(t.score_start, t.score_end)]
    uncovered = sorted(set(range(start, end)) - set(covered))
    assert len(covered) == len(set(covered))  # no base twice
    assert uncovered == [p for p in range(length - length % 6, end)][: len(uncovered)]
    assert len(uncovered) <= 5  # only the tail of a contig that ends mid-6-mer
    for t in tiles:
        assert (t.end - t.start) % 6 == 0 and t.start >= 0 and t.end <= length
        assert t.end - t.start <= window
        assert t.score_start - t.start >= min(context, t.score_start)


def test_tiles_for_sparse_positions_cover_them():
    positions = [5_000, 5_010, 9_000, 20_000]
    tiles = tiles_for_positions(positions, 30_000, 600, 240)
    for pos in positions:
        assert any(t.score_start <= pos < t.score_end for t in tiles)
    assert len(tiles) == 3  # 5,000 and 5,010 share a tile


def test_a_positions_tile_does_not_depend_on_the_other_positions():
    """The scan recipe scores a variant from the tile that covers it: the same tile whatever
    else is in its shard, or the score (and a dataset's AUROC) would move with shard_size."""
    rng = np.random.default_rng(3)
    length = 30_000
    positions = sorted(rng.choice(length, 60, replace=False).tolist()) + [0, length - 1]
    together = tiles_for_positions(positions, length, 600, 240)
    for pos in positions:
        covering = [t for t in together if t.score_start <= pos < t.score_end]
        alone = [
            t
            for t in tiles_for_positions([pos], length, 600, 240)
            if t.score_start <= pos < t.score_end
        ]
        assert covering == alone, pos
    halves = tiles_for_positions(positions[::2], length, 600, 240) + tiles_for_positions(
        positions[1::2], length, 600, 240
    )
    assert set(together) == set(halves)


def test_parse_region_is_one_based_inclusive():
    assert parse_region("chr1:1,001-2,000") == ("chr1", 1000, 2000)
    with pytest.raises(ValueError):
        parse_region("chr1:0-10")


def test_scan_agrees_with_nexttoken_at_phase_zero(engine, reference):
    positions = scan_region(engine, reference, "chr17", 2_000, 2_300, TileSettings(300, 120))
    phase0 = positions.filter(pl.col("phase") == 0)
    assert phase0.height > 10
    for row in phase0.head(12).iter_rows(named=True):
        context = reference.fetch("chr17", row["pos"] - 1 - row["context_bp"], row["pos"] - 1)
        assert len(context) % 6 == 0 and row["context_bp"] >= 120
        lp = engine.next_base_log_probs([engine.vocab.encode(context)], "dna_block")[0]
        expected = np.exp(lp)[[0, 2, 3, 1]]  # ATCG -> ACGT
        got = [row[f"fns_{b}"] for b in "ACGT"]
        assert got == pytest.approx(expected, abs=1e-6)
        assert [row[f"cond_{b}"] for b in "ACGT"] == pytest.approx(expected, abs=1e-6)


def test_conditionals_multiply_to_token_probability(engine, reference, loaded):
    seq = reference.fetch("chr17", 3_000, 3_060)
    ids = loaded.tokenizer("<dna>" + seq, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = loaded.model(ids).logits[0, :-1].float()
    dna_ids = [loaded.tokenizer.dna_token_to_id[k] for k in ATCG]
    block = torch.log_softmax(logits[:, dna_ids], dim=-1)  # [10 tokens, 4096]
    positions = scan_region(engine, reference, "chr17", 3_000, 3_060, TileSettings(60, 0))
    cond = positions.select([f"cond_{b}" for b in "ACGT"]).to_numpy()
    fns = positions.select([f"fns_{b}" for b in "ACGT"]).to_numpy()
    column = {b: i for i, b in enumerate("ACGT")}
    for t in range(10):
        token = seq[6 * t : 6 * t + 6]
        p_token = block[t, ATCG.index(token)].exp().item()
        product = np.prod([cond[6 * t + j, column[b]] for j, b in enumerate(token)])
        assert product == pytest.approx(p_token, rel=1e-4)
        # FNS marginal of base j: sum of the block over 6-mers with that base at j
        for j, b in enumerate(token):
            mask = [k[j] == b for k in ATCG]
            assert fns[6 * t + j, column[b]] == pytest.approx(
                block[t, mask].exp().sum().item(), abs=1e-6
            )


def test_snv_scores_three_per_base_and_orientation(engine, reference):
    positions = scan_region(engine, reference, "chr17", 2_000, 2_030, TileSettings(120, 60))
    snvs = snv_scores(positions)
    assert snvs.height == 3 * positions.height
    row = snvs.row(0, named=True)
    assert row["score"] == pytest.approx(np.log(row["p_ref"]) - np.log(row["p_alt"]), abs=1e-5)


def test_scan_recipe_looks_up_panel_variants(engine, reference):
    last = reference.lengths["chr17"]
    rows = [
        ("chr17", 2_010, reference.fetch("chr17", 2_009, 2_010), "A"),
        ("chr17", last, reference.fetch("chr17", last - 1, last), "A"),
    ]
    rows = [r if r[2] != "A" else (*r[:3], "C") for r in rows]
    shard = RECIPES["scan"].add_windows(
        pl.DataFrame(rows, schema=["ref_chrom", "pos", "ref", "alt"], orient="row"),
        reference.lengths,
        60,
    )
    recipe = RecipeSettings("scan", tiles=TileSettings(120, 60))
    scores = score_shard(shard, reference, engine, recipe)
    # the contig's last base is scored too: its tile slides left to end on the contig end
    assert scores["score_status"].to_list() == ["scored", "scored"]
    assert scores["window_bp"][1] >= 60
    # the same as a region scan of the variant's grid cell (stride 120 - 60): the same tile
    cell = 2_009 // 60 * 60
    positions = scan_region(engine, reference, "chr17", cell, cell + 60, TileSettings(120, 60))
    at_variant = snv_scores(positions).filter(pl.col("pos") == 2_010)
    expected = at_variant.filter(pl.col("alt") == rows[0][3])["score"][0]
    assert scores["score"][0] == pytest.approx(expected, abs=1e-6)
    assert scores["normalization"][0] == "dna_block"


def test_chunk_batches_hold_tiles_of_one_length_only(engine, reference):
    """A scan batches consecutive tiles of equal length: no padding, order kept."""
    from carbon_vep.progress import Progress
    from carbon_vep.scan.tiles import _new_timing, _scored_batches
    from carbon_vep.scan.tiling import Tile

    cut = [
        ("chr17", Tile(s, s + n, s + n - 12, s + n))
        for s, n in [(0, 60), (60, 60), (120, 120), (240, 120), (360, 60), (420, 120)]
    ]
    batches = list(
        _scored_batches(
            engine, reference, cut, Progress(72, "bases", "test"), _new_timing(), log=True
        )
    )
    lengths = [[t.end - t.start for _, t, _ in batch.tiles] for batch in batches]
    assert lengths == [[60, 60], [120, 120], [60], [120]]
    assert [(chrom, t) for batch in batches for chrom, t, _ in batch.tiles] == cut
