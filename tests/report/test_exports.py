"""Exports, read back the way annotation tools read them (pysam tabix / VariantFile)."""

import polars as pl
import pysam
import pytest

from carbon_vep.report.exports import write_results_vcf, write_tabix_tsv

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
    assert info == {"CVEP_STATUS", "CVEP_REASON", "CVEP_SCORE", "CVEP_LABEL_CONFLICT"}
    with pytest.raises(ValueError, match="delta"):
        write_results_vcf(merged, {"chr1": 1000}, out, {"delta": "d"})
