import re

import polars as pl
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.config.stages import LabelSettings, PanelSettings
from carbon_vep.errors import PanelUnusableError
from carbon_vep.genome.contigs import resolve_contigs
from carbon_vep.genome.reference import open_reference
from carbon_vep.variants.alleles import classify, trim_alleles
from carbon_vep.variants.check import check_panel
from carbon_vep.variants.genome_match import contig_length_mismatches
from carbon_vep.variants.ingest import ingest_panel
from carbon_vep.variants.policy import CheckPolicy
from carbon_vep.variants.summary import summarize


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
    with open_reference(path) as ref:
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
    checked = check_panel(_panel(good + bad), open_reference(path))
    assert checked.height == len(good) + len(bad)
    statuses = checked["status"].to_list()
    assert statuses[: len(good)] == ["ok"] * len(good)
    assert statuses[len(good) :] == [
        "ref_mismatch",
        "skipped",
        "skipped",
        "skipped",
        "skipped",
        "out_of_bounds",
        "unknown_contig",
        "ok",
    ]
    assert "non-ACGT" in checked["reason"][len(good) + 3]
    summary = summarize(checked, "panel.tsv")
    assert sum(summary["status_counts"].values()) == checked.height
    assert summary["contig_aliases"] == {"1": "chr1"}


def test_wrong_build_aborts_before_scoring(genome):
    path, contigs = genome
    other = contigs["chr2"]  # REF alleles from another sequence: concordance near chance
    rows = [("chr1", p, other[p].upper(), "A") for p in range(100, 160)]
    with pytest.raises(PanelUnusableError, match=r"REF matches \d+% .*builds differ"):
        check_panel(_panel(rows), open_reference(path))


def test_zero_based_positions_detected(genome):
    path, contigs = genome
    c1 = contigs["chr1"]
    rows = [
        ("chr1", p, c1[p].upper(), "ACGT".replace(c1[p].upper(), "")[0]) for p in range(100, 160)
    ]
    with pytest.raises(PanelUnusableError, match=r"0-based.*add 1 to POS"):
        check_panel(_panel(rows), open_reference(path))


def test_single_mismatch_does_not_abort(genome):
    path, contigs = genome
    c1 = contigs["chr1"]
    rows = [
        ("chr1", p, c1[p - 1].upper(), "ACGT".replace(c1[p - 1].upper(), "")[0])
        for p in range(100, 140)
    ]
    rows.append(("chr1", 141, "ACGT".replace(c1[140].upper(), "")[0], "A"))
    checked = check_panel(_panel(rows), open_reference(path), CheckPolicy(min_ref_concordance=0.9))
    assert checked["status"].to_list().count("ref_mismatch") == 1


def test_small_zero_based_panel_aborts(genome):
    """15 SNVs written at POS-1: fewer than min_rows_for_concordance, yet every REF matches at
    POS+1 (the check used to be skipped, and the 6 rows matching by chance were scored)."""
    path, contigs = genome
    rows = _snv_rows(contigs["chr1"].upper(), "chr1", range(101, 401, 20))
    shifted = [(chrom, pos - 1, ref, alt) for chrom, pos, ref, alt in rows]
    with pytest.raises(PanelUnusableError, match=r"of 15 rows.*0-based.*add 1 to POS"):
        check_panel(_panel(shifted), open_reference(path))


def test_small_wrong_build_panel_aborts(genome):
    path, contigs = genome
    rows = _snv_rows(contigs["chr2"].upper(), "chr1", range(101, 401, 20))  # another sequence
    with pytest.raises(PanelUnusableError, match=r"REF matches \d+% of 15 rows.*builds differ"):
        check_panel(_panel(rows), open_reference(path))


