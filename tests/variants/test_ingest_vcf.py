"""VCFs shaped like what real callers write (GATK, bcftools, freebayes, gVCF), multi-sample,
through the whole ingest: every record's ALTs become rows with the right status."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pysam
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.config.stages import PanelSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.variants.ingest import ingest_panel

SEQ = random_dna(5000, 31)
OTHER = {b: "ACGT".replace(b, "") for b in "ACGT"}


def _alt(pos: int, k: int = 0) -> str:
    return OTHER[SEQ[pos - 1]][k]


def _genome(tmp_path: Path) -> Path:
    return write_fasta(tmp_path / "Homo_sapiens_assembly38.fasta", {"chr20": SEQ})


def _gatk_vcf() -> tuple[str, dict[str, str]]:
    """HaplotypeCaller + GenotypeGVCFs on three samples; returns text and expected statuses."""
    header = """##fileformat=VCFv4.2
##ALT=<ID=NON_REF,Description="Represents any possible alternative allele not already represent...">
##FILTER=<ID=LowQual,Description="Low quality">
##FORMAT=<ID=AD,Number=R,Type=Integer,Description="Allelic depths for the ref and alt alleles i...">
##FORMAT=<ID=DP,Number=1,Type=Integer,Description="Approximate read depth (reads with MQ=255 or...">
##FORMAT=<ID=GQ,Number=1,Type=Integer,Description="Genotype Quality">
##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">
##FORMAT=<ID=PGT,Number=1,Type=String,Description="Physical phasing haplotype information">
##FORMAT=<ID=PID,Number=1,Type=String,Description="Physical phasing ID information">
##FORMAT=<ID=PL,Number=G,Type=Integer,Description="Normalized, Phred-scaled likelihoods for gen...">
##GATKCommandLine=<ID=GenotypeGVCFs,CommandLine="Genot...",Version="4.5.0.0",Date="January 5, 2025">
##INFO=<ID=AC,Number=A,Type=Integer,Description="Allele count in genotypes, for each ALT allele...">
##INFO=<ID=AF,Number=A,Type=Float,Description="Allele Frequency, for each ALT allele, in the sa...">
##INFO=<ID=AN,Number=1,Type=Integer,Description="Total number of alleles in called genotypes">
##INFO=<ID=BaseQRankSum,Number=1,Type=Float,Description="Z-score from Wilcoxon rank sum test of...">
##INFO=<ID=DP,Number=1,Type=Integer,Description="Approximate read depth; some reads may have be...">
##INFO=<ID=ExcessHet,Number=1,Type=Float,Description="Phred-scaled p-value for exact test of ex...">
##INFO=<ID=FS,Number=1,Type=Float,Description="Phred-scaled p-value using Fisher's exact test t...">
##INFO=<ID=MLEAC,Number=A,Type=Integer,Description="Maximum likelihood expectation (MLE) for th...">
##INFO=<ID=MLEAF,Number=A,Type=Float,Description="Maximum likelihood expectation (MLE) for the...">
##INFO=<ID=MQ,Number=1,Type=Float,Description="RMS Mapping Quality">
##INFO=<ID=QD,Number=1,Type=Float,Description="Variant Confidence/Quality by Depth">
##INFO=<ID=SOR,Number=1,Type=Float,Description="Symmetric Odds Ratio of 2x2 contingency table t...">
##contig=<ID=chr20,length=5000,assembly=Homo_sapiens_assembly38.fasta>
##source=GenotypeGVCFs
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tNA12878\tNA12891\tNA12892
"""
    s = SEQ
    info = "AC={ac};AF={af};AN=6;DP=87;ExcessHet=3.01;FS=0;MLEAC={ac};MLEAF={af};MQ=60;QD=21.5"
    info += ";SOR=0.7"
    records = [
        # biallelic SNV, phased genotype fields, a no-call
        (
            f"chr20\t101\trs6054257\t{s[100]}\t{_alt(101)}\t2435.6\tPASS\t"
            + info.format(ac=3, af=0.5)
            + "\tGT:AD:DP:GQ:PGT:PID:PL\t0|1:12,14:26:99:0|1:101_G_A:511,0,425\t1/1:0,30:30:90:.:.:1035,90,0\t./.:.:.:.:.:.:."  # noqa: E501
        ),
        # multi-allelic: deletion + a padded SNV (REF carries the deleted base)
        (
            f"chr20\t201\t.\t{s[200:202]}\t{s[200]},{_alt(201)}{s[201]}\t812.3\tPASS\t"
            + info.format(ac="1,2", af="0.167,0.333")
            + "\tGT:AD:DP:GQ:PL\t0/1:10,8,0:18:99:200,0,300,230,330,560\t0/2:9,0,11:20:99:250,280,560,0,290,270\t2/2:0,0,22:22:66:700,700,700,66,66,0"  # noqa: E501
        ),
        # spanning deletion allele '*' next to a SNV
        (
            f"chr20\t202\t.\t{s[201]}\t*,{_alt(202)}\t95.1\tLowQual\t"
            + info.format(ac="1,1", af="0.167,0.167")
            + "\tGT:AD:DP:GQ:PL\t0/1:10,8,0:18:99:200,0,300,230,330,560\t0/2:9,0,11:20:99:250,280,560,0,290,270\t0/0:22,0,0:22:66:0,66,700,66,700,700"  # noqa: E501
        ),
        # triallelic SNV: three ALTs, three rows, per-ALT AC/AF
        (
            f"chr20\t301\t.\t{s[300]}\t{_alt(301, 0)},{_alt(301, 1)}\t500\tPASS\t"
            + info.format(ac="2,1", af="0.333,0.167")
            + "\tGT:AD:DP:GQ:PL\t1/2:0,10,9:19:99:500,300,280,200,0,190\t0/1:10,9,0:19:99:1,2,3,4,5,6\t0/0:20,0,0:20:60:0,60,600,60,600,600"  # noqa: E501
        ),
        # insertion
        (
            f"chr20\t401\t.\t{s[400]}\t{s[400]}TTAG\t300\tPASS\t"
            + info.format(ac=1, af=0.167)
            + "\tGT:AD:DP:GQ:PL\t0/1:10,9:19:99:300,0,400\t0/0:20,0:20:60:0,60,600\t0/0:21,0:21:63:0,63,630"  # noqa: E501
        ),
    ]
    expected = {
        "101": ["ok"],
        "201": ["skipped", "ok"],
        "202": ["skipped", "ok"],
        "301": ["ok", "ok"],
        "401": ["skipped"],
    }
    return header + "\n".join(records) + "\n", expected


def _bcftools_vcf() -> tuple[str, dict[str, str]]:
    """bcftools mpileup | call -mv | norm -m-: split records, two samples, INDEL flag."""
    header = """##fileformat=VCFv4.2
