"""Exports, read back the way annotation tools read them (pysam tabix / VariantFile)."""

import shutil
import subprocess

import polars as pl
import pysam
import pytest

from carbon_vep.atomic import index_of
from carbon_vep.config.stages import PanelSettings
from carbon_vep.report.exports import (
    carried_infos,
    export_vcf,
    write_results_vcf,
    write_tabix_tsv,
)
from carbon_vep.variants.panel import read_panel

SNVS = pl.DataFrame(
    {
        "chrom": ["chr2", "chr1", "chr1", "chr1", "chr1"],
        "pos": [5, 10, 3, 10, 200],
        "ref": ["A", "C", "G", "C", "T"],
        "alt": ["T", "A", "T", "G", "C"],
        "score": [1.5, None, -0.25, 2.0, 0.125],
        "p_ref": [0.1, 0.2, 0.3, 0.2, 0.5],
        "p_alt": [0.01, 0.02, 0.03, 0.04, 0.05],
    }
)


def test_tabix_tsv_is_sorted_indexed_and_fetchable(tmp_path):
    out = write_tabix_tsv(
        SNVS, tmp_path / "scan.tsv.gz", ["score", "p_ref", "p_alt"], contig_order=["chr1", "chr2"]
    )
    assert (tmp_path / "scan.tsv.gz.tbi").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left
    table = pysam.TabixFile(str(out))
    assert table.header[0] == "#chrom\tpos\tref\talt\tscore\tp_ref\tp_alt"
    assert list(table.contigs) == ["chr1", "chr2"]
    # 1-based POS 10 is the 0-based half-open region [9, 10): both alleles, nothing else
    rows = [line.split("\t") for line in table.fetch("chr1", 9, 10)]
    assert [(r[1], r[3], r[4]) for r in rows] == [("10", "A", "."), ("10", "G", "2.0")]
    assert [line.split("\t")[1] for line in table.fetch("chr1")] == ["3", "10", "10", "200"]
    assert len(list(table.fetch("chr2", 4, 5))) == 1
    assert len(list(table.fetch("chr1", 10, 199))) == 0


def test_tabix_tsv_refuses_what_it_cannot_write(tmp_path):
    with pytest.raises(ValueError, match=r"\.gz"):
        write_tabix_tsv(SNVS, tmp_path / "scan.tsv", ["score"])
    with pytest.raises(ValueError, match="missing"):
        write_tabix_tsv(SNVS, tmp_path / "scan.tsv.gz", ["delta"])
    with pytest.raises(ValueError, match="contig order"):
        write_tabix_tsv(SNVS, tmp_path / "scan.tsv.gz", ["score"], contig_order=["chr1"])


def _merged() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "row_id": [0, 1, 2, 3, 4, 5],
            "chrom": ["1", "1", "2", "1", "weird", None],
            "ref_chrom": ["chr1", "chr1", "chr2", "chr1", None, None],
            "pos": [10, 3, 5, 10, 7, None],
            "ref": ["C", "G", "A", "C", "A", None],
            "alt": ["A", "T", "<DEL>", "G", "C", "T"],
            "status": ["ref_mismatch", "scored", "skipped", "scored", "unknown_contig", "invalid"],
            "reason": [
                "REF C but reference has G",
                "",
                "symbolic, star or missing ALT '<DEL>'",
                "",
                "contig 'weird' not in the reference",
                "missing or non-integer CHROM/POS/REF",
            ],
            "score": [None, -0.25, None, 2.0, None, None],
            "label_conflict": [False, False, False, True, False, False],
        }
    )


def test_results_vcf_keeps_every_placeable_row_with_its_status(tmp_path):
    out = tmp_path / "results.vcf.gz"
    fields = {"score": "larger = more damaging", "label_conflict": "conflicting labels"}
    unwritten = write_results_vcf(_merged(), {"chr1": 1000, "chr2": 500}, out, fields)
    assert unwritten == 1  # the row without CHROM/POS/REF
    vcf = pysam.VariantFile(str(out))
    header = vcf.header
    assert {c: header.contigs[c].length for c in header.contigs} == {
        "chr1": 1000,
        "chr2": 500,
        "weird": None,
    }
    score = header.info["CVEP_SCORE"]
    assert (score.number, score.type) == ("A", "Float")
    assert header.info["CVEP_LABEL_CONFLICT"].type == "Flag"
    assert any(r.key == "carbon_vep_rows_not_written" for r in header.records)
    records = list(vcf)
    assert [(r.chrom, r.pos, r.alts[0]) for r in records] == [
        ("chr1", 3, "T"),
        ("chr1", 10, "A"),
        ("chr1", 10, "G"),
        ("chr2", 5, "<DEL>"),
        ("weird", 7, "C"),
    ]
    by_alt = {(r.chrom, r.pos, r.alts[0]): r.info for r in records}
    assert by_alt[("chr1", 10, "G")]["CVEP_SCORE"] == (2.0,)
    assert by_alt[("chr1", 10, "G")]["CVEP_LABEL_CONFLICT"] is True
    mismatch = by_alt[("chr1", 10, "A")]
    assert mismatch["CVEP_STATUS"] == ("ref_mismatch",) and "CVEP_SCORE" not in mismatch
    assert mismatch["CVEP_REASON"] == ("REF_C_but_reference_has_G",)
    assert "CVEP_SCORE" not in by_alt[("chr2", 5, "<DEL>")]
    fetched = list(pysam.VariantFile(str(out)).fetch("chr1", 9, 10))
    assert [r.alts[0] for r in fetched] == ["A", "G"]