@pytest.mark.parametrize(
    ("n_good", "n_bad", "note"),
    [(8, 2, r"REF matches 80% of only 10 .*too few \(under 20\)"), (3, 0, r"only 3 row\(s\)")],
    ids=["some-mismatch", "tiny"],
)
def test_small_inconclusive_panel_goes_on_with_a_note(tmp_path, genome, n_good, n_bad, note):
    path, contigs = genome
    c1 = contigs["chr1"].upper()
    rows = _snv_rows(c1, "chr1", range(101, 101 + 20 * n_good, 20))
    rows += [("chr1", p, "ACGT".replace(c1[p - 1], "")[0], c1[p - 1]) for p in (1500, 1600)][:n_bad]
    table = tmp_path / "panel.tsv"
    pl.DataFrame(rows, schema=["chrom", "pos", "ref", "alt"], orient="row").write_csv(
        table, separator="\t"
    )
    with open_reference(path) as ref:
        _, summary = ingest_panel(table, ref, PanelSettings("hg19"))
    assert summary["status_counts"] == {"ok": n_good, **({"ref_mismatch": n_bad} if n_bad else {})}
    assert [n for n in summary["notes"] if re.search(note, n)]


def test_no_matching_contig_names_both_spellings(genome):
    path, _ = genome
    with pytest.raises(PanelUnusableError, match=r"panel uses \['scaffold_1'\].*reference has"):
        check_panel(_panel([("scaffold_1", 10, "A", "C")]), open_reference(path))


@pytest.mark.parametrize("spellings", [["chr1", "Chr1"], ["Chr1"]], ids=["mixed", "only"])
def test_contig_matching_two_reference_spellings_stops(tmp_path, spellings):
    """A FASTA that holds one chromosome under two spellings: a panel contig that is neither
    but aliases to both stops the run naming it and both (it once got unknown_contig per row,
    or a "no contig matches" listing the first reference contigs)."""
    seq = random_dna(1000, 3)
    path = write_fasta(tmp_path / "both.fa", {"chr1": seq, "1": seq, "chr2": seq})
    rows = [r for chrom in spellings for r in _snv_rows(seq, chrom, range(100, 130))]
    with pytest.raises(
        PanelUnusableError,
        match=r"more than one contig .*panel contig 'Chr1' could be any of \['chr1', '1'\]",
    ):
        check_panel(_panel(rows), open_reference(path))


def test_no_matching_contig_says_how_many_reference_contigs(tmp_path):
    path = write_fasta(tmp_path / "g.fa", {f"scaffold_{i}": "ACGT" * 10 for i in range(7)})
    with pytest.raises(PanelUnusableError, match=r"reference has \[.*\] \(and 2 more\)"):
        check_panel(_panel([("chr1", 10, "A", "C")]), open_reference(path))


# ---- allele policy -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pos", "ref", "alt", "expected"),
    [
        (100, "A", "G", (100, "A", "G")),
        (100, "AT", "GT", (100, "A", "G")),  # padded SNV from a multi-allelic caller record
        (100, "TCA", "TGA", (101, "C", "G")),  # freebayes-style complex allele
        (100, "AC", "A", (100, "AC", "A")),  # a deletion keeps its anchor base
        (100, "ACGT", "AGGA", (101, "CGT", "GGA")),
        (100, "A", "A", (100, "A", "A")),
    ],
)
def test_trim_alleles(pos, ref, alt, expected):
    assert trim_alleles(pos, ref, alt) == expected


@pytest.mark.parametrize(
    ("ref", "alt", "variant_type"),
    [
        ("A", "G", "snv"),
        ("AC", "GT", "mnv"),
        ("A", "AT", "indel"),
        ("AT", "A", "indel"),
        ("A", "<DEL>", "symbolic"),
        ("A", "*", "symbolic"),
        ("A", "<NON_REF>", "symbolic"),
        ("A", ".", "symbolic"),
        ("G", "G]17:198982]", "symbolic"),
        ("A", "N", "non_acgt"),
        ("A", "R", "non_acgt"),
        ("N", "A", "non_acgt"),
        ("A", "A", "no_change"),
    ],
)
def test_classify(ref, alt, variant_type):
    assert classify(ref, alt)[0] == variant_type


def _snv_rows(seq: str, chrom: str, positions) -> list[tuple]:
    return [(chrom, p, seq[p - 1], "ACGT".replace(seq[p - 1], "")[0]) for p in positions]