##FILTER=<ID=PASS,Description="All filters passed">
##bcftoolsVersion=1.19+htslib-1.19
##bcftoolsCommand=mpileup -f ref.fa -a AD,DP a.bam b.bam
##reference=file://ref.fa
##contig=<ID=20,length=5000>
##ALT=<ID=*,Description="Represents allele(s) other than observed.">
##INFO=<ID=INDEL,Number=0,Type=Flag,Description="Indicates that the variant is an INDEL.">
##INFO=<ID=IDV,Number=1,Type=Integer,Description="Maximum number of raw reads supporting an indel">
##INFO=<ID=DP,Number=1,Type=Integer,Description="Raw read depth">
##INFO=<ID=DP4,Number=4,Type=Integer,Description="Number of high-quality ref-forward , ref-reve...">
##INFO=<ID=MQ,Number=1,Type=Integer,Description="Average mapping quality">
##INFO=<ID=AC,Number=A,Type=Integer,Description="Allele count in genotypes for each ALT allele...">
##INFO=<ID=AN,Number=1,Type=Integer,Description="Total number of alleles in called genotypes">
##FORMAT=<ID=PL,Number=G,Type=Integer,Description="List of Phred-scaled genotype likelihoods">
##FORMAT=<ID=DP,Number=1,Type=Integer,Description="Number of high-quality bases">
##FORMAT=<ID=AD,Number=R,Type=Integer,Description="Allelic depths (high-quality bases)">
##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">
##bcftools_callVersion=1.19+htslib-1.19
##bcftools_callCommand=call -mv; Date=Sun Jan  5 10:00:00 2025
##bcftools_normCommand=norm -m- -f ref.fa; Date=Sun Jan  5 10:00:01 2025
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ta.bam\tb.bam
"""
    s = SEQ
    records = [
        f"20\t1001\t.\t{s[1000]}\t{_alt(1001)}\t225.4\t.\tDP=40;DP4=10,9,11,10;MQ=60;AC=2;AN=4\tGT:PL:DP:AD\t0/1:255,0,255:20:9,11\t0/1:255,0,255:20:10,10",  # noqa: E501
        f"20\t1001\t.\t{s[1000]}\t{_alt(1001, 1)}\t30.1\t.\tDP=40;DP4=10,9,1,1;MQ=60;AC=1;AN=4\tGT:PL:DP:AD\t0/1:40,0,255:20:18,2\t0/0:0,60,255:20:20,0",  # noqa: E501
        f"20\t1101\t.\t{s[1100:1103]}\t{s[1100]}\t180\t.\tINDEL;IDV=12;DP=35;DP4=8,8,9,10;MQ=60;AC=1;AN=4\tGT:PL:DP:AD\t0/1:200,0,210:17:8,9\t0/0:0,50,255:18:18,0",  # noqa: E501
        f"20\t4999\t.\t{s[4998]}\t{_alt(4999)}\t99\t.\tDP=12;DP4=3,3,3,3;MQ=50;AC=1;AN=4\tGT:PL:DP:AD\t0/1:99,0,99:12:6,6\t./.:.:.:.",  # noqa: E501
    ]
    expected = {"1001": ["ok", "ok"], "1101": ["skipped"], "4999": ["ok"]}
    return header + "\n".join(records) + "\n", expected


def _freebayes_vcf() -> tuple[str, dict[str, str]]:
    """freebayes: complex and MNP alleles, Number=A TYPE/AO, one sample per column."""
    header = """##fileformat=VCFv4.2
