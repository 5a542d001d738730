"""ClinVar CLNSIG -> label mapping, duplicate label conflicts, and the schema's defaults."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.config.fields import INTERFACE_VARIABLE
from carbon_vep.config.stages import (
    DEFAULT_CLNSIG_LABELS,
    EvaluationSettings,
    LabelSettings,
    MetricSettings,
    PanelSettings,
)
from carbon_vep.errors import InputError
from carbon_vep.evaluate.metrics import vep_metrics
from carbon_vep.genome.reference import open_reference
from carbon_vep.variants import panel as panel_module
from carbon_vep.variants.check import LabelValues
from carbon_vep.variants.ingest import ingest_panel, write_checked_panel
from carbon_vep.variants.labels import clnsig_label
from carbon_vep.variants.policy import CheckPolicy

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("clnsig", "expected"),
    [
        ("Pathogenic", (1, False)),
        ("Likely_pathogenic", (1, False)),
        ("Pathogenic/Likely_pathogenic", (1, False)),
        ("Pathogenic/Likely_pathogenic|risk_factor", (1, False)),
        ("Likely_pathogenic,_low_penetrance", (1, False)),
        ("Benign", (0, False)),
        ("Likely_benign", (0, False)),
        ("Benign/Likely_benign", (0, False)),
        ("Benign|drug_response", (0, False)),
        ("Uncertain_significance", (None, False)),
        ("not_provided", (None, False)),
        ("drug_response", (None, False)),
        ("Conflicting_classifications_of_pathogenicity", (None, True)),
        ("Conflicting_interpretations_of_pathogenicity|other", (None, True)),
        ("Pathogenic|Benign", (None, True)),
        ("Likely_pathogenic/Likely_benign", (None, True)),
        (None, (None, False)),
    ],
)
def test_clnsig_label(clnsig, expected):
    assert clnsig_label(clnsig, DEFAULT_CLNSIG_LABELS) == expected


def test_custom_mapping_and_case():
    mapping = {**DEFAULT_CLNSIG_LABELS, "Uncertain_significance": 0}
    assert clnsig_label("uncertain_significance", mapping) == (0, False)
    assert clnsig_label("Pathogenic", {"Benign": 0}) == (None, False)


CLINVAR_HEADER = """##fileformat=VCFv4.1
##fileDate=2025-01-05
##source=ClinVar
##reference=GRCh38
##ID=<Description="ClinVar Variation ID">
##INFO=<ID=AF_ESP,Number=1,Type=Float,Description="allele frequencies from GO-ESP">
##INFO=<ID=ALLELEID,Number=1,Type=Integer,Description="the ClinVar Allele ID">
##INFO=<ID=CLNDN,Number=.,Type=String,Description="ClinVar's preferred disease name">
##INFO=<ID=CLNREVSTAT,Number=.,Type=String,Description="ClinVar review status">
##INFO=<ID=CLNSIG,Number=.,Type=String,Description="Aggregate germline classification">
##INFO=<ID=CLNVC,Number=1,Type=String,Description="Variant type">
##INFO=<ID=GENEINFO,Number=1,Type=String,Description="Gene(s) for the variant">
##INFO=<ID=MC,Number=.,Type=String,Description="comma separated list of molecular consequence">
##INFO=<ID=RS,Number=.,Type=String,Description="dbSNP ID (i.e. rs number)">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO
"""


def _clinvar_vcf(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    seq = random_dna(2000, 21)
    reference = write_fasta(tmp_path / "hg38.fa", {"chr1": seq, "chrM": random_dna(300, 22)})
    sig = [
        "Pathogenic",
        "Benign",
        "Likely_benign",
        "Uncertain_significance",
        "Conflicting_classifications_of_pathogenicity",
        "Pathogenic/Likely_pathogenic|risk_factor",
        "Benign/Likely_benign",
    ]
    lines = []
    for i, pos in enumerate(range(100, 1300, 40)):
        ref = seq[pos - 1]
        alt = "ACGT".replace(ref, "")[i % 3]
        info = (
            f"ALLELEID={1000 + i};CLNDN=Hereditary_cancer-predisposing_syndrome|not_provided;"
            f"CLNREVSTAT=criteria_provided,_multiple_submitters,_no_conflicts;"
            f"CLNSIG={sig[i % len(sig)]};CLNVC=single_nucleotide_variant;GENEINFO=BRCA2:675;"
            f"MC=SO:0001583|missense_variant;RS={5000 + i}"
        )
        lines.append(f"1\t{pos}\t{i}\t{ref}\t{alt}\t.\t.\t{info}")
    lines.append("1\t99\t90\tN\t.\t.\t.\tALLELEID=9;CLNSIG=not_provided;CLNVC=Deletion")
    # the same variant submitted twice, once benign, once pathogenic
    first = lines[0].split("\t")
    lines.append("\t".join([*first[:2], "77", *first[3:7], "ALLELEID=77;CLNSIG=Benign"]))
    path = tmp_path / "clinvar.vcf"
    path.write_text(CLINVAR_HEADER + "\n".join(lines) + "\n")
    return path, reference, sig


def test_clinvar_vcf_labels_conflicts_and_duplicates(tmp_path):
    path, reference, sig = _clinvar_vcf(tmp_path)
    panel = PanelSettings("hg38", info_fields=("GENEINFO",))
    with open_reference(reference) as ref:
        checked, summary = ingest_panel(path, ref, panel, LabelSettings("clinvar_clnsig"))
    assert checked.height == 32 and summary["n_rows"] == 32
    assert sum(summary["status_counts"].values()) == 32
    assert checked["CLNSIG"][0] == "Pathogenic" and checked["GENEINFO"][0] == "BRCA2:675"
    expected = {"Pathogenic": 1, "Benign": 0, "Likely_benign": 0, "Uncertain_significance": None}
    for row in checked.head(30).iter_rows(named=True):
        if row["CLNSIG"] in expected:
            assert row["label"] == expected[row["CLNSIG"]]
    conflicted = checked.filter("label_conflict")
    assert set(conflicted["CLNSIG"].to_list()) == {
        "Conflicting_classifications_of_pathogenicity",
        "Pathogenic",
        "Benign",
    }
    # the duplicate pair: both rows kept, the second points at the first, both flagged
    pair = checked.filter(checked["id"].is_in(["0", "77"]))
    assert pair["duplicate_of"].to_list() == [None, 0] and pair["label_conflict"].all()
    assert checked.filter(checked["id"] == "90")["status"].to_list() == ["skipped"]


def test_clnsig_source_needs_the_field(tmp_path):
    path, reference, _ = _clinvar_vcf(tmp_path)
    text = path.read_text().replace("CLNSIG", "CLINSIG")
    path.write_text(text)
    with open_reference(reference) as ref, pytest.raises(InputError, match=r"CLNSIG"):
        ingest_panel(path, ref, PanelSettings("hg38"), LabelSettings("clinvar_clnsig"))


def test_duplicates_labelled_in_words_of_one_class_stay_in_the_metrics(tmp_path):
    """A table labelled in words, mapped by positive_labels / negative_labels: the same
    variant as `Benign` and `Likely_benign` (both negative) is no label conflict, so neither
    row leaves the metrics; as `Pathogenic` and `Likely_benign` it is one."""
    seq = random_dna(2000, 23)
    reference = write_fasta(tmp_path / "g.fa", {"chr1": seq})
    lines = ["chrom\tpos\tref\talt\tsignificance"]
    for pos in range(100, 1300, 40):
        ref = seq[pos - 1]
        lines.append(f"chr1\t{pos}\t{ref}\t{'ACGT'.replace(ref, '')[0]}\tBenign")
    lines[1] = lines[1].replace("Benign", "Pathogenic")
    lines += [lines[1].replace("Pathogenic", "Likely_benign")]  # row 0's variant
    lines += [lines[2].replace("Benign", "Likely_benign")]  # row 1's variant, one class
    path = tmp_path / "panel.tsv"
    path.write_text("\n".join(lines) + "\n")
    labels = LabelSettings(
        label_column="significance",
        positive_labels=("Pathogenic", "Likely_pathogenic"),
        negative_labels=("Benign", "Likely_benign"),
    )
    with open_reference(reference) as ref:
        checked, summary = ingest_panel(path, ref, PanelSettings("hg38"), labels)
    assert checked["duplicate_of"].to_list()[-2:] == [0, 1]
    assert checked.filter("label_conflict")["row_id"].to_list() == [0, 30]
    assert summary["n_label_conflicts"] == 2


def test_label_values_match_ignoring_case_and_surrounding_whitespace(tmp_path):
    """A spreadsheet export or a merge of sources writes `Pathogenic`, `pathogenic ` and
    `PATHOGENIC`: all are the listed value. Matched exactly, the odd-cased rows were silently
    unlabelled (and left the metrics); the conflict flag and the metrics read the same rule."""
    seq = random_dna(2000, 25)
    reference = write_fasta(tmp_path / "g.fa", {"chr1": seq})
    words = ["Pathogenic", " pathogenic ", "PATHOGENIC", "benign", "Benign\t", "VUS"]
    lines = ["chrom\tpos\tref\talt\tclass"]
    for i, pos in enumerate(range(100, 1300, 40)):
        ref = seq[pos - 1]
        lines.append(f"chr1\t{pos}\t{ref}\t{'ACGT'.replace(ref, '')[0]}\t{words[i % 6]}")
    lines.append(lines[1].replace("Pathogenic", "BENIGN"))  # row 0's variant, other class
    lines.append(lines[2].replace(" pathogenic ", "pathogenic"))  # row 1's, same class
    path = tmp_path / "panel.csv"
    path.write_text("\n".join(line.replace("\t", ",", 4) for line in lines) + "\n")
    labels = LabelSettings(
        label_column="class", positive_labels=("Pathogenic",), negative_labels=("benign",)
    )
    with open_reference(reference) as ref:
        checked, _ = ingest_panel(path, ref, PanelSettings("hg38"), labels)
    assert checked["class"][1] == " pathogenic "  # carried as written
    assert checked.filter("label_conflict")["row_id"].to_list() == [0, 30]
    merged = checked.with_columns(pl.lit("scored").alias("status"), pl.lit(0.5).alias("score"))
    result = vep_metrics(merged, labels, MetricSettings(evaluation=EvaluationSettings(0)))
    assert result["n_labelled"] == 32 - 2 - 5  # the two conflicts and the five VUS aside
    assert result["n_positive"] == 15 + 1 - 1  # every spelling, row 0 left out, row 31 in
    assert result["n_scored_without_label"] == 5


def _panel_of_words(tmp_path, seed: int, most: str, every_third: str):
    """A genome and a 30-SNV panel on it whose `class` column holds `every_third` on every
    third row and `most` on the others (20 and 10 rows)."""
    seq = random_dna(2000, seed)
    reference = write_fasta(tmp_path / "g.fa", {"chr1": seq})
    lines = ["chrom\tpos\tref\talt\tclass"]
    for i, pos in enumerate(range(100, 1300, 40)):
        ref = seq[pos - 1]
        word = most if i % 3 else every_third
        lines.append(f"chr1\t{pos}\t{ref}\t{'ACGT'.replace(ref, '')[0]}\t{word}")
    path = tmp_path / "panel.tsv"
    path.write_text("\n".join(lines) + "\n")
    return reference, path


def test_a_label_column_none_of_whose_values_is_a_label_stops_before_scoring(tmp_path, monkeypatch):
    """`pathogenic` / `benign` against the default 1 / 0 / true / false: every row would be
    unlabelled and the metrics empty after the scoring, with only a warning. The check stops,
    naming the column, the values it holds and the settings to list them under, and writes
    nothing; listed there, or with some rows labelled, the panel is read."""
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)  # the flags, as a user runs it
    reference, path = _panel_of_words(tmp_path, 24, "pathogenic", "benign")
    out = tmp_path / "checked.parquet"
    with open_reference(reference) as ref:
        with pytest.raises(InputError) as err:
            write_checked_panel(
                path, ref, PanelSettings("hg38"), LabelSettings(label_column="class"), out
            )
        message = str(err.value)
        assert "label column 'class'" in message and "'pathogenic' (20), 'benign' (10)" in message
        assert "--positive" in message and "--negative" in message
        assert not out.exists() and not list(tmp_path.glob(".checked.parquet*"))
        named = LabelSettings(
            label_column="class", positive_labels=("pathogenic",), negative_labels=("benign",)
        )
        checked, _ = ingest_panel(path, ref, PanelSettings("hg38"), named)
        assert checked.height == 30
        path.write_text(path.read_text().replace("benign", "0", 1))  # one row labelled
        checked, _ = ingest_panel(
            path, ref, PanelSettings("hg38"), LabelSettings(label_column="class")
        )
        assert checked.height == 30


def test_the_label_values_are_checked_batch_by_batch(tmp_path, monkeypatch):
    """Ingest tallies the label values as it reads each batch (it once read the whole column
    back from disk after the batches): the counts named span the batches, one labelled row in
    the last batch is enough, and the tally keeps at most `LabelValues.KEPT` distinct values
    whatever the panel holds (a column of free text has as many as rows)."""
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    monkeypatch.setattr(panel_module, "_BATCH_ROWS", 7)
    reference, path = _panel_of_words(tmp_path, 26, "LOF", "FUNC")
    labels = LabelSettings(label_column="class")
    with open_reference(reference) as ref:
        with pytest.raises(InputError, match=r"its values are 'LOF' \(20\), 'FUNC' \(10\);"):
            ingest_panel(path, ref, PanelSettings("hg38"), labels)
        lines = path.read_text().splitlines()
        lines[-1] = lines[-1].replace("LOF", " TRUE")  # row 29, in the fifth batch of 7
        path.write_text("\n".join(lines) + "\n")
        checked, _ = ingest_panel(path, ref, PanelSettings("hg38"), labels)
    assert checked.height == 30
    tally = LabelValues(CheckPolicy(label_column="class"))
    for start in range(0, 3000, 500):
        tally.add(pl.Series([f"word{i}" for i in range(start, start + 500)] + ["LOF"] * 3))
    assert tally.unmatched.height == LabelValues.KEPT and tally.more_values
    assert tally.unmatched.row(0) == ("LOF", 18)
    tally.add(pl.Series(["0", None]))
    assert tally.matched and tally.unmatched.is_empty()