def test_every_ingest_pitfall_gets_its_status(genome):
    path, contigs = genome
    c1 = contigs["chr1"].upper()
    good = _snv_rows(c1, "1", range(200, 230))
    other = "ACGT".replace(c1[499], "")[0]
    cases = [
        (("1", 500, c1[499:501], other + c1[500]), "ok", "padded SNV, trimmed"),
        (
            ("1", 600, c1[599:602], c1[599] + "T" + c1[601]),
            "ok" if c1[600] != "T" else "skipped",
            "",
        ),
        (("1", 700, c1[699:701], "GG" if c1[699:701] != "GG" else "TT"), "skipped", "MNV"),
        (("1", 800, c1[799 : 799 + 251], c1[799]), "skipped", "deletion of 250 bp"),
        (("1", 900, c1[899], "<DEL>"), "skipped", "symbolic"),
        (("1", 901, c1[900], "*"), "skipped", "star"),
        (("1", 902, c1[901], "<NON_REF>"), "skipped", "symbolic"),
        (("1", 903, c1[902], None), "skipped", "missing ALT"),
        (("1", 904, c1[903], "R"), "skipped", "non-ACGT"),
        (("1", 905, c1[904], c1[904]), "skipped", "ALT equals REF"),
        (("1", 906, c1[905].lower(), "acgt".replace(c1[905].lower(), "")[0]), "ok", ""),
        (("1", 907, "ACGT".replace(c1[906], "")[0] + c1[907], "A"), "ref_mismatch", "REF"),
        (("1", 1, c1[0], "ACGT".replace(c1[0], "")[0]), "ok", "first base"),
        (("1", 3000, c1[2999], "ACGT".replace(c1[2999], "")[0]), "ok", "last base"),
        (("1", 2999, c1[2998:3000] + "A", "A"), "out_of_bounds", "2999 to 3001 outside"),
        (("1", 3001, "A", "C"), "out_of_bounds", "POS 3001 outside"),
        (("1", 0, "A", "C"), "out_of_bounds", "POS 0 outside"),
        (("MT", 10, "A", "C"), "unknown_contig", "not in the reference under any alias"),
        ((None, 10, "A", "C"), "invalid", "missing CHROM"),
        (("1", None, "A", "C"), "invalid", "missing POS"),
        (("1", 10, None, "C"), "invalid", "missing REF"),
    ]
    rows = good + [row for row, _, _ in cases]
    checked = check_panel(_panel(rows), open_reference(path))
    assert checked.height == len(rows)
    assert checked["row_id"].to_list() == list(range(len(rows)))
    tail = checked.slice(len(good))
    for (row, status, reason), got in zip(cases, tail.iter_rows(named=True), strict=True):
        assert got["status"] == status, (row, got["reason"])
        assert reason in got["reason"] or status == "ok", (row, got["reason"])
    padded = tail.row(0, named=True)  # reported and scored as the trimmed SNV
    assert (padded["pos"], padded["ref"], padded["alt"]) == (500, c1[499], other)
    assert (padded["input_pos"], padded["input_ref"]) == ("500", c1[499:501])
    lower = tail.row(10, named=True)
    assert lower["ref"] == c1[905] and lower["alt"].isupper() and lower["input_ref"].islower()
    summary = summarize(checked, "panel.tsv")
    assert sum(summary["status_counts"].values()) == len(rows)
    assert summary["variant_type_counts"]["indel"] == 3  # 250 bp deletion, 907, 2999


def test_non_integer_position_is_named(genome):
    path, contigs = genome
    rows = _snv_rows(contigs["chr1"].upper(), "chr1", range(100, 130))
    panel = _panel(rows + [("chr1", None, "A", "C")]).with_columns(
        pl.when(pl.col("pos").is_null())
        .then(pl.lit("1,234"))
        .otherwise(pl.col("pos").cast(str))
        .alias("input_pos")
    )
    checked = check_panel(panel, open_reference(path))
    assert checked.row(-1, named=True)["reason"] == "POS '1,234' is not an integer"