##fileDate=20250105
##source=freeBayes v1.3.6
##reference=chr20.fa
##contig=<ID=chr20,length=5000>
##phasing=none
##commandline="freebayes -f chr20.fa s1.bam s2.bam"
##INFO=<ID=NS,Number=1,Type=Integer,Description="Number of samples with data">
##INFO=<ID=DP,Number=1,Type=Integer,Description="Total read depth at the locus">
##INFO=<ID=AO,Number=A,Type=Integer,Description="Alternate allele observation count">
##INFO=<ID=RO,Number=1,Type=Integer,Description="Count of full observations of the reference ha...">
##INFO=<ID=TYPE,Number=A,Type=String,Description="The type of allele, either snp, mnp, ins, del...">
##INFO=<ID=CIGAR,Number=A,Type=String,Description="The extended CIGAR representation of each al...">
##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">
##FORMAT=<ID=GQ,Number=1,Type=Float,Description="Genotype Quality">
##FORMAT=<ID=DP,Number=1,Type=Integer,Description="Read Depth">
##FORMAT=<ID=AD,Number=R,Type=Integer,Description="Number of observation for each allele">
##FORMAT=<ID=GL,Number=G,Type=Float,Description="Genotype Likelihood">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ts1\ts2
"""
    s = SEQ
    complex_alt = s[2000] + _alt(2002) + s[2002]  # TCA -> TGA: a SNV at 2002 in freebayes' form
    mnp_alt = _alt(2101) + _alt(2102)
    records = [
        f"chr20\t2001\t.\t{s[2000:2003]}\t{complex_alt},{s[2000]}\t310.5\t.\tNS=2;DP=30;AO=9,3;RO=18;TYPE=complex,del;CIGAR=1M1X1M,1M2D\tGT:GQ:DP:AD:GL\t0/1:99:15:9,6,0:-20,0,-30,-40,-35,-60\t1/2:80:15:0,3,3:-50,-10,-40,-9,0,-30",  # noqa: E501
        f"chr20\t2101\t.\t{s[2100:2102]}\t{mnp_alt}\t150\t.\tNS=2;DP=20;AO=6;RO=14;TYPE=mnp;CIGAR=2X\tGT:GQ:DP:AD:GL\t0/1:60:10:4,6:-10,0,-20\t0/0:50:10:10,0:0,-3,-30",  # noqa: E501
    ]
    expected = {"2001": ["ok", "skipped"], "2101": ["skipped"]}
    return header + "\n".join(records) + "\n", expected


def _gvcf() -> tuple[str, dict[str, str]]:
    """HaplotypeCaller -ERC GVCF: reference blocks (<NON_REF> only) and a variant site."""
    header = """##fileformat=VCFv4.2
