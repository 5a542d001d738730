"""A VCF panel's carried values are what the panel wrote: its own INFO END (htslib keeps it as
the record's end, not in its INFO) and Float INFO values without float32 widening."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import duckdb
import polars as pl
import pysam
import pytest
from support.exports import export_unscored_panel

from carbon_vep.variants.panel import read_panel

SV_VCF = """\
##fileformat=VCFv4.2
##contig=<ID=chr1,length=1000>
##INFO=<ID=END,Number=1,Type=Integer,Description="end">
##INFO=<ID=SVTYPE,Number=1,Type=String,Description="type">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO
chr1\t20\tv0\tG\tT\t.\t.\t.
chr1\t25\tv1\tG\tT\t.\t.\tEND=25
chr1\t50\tsv1\tG\t<DEL>\t.\t.\tEND=300;SVTYPE=DEL
chr1\t60\tbnd\tA\tA[chr1:900[\t.\t.\tSVTYPE=BND
"""

FLOAT_VCF = """\
##fileformat=VCFv4.2
##contig=<ID=chr1,length=1000>
##INFO=<ID=AF,Number=A,Type=Float,Description="af">
##INFO=<ID=X,Number=1,Type=Float,Description="x">
##INFO=<ID=R,Number=R,Type=Float,Description="r">
##INFO=<ID=L,Number=.,Type=Float,Description="l">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO
chr1\t20\tv0\tG\tT,C\t.\t.\tAF=0.1,0.01;X=1e-5;R=0.5,0.1,0.3;L=0.1,0.7
chr1\t21\tv1\tG\tT\t.\t.\tAF=0.00001;X=0.3
"""


def _write(tmp_path: Path, text: str, kind: str) -> Path:
    plain = tmp_path / "panel.vcf"
    plain.write_text(text)
    if kind == "vcf":
        return plain
    bcftools = shutil.which("bcftools")  # pysam's writer drops an END equal to the default
    if bcftools is None:
        pytest.skip("bcftools is not installed (Debian package; .ci/run installs it)")
    out = tmp_path / "panel.bcf"
    subprocess.run([bcftools, "view", "-Ob", "-o", str(out), str(plain)], check=True)
    return out


@pytest.mark.parametrize("kind", ["vcf", "bcf"])
def test_a_panels_own_end_is_read(tmp_path, kind):
    rows = read_panel(_write(tmp_path, SV_VCF, kind), info_fields=["END", "SVTYPE"])
    assert rows.schema["END"] == pl.Int64
    # no END -> null; an END equal to the default end is the panel's too
    assert rows.select("pos", "END", "SVTYPE").rows() == [
        (20, None, None),
        (25, 25, None),
        (50, 300, "DEL"),
        (60, None, "BND"),
    ]


def test_the_exported_end_is_the_panels_and_tabix_finds_the_deletion(tmp_path):
    panel = _write(tmp_path, SV_VCF, "vcf")
    info_fields = ("END", "SVTYPE")
    out = export_unscored_panel(tmp_path, panel, info_fields)

    vcf = pysam.VariantFile(str(out))
    assert "panel_END" not in vcf.header.info
    assert vcf.header.info["END"].type == "Integer"
    assert [(r.pos, r.stop) for r in vcf] == [(20, 20), (25, 25), (50, 300), (60, 60)]
    inside = [line.split("\t")[2] for line in pysam.TabixFile(str(out)).fetch("chr1", 150, 200)]
    assert inside == ["sv1"]  # the deletion spans 50-300


@pytest.mark.parametrize("kind", ["vcf", "bcf"])
def test_float_info_values_are_as_written(tmp_path, kind):
    rows = read_panel(_write(tmp_path, FLOAT_VCF, kind), info_fields=["AF", "X", "R", "L"])
    assert rows.select("AF", "X", "R", "L").rows() == [
        (0.1, 1e-5, "0.5,0.1", "0.1,0.7"),
        (0.01, 1e-5, "0.5,0.3", "0.1,0.7"),
        (1e-5, 0.3, None, None),
    ]
    found = duckdb.sql(
        "select count(*) filter (where AF = 0.1), count(*) filter (where AF <= 0.1), "
        "count(*) filter (where AF = 0.01), count(*) filter (where X = 0.3) from rows"
    ).fetchall()[0]
    assert found == (1, 3, 1, 1)