def test_contig_aliases_and_ambiguous_names(tmp_path):
    seq = random_dna(400, 5)
    path = write_fasta(tmp_path / "ncbi.fa", {"NC_000001.11": seq, "chrM": seq, "MT": seq})
    rows = _snv_rows(seq, "chr1", range(10, 40)) + [("M", 5, seq[4], "ACGT".replace(seq[4], "")[0])]
    checked = check_panel(_panel(rows[:-1]), open_reference(path))
    assert set(checked["ref_chrom"].to_list()) == {"NC_000001.11"}
    # `M` could be chrM or MT: the run stops naming both, rather than leave the row unscored
    with pytest.raises(PanelUnusableError, match=r"'M' could be any of \['chrM', 'MT'\]"):
        check_panel(_panel(rows), open_reference(path))


def test_duplicates_with_different_labels_are_kept_and_flagged(genome):
    path, contigs = genome
    c1 = contigs["chr1"].upper()
    rows = _snv_rows(c1, "chr1", range(100, 130))
    rows += [rows[0], ("1", *rows[0][1:]), rows[1]]  # same key three times, once as "1"
    labels = [1] * 30 + [0, 1, 1]
    panel = _panel(rows).with_columns(pl.Series("label", labels))
    checked = check_panel(panel, open_reference(path), CheckPolicy(label_column="label"))
    assert checked.height == 33 and (checked["status"] == "ok").all()
    assert checked["duplicate_of"].to_list()[30:] == [0, 0, 1]
    assert checked["duplicate_of"].to_list()[:30] == [None] * 30
    conflict = checked["label_conflict"].to_list()
    assert [i for i, c in enumerate(conflict) if c] == [0, 30, 31]  # row 1's copy agrees


def test_duplicates_whose_labels_name_one_class_do_not_conflict(genome):
    """`Benign` and `Likely_benign` on one variant are both negative: no conflict (they were
    one once, as different texts, and both rows left the metrics); `Pathogenic` against
    `Likely_benign` is one, and a value that is no label (`VUS`) conflicts with no label."""
    path, contigs = genome
    rows = _snv_rows(contigs["chr1"].upper(), "chr1", range(100, 130))
    rows += [rows[0], rows[1], rows[3]]
    labels = ["Benign"] * 30 + ["Likely_benign", "Likely_benign", "VUS"]
    labels[1] = "Pathogenic"
    panel = _panel(rows).with_columns(pl.Series("clnsig", labels))
    policy = CheckPolicy(
        label_column="clnsig",
        positive_labels=("Pathogenic", "Likely_pathogenic"),
        negative_labels=("Benign", "Likely_benign"),
    )
    checked = check_panel(panel, open_reference(path), policy)
    assert checked["duplicate_of"].to_list()[30:] == [0, 1, 3]
    conflict = checked["label_conflict"].to_list()
    assert [i for i, c in enumerate(conflict) if c] == [1, 31]  # Pathogenic vs Likely_benign


def test_nothing_scoreable_stops_with_the_reasons(genome):
    path, contigs = genome
    c1 = contigs["chr1"].upper()
    rows = [("chr1", p, c1[p - 1], c1[p - 1] + "A") for p in range(100, 110)]
    with pytest.raises(PanelUnusableError, match=r"none of the 10 rows.*10 × skipped: insertion"):
        check_panel(_panel(rows), open_reference(path))


def test_header_contig_lengths_catch_a_small_wrong_build_panel(genome):
    path, contigs = genome
    rows = _snv_rows(contigs["chr1"].upper(), "chr1", range(100, 105))  # too few to measure
    with open_reference(path) as ref:
        mismatches = contig_length_mismatches({"chr1": 3100}, {"chr1": "chr1"}, ref)
        assert mismatches == [
            "chr1 is 3,100 bp in the panel header but chr1 is 3,000 bp in the reference"
        ]
        with pytest.raises(PanelUnusableError, match=r"contig lengths disagree.*builds differ"):
            check_panel(_panel(rows), ref, CheckPolicy(build="hg19"), mismatches)
        # enough matching REF alleles vouch for the panel despite a sloppy header
        many = _snv_rows(contigs["chr1"].upper(), "chr1", range(100, 140))
        assert (check_panel(_panel(many), ref, CheckPolicy(), mismatches)["status"] == "ok").all()