##ALT=<ID=NON_REF,Description="Represents any possible alternative allele at this location">
##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">
##FORMAT=<ID=MIN_DP,Number=1,Type=Integer,Description="Minimum DP observed within the GVCF block">
##GVCFBlock0-1=minGQ=0(inclusive),maxGQ=1(exclusive)
##INFO=<ID=END,Number=1,Type=Integer,Description="Stop position of the interval">
##contig=<ID=chr20,length=5000>
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tNA12878
"""
    s = SEQ
    records = [
        f"chr20\t1\t.\t{s[0]}\t<NON_REF>\t.\t.\tEND=3000\tGT:MIN_DP\t0/0:20",
        f"chr20\t3001\t.\t{s[3000]}\t{_alt(3001)},<NON_REF>\t512\t.\t.\tGT\t0/1",
    ]
    return header + "\n".join(records) + "\n", {"1": ["skipped"], "3001": ["ok", "skipped"]}


CALLERS = {"gatk": _gatk_vcf, "bcftools": _bcftools_vcf, "freebayes": _freebayes_vcf, "gvcf": _gvcf}


def _write(tmp_path: Path, text: str, compression: str) -> Path:
    plain = tmp_path / "calls.vcf"
    plain.write_text(text)
    if compression == "vcf":
        return plain
    if compression == "bgzip":
        pysam.tabix_compress(str(plain), str(tmp_path / "calls.vcf.gz"))
        return tmp_path / "calls.vcf.gz"
    with (
        pysam.VariantFile(str(plain)) as src,
        pysam.VariantFile(str(tmp_path / "calls.bcf"), "wb", header=src.header) as out,
    ):
        for record in src:
            out.write(record)
    return tmp_path / "calls.bcf"


@pytest.mark.parametrize("compression", ["vcf", "bgzip", "bcf"])
@pytest.mark.parametrize("caller", list(CALLERS))
def test_caller_vcfs_every_alt_gets_its_status(tmp_path, caller, compression):
    text, expected = CALLERS[caller]()
    path = _write(tmp_path, text, compression)
    with open_reference(_genome(tmp_path)) as ref:
        checked, summary = ingest_panel(path, ref, PanelSettings("hg38", info_fields=("*",)))
    got: dict[str, list[str]] = {}
    for row in checked.iter_rows(named=True):
        got.setdefault(row["input_pos"], []).append(row["status"])
    assert got == expected
    assert summary["n_rows"] == sum(len(v) for v in expected.values()) == checked.height
    assert sum(summary["status_counts"].values()) == checked.height
    assert set(checked["ref_chrom"]) == {"chr20"}


def test_gatk_per_alt_info_and_trimmed_snv(tmp_path):
    text, _ = _gatk_vcf()
    with open_reference(_genome(tmp_path)) as ref:
        checked, _ = ingest_panel(
            _write(tmp_path, text, "bgzip"),
            ref,
            PanelSettings("hg38", info_fields=("AC", "AF", "DP")),
        )
    site = checked.filter(pl.col("input_pos") == "301")
    assert site["AC"].to_list() == [2, 1] and site["DP"].to_list() == [87, 87]
    assert site["AF"].to_list() == pytest.approx([0.333, 0.167])
    padded = checked.filter((pl.col("input_pos") == "201") & (pl.col("status") == "ok")).row(
        0, named=True
    )
    assert (padded["pos"], padded["ref"], padded["alt"]) == (201, SEQ[200], _alt(201))
    assert padded["input_ref"] == SEQ[200:202] and padded["AC"] == 2
    star = checked.filter(pl.col("input_alt") == "*").row(0, named=True)
    assert star["variant_type"] == "symbolic" and star["filter"] == "LowQual"


def test_freebayes_complex_allele_is_the_snv_it_contains(tmp_path):
    text, _ = _freebayes_vcf()
    with open_reference(_genome(tmp_path)) as ref:
        options = PanelSettings("hg38", info_fields=("TYPE",))
        checked, _ = ingest_panel(_write(tmp_path, text, "vcf"), ref, options)
    row = checked.row(0, named=True)
    assert (row["pos"], row["ref"], row["alt"], row["TYPE"]) == (
        2002,
        SEQ[2001],
        _alt(2002),
        "complex",
    )
