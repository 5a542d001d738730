import polars as pl
import pytest

from carbon_vep.check import CheckPolicy, check_panel, summarize
from carbon_vep.errors import PanelUnusableError
from carbon_vep.reference import Reference, resolve_contigs


def _panel(rows):
    frame = pl.DataFrame(rows, schema=["chrom", "pos", "ref", "alt"], orient="row")
    return frame.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.format("panel.tsv:line {}", pl.int_range(pl.len()) + 2).alias("source"),
    )


def test_resolve_contigs_aliases():
    mapping = resolve_contigs(["1", "X", "MT", "chr2", "weird"], ["chr1", "chrX", "chrM", "chr2"])
    assert mapping == {"1": "chr1", "X": "chrX", "MT": "chrM", "chr2": "chr2"}


def test_reference_upper_cases_soft_masked(genome):
    path, contigs = genome
    with Reference(path) as ref:
        assert ref.fetch("chr1", 1000, 1010) == contigs["chr1"][1000:1010].upper()
        assert ref.fetch("chr1", -5, 3) == contigs["chr1"][:3]  # clipped, no IndexError


def test_every_row_gets_a_status(genome):
    path, contigs = genome
    c1 = contigs["chr1"]
    good = [
        ("1", p, c1[p - 1].upper(), "ACGT".replace(c1[p - 1].upper(), "")[0])
        for p in range(200, 230)
    ]
    bad = [
        ("1", 300, *[b for b in "ACGT" if b != c1[299].upper()][:2]),  # ref mismatch
        ("1", 301, c1[300].upper(), "<DEL>"),
        ("1", 302, c1[301].upper(), "*"),
        ("1", 303, c1[302].upper(), "N"),
        ("1", 304, c1[303].upper(), c1[303].upper() + "AAA"),
        ("1", 5000, "A", "C"),  # beyond contig end
        ("chr9", 10, "A", "C"),  # unknown contig
        ("1", 1100, c1[1099].upper(), "A" if c1[1099].upper() != "A" else "C"),  # soft-masked
    ]
    checked = check_panel(_panel(good + bad), Reference(path))
    assert checked.height == len(good) + len(bad)
    statuses = checked["status"].to_list()
    assert statuses[: len(good)] == ["ok"] * len(good)
    assert statuses[len(good) :] == [
        "ref_mismatch", "skipped", "skipped", "skipped", "skipped",
        "out_of_bounds", "unknown_contig", "ok",
    ]  # fmt: skip
    assert "non-ACGT" in checked["reason"][len(good) + 3]
    summary = summarize(checked, "panel.tsv")
    assert sum(summary["status_counts"].values()) == checked.height
    assert summary["contig_aliases"] == {"1": "chr1"}


def test_wrong_build_aborts_before_scoring(genome):
    path, contigs = genome
    other = contigs["chr2"]  # REF alleles from another sequence: concordance near chance
    rows = [("chr1", p, other[p].upper(), "A") for p in range(100, 160)]
    with pytest.raises(PanelUnusableError, match=r"REF matches \d+% .*builds differ"):
        check_panel(_panel(rows), Reference(path))


def test_zero_based_positions_detected(genome):
    path, contigs = genome
    c1 = contigs["chr1"]
    rows = [
        ("chr1", p, c1[p].upper(), "ACGT".replace(c1[p].upper(), "")[0]) for p in range(100, 160)
    ]
    with pytest.raises(PanelUnusableError, match=r"0-based.*add 1 to POS"):
        check_panel(_panel(rows), Reference(path))


def test_single_mismatch_does_not_abort(genome):
    path, contigs = genome
    c1 = contigs["chr1"]
    rows = [
        ("chr1", p, c1[p - 1].upper(), "ACGT".replace(c1[p - 1].upper(), "")[0])
        for p in range(100, 140)
    ]
    rows.append(("chr1", 141, "ACGT".replace(c1[140].upper(), "")[0], "A"))
    checked = check_panel(_panel(rows), Reference(path), CheckPolicy(min_ref_concordance=0.9))
    assert checked["status"].to_list().count("ref_mismatch") == 1


def test_no_matching_contig_names_both_spellings(genome):
    path, _ = genome
    with pytest.raises(PanelUnusableError, match=r"panel uses \['scaffold_1'\].*reference has"):
        check_panel(_panel([("scaffold_1", 10, "A", "C")]), Reference(path))