def test_copies_of_a_variant_are_counted_on_the_aliased_contig(genome):
    """`chr1` and `1` are one variant: n_copies_in_panel and duplicate_of agree (they once
    grouped on different spellings, so a mixed panel got counts that contradicted each other)."""
    path, contigs = genome
    c1 = contigs["chr1"].upper()
    rows = _snv_rows(c1, "chr1", range(100, 130))
    rows += [("1", *rows[0][1:]), ("chr1", *rows[0][1:]), ("1", *rows[5][1:])]
    rows += [(None, 7, "A", "C"), (None, 7, "A", "C")]  # no usable key: not copies of anything
    checked = check_panel(_panel(rows), open_reference(path))
    copies = checked["n_copies_in_panel"].to_list()
    assert copies[0] == copies[30] == copies[31] == 3
    assert copies[5] == copies[32] == 2
    assert copies[33:] == [1, 1] and copies[1] == 1
    duplicates = checked["duplicate_of"].to_list()
    assert duplicates[30:33] == [0, 0, 5]
    # every row that points at a first row is counted with it, and vice versa
    for row in checked.filter(pl.col("duplicate_of").is_not_null()).iter_rows(named=True):
        assert copies[row["duplicate_of"]] == row["n_copies_in_panel"] > 1


def test_dash_breakend_and_negative_position_reasons_read_as_written(genome):
    path, contigs = genome
    c1 = contigs["chr1"].upper()
    rows = [
        ("1", 238, c1[237], "-"),  # MAF/ANNOVAR deletion
        ("1", 238, "-", "T"),  # MAF/ANNOVAR insertion
        ("1", 240, c1[239], "N"),
        ("1", 241, c1[240], f"{c1[240]}[chr17:500["),  # breakend: mate contig as written
        ("1", -5, "A", "C"),
        ("1", -5, "ACG", "A"),
    ]
    good = _snv_rows(c1, "1", range(200, 230))
    checked = check_panel(_panel(good + rows), open_reference(path)).slice(len(good))
    reasons = checked["reason"].to_list()
    assert "'-' is MAF/ANNOVAR's empty allele" in reasons[0] and "IUPAC" not in reasons[0]
    assert "'-' is MAF/ANNOVAR's empty allele" in reasons[1]
    assert "N and IUPAC codes" in reasons[2]
    assert checked["alt"][3] == f"{c1[240]}[chr17:500[" and "chr17:500" in reasons[3]
    assert reasons[4] == "POS -5 outside chr1:1-3000"
    assert reasons[5] == "POS -5 to -3 outside chr1:1-3000"
    assert classify(c1[237], "-")[1] == reasons[0]


def test_a_label_column_the_panel_lacks_stops_the_check_naming_it(tmp_path, genome, monkeypatch):
    monkeypatch.delenv("CARBON_VEP_INTERFACE", raising=False)
    path, contigs = genome
    c1 = contigs["chr1"].upper()
    table = tmp_path / "panel.tsv"
    rows = [(*row, "1") for row in _snv_rows(c1, "chr1", range(101, 301, 20))]
    frame = pl.DataFrame(rows, schema=["chrom", "pos", "ref", "alt", "label"], orient="row")
    frame.write_csv(table, separator="\t")
    missing = r"label column 'LBL' \(`--label-column`\) is not a column of the panel; its "
    with open_reference(path) as ref:
        with pytest.raises(PanelUnusableError, match=rf"panel\.tsv: {missing}.*'label'"):
            ingest_panel(table, ref, PanelSettings("hg19"), LabelSettings(label_column="LBL"))
        ingest_panel(table, ref, PanelSettings("hg19"), LabelSettings(label_column="label"))
        with pytest.raises(PanelUnusableError, match=rf"panel\.tsv: {missing}"):
            check_panel(_panel([r[:4] for r in rows[:3]]), ref, CheckPolicy(label_column="LBL"))
