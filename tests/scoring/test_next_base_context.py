"""The right-end recipe refuses a variant with no left context: at its contig's start, or right
after an N gap, the model would see its prefix token alone and the score would depend on REF
and ALT alone. Such a row says so (`no_context`) with the N it skipped; the rest are scored."""

from __future__ import annotations

import polars as pl
from support.files import random_dna, write_fasta

from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.stages import RecipeSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.model.engine import Engine
from carbon_vep.scoring.shard import score_shard


def _score(loaded, fasta, positions: list[int], window_bp: int) -> pl.DataFrame:
    with open_reference(fasta) as reference:
        rows = []
        for pos in positions:
            ref = reference.fetch("chr1", pos - 1, pos)
            rows.append(("chr1", pos, ref, next(b for b in "ACGT" if b != ref)))
        frame = pl.DataFrame(rows, schema=["ref_chrom", "pos", "ref", "alt"], orient="row")
        shard = RECIPES["nexttoken"].add_windows(frame, reference.lengths, window_bp)
        engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)
        return score_shard(shard, reference, engine, RecipeSettings("nexttoken"))


def test_variants_at_the_contig_start_are_not_scored(loaded, tmp_path):
    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_dna(600, 3)})
    scored = _score(loaded, fasta, [1, 2, 6, 7, 300], 240)
    assert scored["pos"].to_list() == [1, 2, 6, 7, 300]  # every key back once, in order
    assert scored["score_status"].to_list() == ["no_context"] * 3 + ["scored"] * 2
    unscored = scored.filter(pl.col("score_status") == "no_context")
    assert unscored["score"].null_count() == 3
    assert unscored["window_bp"].to_list() == [0, 1, 5]
    assert all("contig start" in r for r in unscored["score_reason"])
    assert scored["window_bp"].to_list()[3:] == [6, 240]


def test_a_variant_right_after_an_n_gap_keeps_its_n_count(loaded, tmp_path):
    seq = random_dna(600, 4)
    fasta = write_fasta(tmp_path / "g.fa", {"chr1": seq[:200] + "N" * 100 + seq[300:]})
    scored = _score(loaded, fasta, [301, 304, 400], 60)
    assert scored["score_status"].to_list() == ["no_context", "no_context", "scored"]
    assert scored["window_non_acgt"].to_list() == [60, 57, 0]  # the N are counted, not lost
    assert "N gap (60 N)" in scored["score_reason"][0]


def test_a_shard_with_no_context_at_all_needs_no_forward_pass(loaded, tmp_path):
    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_dna(600, 5)})
    scored = _score(loaded, fasta, [1, 3], 60)
    assert scored["score_status"].to_list() == ["no_context", "no_context"]
