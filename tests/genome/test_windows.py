import polars as pl
import pytest

from carbon_vep.config.recipes import RECIPES
from carbon_vep.genome.windows import (
    UNIQUE_VARIANT_INPUT,
    assign_shards,
    centered_window,
    kmer_usable_length,
    prepare_right_context,
    rc_index,
    reverse_complement,
    right_end_window,
    stream_shards,
    substitute,
    unique_variants,
)


def test_centered_window_puts_variant_at_flank_index():
    w = centered_window(pos=10_000, contig_length=50_000, window_bp=8192)
    assert (w.start, w.end, w.variant_index) == (9_999 - 4096, 9_999 + 4096, 4096)
    assert w.length == 8192


def test_centered_window_clipped_at_contig_start_keeps_variant_at_p():
    w = centered_window(pos=50, contig_length=50_000, window_bp=8192)
    assert (w.start, w.variant_index) == (0, 49)
    assert w.end == 49 + 4096


def test_centered_window_clipped_at_contig_end():
    w = centered_window(pos=3_000, contig_length=3_000, window_bp=8192)
    assert w.end == 3_000 and w.start == 0 and w.variant_index == 2_999


def test_kmer_usable_length_trims_right_end():
    assert kmer_usable_length(8192) == 8190
    assert kmer_usable_length(8190) == 8190
    assert kmer_usable_length(5) == 0


def test_right_end_context_is_strictly_before_the_variant():
    w = right_end_window(pos=30_001, contig_length=50_000, window_bp=24_000)
    assert (w.start, w.end) == (6_000, 30_000)
    assert w.end == 30_001 - 1  # 0-based index of the variant base: the context stops before it
    assert w.variant_index == w.length


def test_prepare_right_context_strips_leading_n_and_trims_from_left():
    assert prepare_right_context("NNNACGTACGTA") == "ACGTACGTA"[3:]
    out = prepare_right_context("NN" + "C" + "ACGTAC" * 2)
    assert out == "ACGTAC" * 2 and len(out) % 6 == 0


def test_reverse_complement_index_of_even_window():
    window = "AAAACGTTTT"  # 10 bp, variant at 4 ("C")
    rc = reverse_complement(window)
    assert rc == "AAAACGTTTT"[::-1].translate(str.maketrans("ACGT", "TGCA"))
    assert rc[rc_index(len(window), 4)] == "G"
    assert rc_index(8192, 4096) == 4095


def test_substitute_checks_ref():
    assert substitute("ACGT", 1, "C", "T") == "ATGT"
    with pytest.raises(ValueError, match="expected REF"):
        substitute("ACGT", 1, "G", "T")


def _variants(rows):
    return pl.DataFrame(rows, schema=["ref_chrom", "pos", "ref", "alt"], orient="row")


def test_assign_shards_keeps_sites_together_and_is_deterministic():
    rows = [("chr1", p, "A", alt) for p in (5, 1, 9) for alt in "CGT"] + [("chr2", 3, "A", "C")]
    variants = _variants(rows)
    a = assign_shards(variants, shard_size=2)
    b = assign_shards(variants.sample(fraction=1.0, shuffle=True, seed=3), shard_size=2)
    assert a.equals(b)
    per_site = a.group_by("ref_chrom", "pos").agg(pl.col("shard").n_unique())
    assert per_site["shard"].max() == 1
    assert a.height == variants.height


def test_add_windows_uses_recipe():
    variants = _variants([("chr1", 100, "A", "C")])
    centered = RECIPES["centered"].add_windows(variants, {"chr1": 1000}, 64)
    assert centered.row(0, named=True)["window_start"] == 99 - 32
    nexttoken = RECIPES["nexttoken"].add_windows(variants, {"chr1": 1000}, 60)
    assert nexttoken.row(0, named=True)["window_end"] == 99


def test_add_windows_cuts_every_row_with_the_recipe_window():
    variants = _variants([("chr1", 100, "A", "C"), ("chr2", 7, "A", "C"), ("chr1", 950, "G", "T")])
    lengths = {"chr1": 1000, "chr2": 50}
    out = RECIPES["centered"].add_windows(variants, lengths, 64)
    expected = [
        centered_window(pos, lengths[c], 64)
        for c, pos in variants.select("ref_chrom", "pos").iter_rows()
    ]
    got = out.select("window_start", "window_end", "variant_index").rows()
    assert got == [(w.start, w.end, w.variant_index) for w in expected]
    assert out.schema["window_start"] == pl.Int64


def test_stream_shards_gives_assign_shards_shards_whatever_the_batches():
    """Every cut of the sorted variants into batches (a site's alleles across a cut, a shard
    across several batches, empty batches): the shards of `assign_shards`, in order."""
    rows = [("chr1", p, "A", alt) for p in (5, 1, 9, 12) for alt in "CGT"] + [("chr2", 3, "A", "C")]
    rows += [("chr10", 7, "A", "C"), ("chr10", 7, "A", "G")]
    variants = _variants(rows).sort("ref_chrom", "pos", "ref", "alt")
    for shard_size in (1, 2, 4, 100):
        sharded = assign_shards(variants, shard_size)
        expected = sharded.partition_by("shard", maintain_order=True, include_key=False)
        for size in range(1, variants.height + 1):
            batches = [variants.slice(start, size) for start in range(0, variants.height, size)]
            batches.insert(1, variants.clear())
            shards = list(stream_shards(batches, shard_size))
            assert len(shards) == len(expected), (shard_size, size)
            assert all(a.equals(b) for a, b in zip(shards, expected, strict=True))
    empty = list(stream_shards([variants.clear(), variants.clear()], 3))
    assert len(empty) == 1 and empty[0].height == 0 and empty[0].columns == variants.columns
    with pytest.raises(ValueError, match="shard_size"):
        next(stream_shards([variants], 0))


def test_unique_variants_is_unique_then_sort():
    """Duplicates adjacent or not, a key with nulls sorted first: the rows `unique().sort()`
    gives (dropping a duplicate once sorted, not by a hash table)."""
    rows = [("chr1", 5, "A", "C"), (None, None, None, None), ("chr1", 5, "A", "C")]
    rows += [("chr1", 5, "A", None), ("chr1", 2, "A", "G"), (None, None, None, None)]
    rows += [("chr1", 5, "A", None), ("chr1", 5, "AT", "C"), ("chr1", 2, "A", "G")]
    checked = _variants(rows).with_columns(status=pl.lit("ok"))
    expected = checked.select("ref_chrom", "pos", "ref", "alt").unique()
    expected = expected.sort("ref_chrom", "pos", "ref", "alt")
    assert unique_variants(checked).equals(expected) and expected.height == 5


def test_unique_variants_needs_only_the_columns_make_shards_reads():
    checked = _variants([("chr1", 5, "A", "C"), ("chr1", 5, "A", "C"), ("chr1", 2, "A", "G")])
    checked = checked.with_columns(
        status=pl.Series(["ok", "ok", "ref_mismatch"]), source=pl.lit("panel.vcf:line 1")
    )
    narrow = unique_variants(checked.select(UNIQUE_VARIANT_INPUT))
    assert narrow.equals(unique_variants(checked))
    assert narrow.rows() == [("chr1", 5, "A", "C")]