def test_results_vcf_default_fields_recipe_lines_and_plain_text(tmp_path):
    merged = _merged().with_columns(
        pl.lit("centered").alias("recipe"),
        pl.lit("full_vocab").alias("normalization"),
        pl.lit(None, pl.Float64).alias("p_ref"),  # present but empty: not exported
    )
    out = tmp_path / "results.vcf"
    write_results_vcf(merged, {"chr1": 1000, "chr2": 500}, out)
    text = out.read_text()
    assert text.startswith("##fileformat=VCF") and not (tmp_path / "results.vcf.tbi").exists()
    assert (
        "##carbon_vep_recipe=centered" in text and "##carbon_vep_normalization=full_vocab" in text
    )
    info = set(pysam.VariantFile(str(out)).header.info)
    # END: the reserved key htslib writes on the <DEL> record
    assert info == {"END", "CVEP_STATUS", "CVEP_REASON", "CVEP_SCORE", "CVEP_LABEL_CONFLICT"}
    with pytest.raises(ValueError, match="delta"):
        write_results_vcf(merged, {"chr1": 1000}, out, {"delta": "d"})


def _bcftools() -> str:
    path = shutil.which("bcftools")
    if path is None:
        pytest.skip("bcftools is not installed (Debian package; .ci/run installs it)")
    return path


