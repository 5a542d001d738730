from pathlib import Path

import polars as pl
import pytest

from carbon_vep.errors import InputError
from carbon_vep.panel import read_panel

VCF_HEADER = """##fileformat=VCFv4.2
##contig=<ID=1,length=3000>
##INFO=<ID=AF,Number=A,Type=Float,Description="Allele frequency">
##INFO=<ID=CLNSIG,Number=.,Type=String,Description="Clinical significance">
##INFO=<ID=DB,Number=0,Type=Flag,Description="dbSNP">
##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tS1\tS2
"""


def write_vcf(path: Path, records: list[str]) -> Path:
    path.write_text(VCF_HEADER + "".join(f"{r}\n" for r in records))
    return path


def test_multiallelic_record_is_split_with_per_alt_info(tmp_path):
    vcf = write_vcf(
        tmp_path / "p.vcf",
        [
            "1\t100\trs1\tT\tG,C,A\t50\tPASS\tAF=0.1,0.2,0.3;CLNSIG=Benign;DB\tGT\t0/1\t1/2",
            "1\t200\t.\tA\tC\t.\tPASS\tAF=0.5\tGT\t0/0\t0/1",
        ],
    )
    panel = read_panel(vcf, info_fields=["AF", "CLNSIG", "DB"])
    assert panel["alt"].to_list() == ["G", "C", "A", "C"]
    assert panel["AF"].to_list() == pytest.approx([0.1, 0.2, 0.3, 0.5])
    assert panel["row_id"].to_list() == [0, 1, 2, 3]
    assert panel["n_alts_in_record"].to_list() == [3, 3, 3, 1]
    assert panel["source"][0].endswith(f"line {VCF_HEADER.count(chr(10)) + 1}")
    assert panel["DB"].to_list()[:3] == [True, True, True]


def test_tsv_with_user_column_names_carries_other_columns(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("CHR\tPOSITION\tREF\tALT\tgene\n1\t10\tA\tC\tBRCA2\n1\t11\tG\tT\tTP53\n")
    panel = read_panel(
        path, columns={"chrom": "CHR", "pos": "POSITION", "ref": "REF", "alt": "ALT"}
    )
    assert panel.columns[:6] == ["row_id", "source", "chrom", "pos", "ref", "alt"]
    assert panel["gene"].to_list() == ["BRCA2", "TP53"]
    assert panel["pos"].dtype == pl.Int64
    assert panel["source"][1].endswith("line 3")


def test_parquet_panel(tmp_path):
    path = tmp_path / "p.parquet"
    pl.DataFrame(
        {"chrom": ["13"], "pos": [5], "ref": ["A"], "alt": ["G"], "label": [1]}
    ).write_parquet(path)
    panel = read_panel(path)
    assert panel.select("chrom", "pos", "label").row(0) == ("13", 5, 1)


def test_missing_columns_named(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("chromosome,pos,ref,alt\n1,2,A,C\n")
    with pytest.raises(InputError, match=r"p\.csv.*missing column.*chrom"):
        read_panel(path)


def test_empty_panel_is_an_error(tmp_path):
    with pytest.raises(InputError, match="no variants"):
        read_panel(write_vcf(tmp_path / "empty.vcf", []))


def test_malformed_vcf_names_file(tmp_path):
    vcf = write_vcf(
        tmp_path / "bad.vcf", ["1\t100\t.\tT\tG\t50\tPASS\t.\tGT\t0/1\t0/1", "1\tnotanumber\t."]
    )
    with pytest.raises(InputError, match="bad.vcf"):
        read_panel(vcf)