def test_results_vcf_with_a_symbolic_alt_reads_in_bcftools(tmp_path):
    """htslib writes END on a symbolic ALT's record: the header declares it (reserved key),
    so bcftools converts the file to BCF and splits it."""
    out = tmp_path / "results.vcf.gz"
    write_results_vcf(_merged(), {"chr1": 1000, "chr2": 500}, out, {"score": "s"})
    end = pysam.VariantFile(str(out)).header.info["END"]
    assert (end.number, end.type) == (1, "Integer")
    bcftools = _bcftools()
    for argv in (["view", "-Ob", "-o", str(tmp_path / "r.bcf")], ["norm", "-m-", "-Ov"]):
        done = subprocess.run(
            [bcftools, *argv, str(out)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert "not defined in the header" not in done.stderr
    records = list(pysam.VariantFile(str(tmp_path / "r.bcf")))
    assert [(r.pos, r.stop) for r in records if r.alts[0] == "<DEL>"] == [(5, 5)]


PANEL_VCF = """##fileformat=VCFv4.2
##contig=<ID=1,length=1000>
##FILTER=<ID=q10,Description="Quality below 10">
##INFO=<ID=AC,Number=A,Type=Integer,Description="Allele count">
##INFO=<ID=AF_R,Number=R,Type=Float,Description="Frequency of REF and each ALT">
##INFO=<ID=GENES,Number=.,Type=String,Description="Genes">
##INFO=<ID=DB,Number=0,Type=Flag,Description="in dbSNP">
##INFO=<ID=score,Number=1,Type=Float,Description="the panel's own score">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO
1\t3\trs1\tG\tT,C\t50\tPASS\tAC=4,5;AF_R=0.5,0.25,0.25;GENES=A,B;DB;score=0.5
1\t10\t.\tC\tA\t.\tq10\tAC=1
1\t20\trs3\tA\t<DEL>\t7.5\t.\tGENES=C
"""


def test_results_vcf_carries_the_panels_fields_as_it_declares_them(tmp_path):
    panel = tmp_path / "panel.vcf"
    panel.write_text(PANEL_VCF)
    info_fields = ("AC", "AF_R", "GENES", "DB", "score")
    rows = read_panel(panel, info_fields=info_fields)
    assert {"id", "qual", "filter", "panel_score"} <= set(rows.columns)
    merged = rows.with_columns(
        pl.lit("chr1").alias("ref_chrom"),
        pl.lit("skipped").alias("status"),
        pl.lit("r").alias("reason"),
        pl.lit(None, pl.Float64).alias("score"),
    )
    merged.write_parquet(tmp_path / "scores.parquet")
    fasta = tmp_path / "ref.fa"
    fasta.write_text(">chr1\n" + "ACGT" * 250 + "\n")
    out = tmp_path / "results.vcf.gz"
    settings = PanelSettings(build="hg38", info_fields=info_fields)
    export_vcf(str(tmp_path / "scores.parquet"), str(fasta), {}, str(out), str(panel), settings)

    vcf = pysam.VariantFile(str(out))
    info = vcf.header.info
    declared = {k: (info[k].number, info[k].type) for k in ("AC", "AF_R", "GENES", "DB", "score")}
    assert declared == {
        "AC": ("A", "Integer"),
        "AF_R": (".", "String"),  # REF's and this ALT's value, as text
        "GENES": (".", "String"),
        "DB": (0, "Flag"),
        "score": (1, "Float"),  # the panel's own key, beside CVEP_SCORE
    }
    assert info["AC"].description == "Allele count"
    assert vcf.header.filters["q10"].description == "Quality below 10"
    assert list(vcf.header.contigs) == ["chr1"]  # the reference's spelling, as the records
    assert any(
        r.key == "carbon_vep_panel_contigs" and r.value == "1->chr1" for r in vcf.header.records
    )
    records = [(r.pos, r.id, r.qual, list(r.filter), r.alts[0], dict(r.info)) for r in vcf]
    assert [r[:5] for r in records] == [
        (3, "rs1", 50.0, ["PASS"], "T"),
        (3, "rs1", 50.0, ["PASS"], "C"),
        (10, None, None, ["q10"], "A"),
        (20, "rs3", 7.5, [], "<DEL>"),
    ]
    first, second = records[0][5], records[1][5]
    assert (first["AC"], second["AC"]) == ((4,), (5,))
    assert first["AF_R"] == ("0.5", "0.25") and first["GENES"] == ("A", "B")
    assert first["DB"] is True and first["score"] == 0.5
    assert records[3][5]["GENES"] == ("C",)
    bcftools = _bcftools()
    done = subprocess.run(
        [bcftools, "norm", "-m-", "-Ov", str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "not defined" not in done.stderr, done.stderr
    assert len([line for line in done.stdout.splitlines() if line.startswith("chr1")]) == 4


def test_results_vcf_carries_a_table_panels_columns_as_strings(tmp_path):
    merged = _merged().with_columns(
        pl.Series("gene name", ["A", "B", "C", None, "E", "F"]),
        pl.Series("id", ["v1", None, "v 3", "v4", "v5", "v6"]),
    )
    carried = carried_infos(merged, ["gene name", "*"], None)
    assert carried == {
        "gene name": {
            "ID": "gene_name",
            "Number": "1",
            "Type": "String",
            "Description": "gene name, carried from the panel",
        }
    }
    out = tmp_path / "results.vcf"
    write_results_vcf(merged, {"chr1": 1000, "chr2": 500}, out, {}, carried=carried)
    records = {(r.chrom, r.pos, r.alts[0]): r for r in pysam.VariantFile(str(out))}
    assert records[("chr2", 5, "<DEL>")].id == "v_3"
    assert records[("chr1", 3, "T")].info["gene_name"] == "B"
    assert "gene_name" not in records[("chr1", 10, "G")].info


@pytest.mark.parametrize(
    ("chr1_bp", "index"), [(248_956_422, "tbi"), (700_000_000, "csi")], ids=["hg38", "wheat"]
)
def test_results_vcf_index_is_a_csi_past_what_a_tbi_holds(tmp_path, chr1_bp, index):
    """A contig over 2^29 bp (wheat's 1H..7D, conifers, axolotl): htslib cannot store it in a
    .tbi; the field's tools expect a .tbi for every other genome."""
    out = tmp_path / "results.vcf.gz"
    write_results_vcf(_merged(), {"chr1": chr1_bp, "chr2": 500}, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "results.vcf.gz",
        f"results.vcf.gz.{index}",
    ]
    with pysam.VariantFile(str(out)) as vcf:  # htslib finds the .csi itself
        assert [r.alts[0] for r in vcf.fetch("chr1", 9, 10)] == ["A", "G"]


def test_tabix_table_with_positions_past_2_to_the_29_gets_a_csi(tmp_path):
    frame = pl.DataFrame(
        {"chrom": ["1H", "1H"], "pos": [5, 600_000_000], "ref": ["A", "C"], "alt": ["G", "T"]}
    ).with_columns(pl.Series("score", [0.5, 1.5]))
    out = write_tabix_tsv(frame, tmp_path / "scan.tsv.gz", ["score"])
    assert (tmp_path / "scan.tsv.gz.csi").is_file() and not (tmp_path / "scan.tsv.gz.tbi").exists()
    with pysam.TabixFile(str(out), index=str(index_of(out))) as table:
        assert [r.split("\t")[1] for r in table.fetch("1H", 599_999_999, 600_000_000)] == [
            "600000000"
        ]
