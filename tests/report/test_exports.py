"""Exports, read back the way annotation tools read them (pysam tabix / VariantFile)."""

import gzip
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pysam
import pytest
from support.exports import export_unscored_panel

from carbon_vep.atomic import index_of
from carbon_vep.config.stages import PanelSettings
from carbon_vep.report import table_slices
from carbon_vep.report.exports import export_tabix, write_tabix_tsv
from carbon_vep.report.vcf_export import (
    carried_infos,
    export_vcf,
    vcf_index_suffix,
    write_results_vcf,
)
from carbon_vep.variants.panel import read_panel

# (batch rows, REREAD_LIMIT, SPILL_FILES): batches read from their slices (a limit no table
# reaches), or dealt to spill files (limit 0), one batch a file, or two or three
READ_BACK_WAYS = [
    (2, 10**9, 128),
    (3, 10**9, 128),
    (5, 10**9, 128),
    (2, 0, 128),
    (3, 0, 2),
    (2, 0, 1),
    (5, 0, 2),
]

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


def test_tabix_tsv_in_batches_writes_the_same_bytes_as_in_one(tmp_path, monkeypatch):
    import gzip

    from carbon_vep.report import exports

    whole = write_tabix_tsv(SNVS, tmp_path / "whole" / "s.tsv.gz", ["score", "p_ref"])
    monkeypatch.setattr(exports, "TSV_BATCH_ROWS", 2)  # 5 rows: three batches, one header
    batched = write_tabix_tsv(SNVS, tmp_path / "batched" / "s.tsv.gz", ["score", "p_ref"])
    assert batched.read_bytes() == whole.read_bytes()
    lines = gzip.decompress(batched.read_bytes()).decode().splitlines()
    assert len(lines) == 1 + SNVS.height and lines[0].startswith("#chrom")
    empty = write_tabix_tsv(SNVS.clear(), tmp_path / "empty.tsv.gz", ["score"])
    assert gzip.decompress(empty.read_bytes()).decode() == "#chrom\tpos\tref\talt\tscore\n"


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
    out = export_unscored_panel(tmp_path, panel, info_fields)

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


@pytest.mark.parametrize(("third_bp", "index"), [(248_956_422, "tbi"), (700_000_000, "csi")])
def test_results_vcf_index_follows_every_reference_contig_as_the_workflow_reads_it(
    tmp_path, third_bp, index
):
    """The workflow asks for the index a VCF's header calls for (`vcf_index_suffix`, read once
    export_vcf, a checkpoint, has written it with --no-index): export-vcf alone writes the
    same, from every contig of the reference, none of whose records may be on the long one."""
    out = tmp_path / "results.vcf.gz"
    lengths = {"chr1": 1000, "chr2": 500, "1H": third_bp}  # no record on 1H
    write_results_vcf(_merged(), lengths, out, index=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.vcf.gz"]
    assert vcf_index_suffix(out) == f".{index}"
    write_results_vcf(_merged(), lengths, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name, f"{out.name}.{index}"]


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


def _fasta(tmp_path) -> str:
    fasta = tmp_path / "ref.fa"
    fasta.write_text(">chr1\n" + "ACGT" * 25 + "\n")  # 100 bp: POS 1 A, 2 C, 3 G, 4 T, ...
    pysam.faidx(str(fasta))
    return str(fasta)


def _bcftools_ok(*argv: str) -> str:
    done = subprocess.run([_bcftools(), *argv], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_results_vcf_leaves_out_rows_that_cannot_be_valid_records(tmp_path):
    """POS 0 (pysam refused it: the export crashed after all scoring), a REF past the contig's
    end, and alleles a table panel may hold that are not VCF's (`-`, IUPAC, a space): left out
    and counted; what is written passes `bcftools norm -c e -f FASTA`."""
    cases = [  # (pos, ref, alt)
        (1, "A", "G"),  # the one valid record
        (0, "A", "G"),
        (100, "TA", "T"),  # REF ends past the 100 bp contig
        (101, "A", "G"),
        (2, "-", "T"),
        (3, "G", "-"),
        (4, "T", "R"),
        (5, "A", "A C"),
    ]
    merged = pl.DataFrame(
        {
            "chrom": ["1"] * len(cases),
            "ref_chrom": ["chr1"] * len(cases),
            "pos": [c[0] for c in cases],
            "ref": [c[1] for c in cases],
            "alt": [c[2] for c in cases],
            "status": ["scored"] + ["invalid"] * (len(cases) - 1),
            "reason": [""] * len(cases),
            "score": [0.5] + [None] * (len(cases) - 1),
        }
    )
    out = tmp_path / "results.vcf.gz"
    assert write_results_vcf(merged, {"chr1": 100}, out, {"score": "s"}) == len(cases) - 1
    with pysam.VariantFile(str(out)) as vcf:
        meta = {r.key: r.value for r in vcf.header.records if r.key.startswith("carbon_vep")}
        assert meta["carbon_vep_rows_not_written"] == str(len(cases) - 1)
        assert [(r.pos, r.ref, r.alts) for r in vcf] == [(1, "A", ("G",))]
    _bcftools_ok("norm", "-c", "e", "-f", _fasta(tmp_path), "-Ov", str(out))


def test_results_vcf_renames_panel_fields_that_collide_with_its_own(tmp_path):
    """A panel annotated with an earlier results.vcf.gz (or the docs' bcftools / vcfanno
    recipe) holds CVEP_SCORE and CVEP_PHRED: with `info_fields: "*"` they are carried as
    panel_CVEP_*, the renames in a header line, instead of stopping the export at the end."""
    panel = tmp_path / "panel.vcf"
    panel.write_text(
        "##fileformat=VCFv4.2\n##contig=<ID=1,length=100>\n"
        '##INFO=<ID=CVEP_SCORE,Number=A,Type=Float,Description="an earlier score">\n'
        '##INFO=<ID=CVEP_PHRED,Number=A,Type=Float,Description="an earlier phred">\n'
        '##INFO=<ID=CVEP_DELTA,Number=A,Type=Float,Description="an earlier delta">\n'
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
        "1\t2\t.\tC\tT\t.\t.\tCVEP_SCORE=9.5;CVEP_PHRED=30;CVEP_DELTA=0.25\n"
    )
    rows = read_panel(panel, info_fields=("*",))
    merged = rows.with_columns(
        pl.lit("chr1").alias("ref_chrom"),
        pl.lit("scored").alias("status"),
        pl.lit("").alias("reason"),
        pl.lit(1.25).alias("score"),
        pl.lit(12.0).alias("phred"),
    )
    merged.write_parquet(tmp_path / "scores.parquet")
    out = tmp_path / "results.vcf.gz"
    settings = PanelSettings(build="hg38", info_fields=("*",))
    export_vcf(
        str(tmp_path / "scores.parquet"), _fasta(tmp_path), {}, str(out), str(panel), settings
    )
    with pysam.VariantFile(str(out)) as vcf:
        meta = {r.key: r.value for r in vcf.header.records if r.key.startswith("carbon_vep")}
        assert meta["carbon_vep_panel_info_renamed"] == (
            "CVEP_SCORE->panel_CVEP_SCORE,CVEP_PHRED->panel_CVEP_PHRED,CVEP_DELTA->panel_CVEP_DELTA"
        )
        assert "CVEP_DELTA" not in vcf.header.info  # this run has no delta: the panel's renamed
        assert "earlier score" in vcf.header.info["panel_CVEP_SCORE"].description
        (record,) = list(vcf)
    assert record.info["CVEP_SCORE"] == (1.25,) and record.info["panel_CVEP_SCORE"] == (9.5,)
    assert record.info["CVEP_PHRED"] == (12.0,) and record.info["panel_CVEP_PHRED"] == (30.0,)
    assert record.info["panel_CVEP_DELTA"] == (0.25,)
    _bcftools_ok("view", "-Ob", "-o", str(tmp_path / "r.bcf"), str(out))


def test_results_vcf_carries_all_of_a_table_panels_columns_typed_with_star(tmp_path):
    """`info_fields: "*"` on a table panel carries its other columns (docs/inputs.md: "carried
    to every output"), each INFO Type from its dtype; the pipeline's columns are not."""
    merged = _merged().with_columns(
        pl.Series("myid", ["a", "b", "c", "d", "e", "f"]),
        pl.Series("af", [0.5, 0.25, None, 0.125, 0.0, 1.0]),
        pl.Series("n", [1, 2, 3, 4, 5, 6]),
        pl.Series("big", [1, 2, 3, 4, 5, 2**40]),  # past VCF's Integer: text
        pl.Series("common", [True, False, True, True, False, False]),
    )
    carried = carried_infos(merged, ["*"], None)
    types = {c: (info["Number"], info["Type"]) for c, info in carried.items()}
    assert types == {
        "myid": ("1", "String"),
        "af": ("1", "Float"),
        "n": ("1", "Integer"),
        "big": ("1", "String"),
        "common": ("0", "Flag"),
    }
    out = tmp_path / "results.vcf.gz"
    write_results_vcf(merged, {"chr1": 1000, "chr2": 500}, out, {"score": "s"}, carried=carried)
    records = {(r.chrom, r.pos, r.alts[0]): dict(r.info) for r in pysam.VariantFile(str(out))}
    first = records[("chr1", 10, "A")]
    assert (first["myid"], first["af"], first["n"], first["common"]) == ("a", 0.5, 1, True)
    assert "common" not in records[("chr1", 3, "T")] and "af" not in records[("chr2", 5, "<DEL>")]
    _bcftools_ok("view", "-Ob", "-o", str(tmp_path / "r.bcf"), str(out))


def test_results_vcf_writes_padded_snvs_as_the_panel_wrote_them(tmp_path):
    """A padded SNV (GG>AG, scored as G>A) keeps the panel's POS and alleles, so
    `bcftools annotate -a results.vcf.gz` puts the score back on the user's own record."""
    panel = tmp_path / "panel.vcf"
    panel.write_text(  # chr1: POS 1 A, 2 C, 3 G, 4 T, 5 A, 6 C, 7 G
        "##fileformat=VCFv4.2\n##contig=<ID=chr1,length=100>\n"
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
        "chr1\t2\tsuffix\tCG\tTG\t.\t.\t.\n"  # scored as C>T at 2
        "chr1\t5\tprefix\tAC\tAT\t.\t.\t.\n"  # scored as C>T at 6
    )
    merged = pl.DataFrame(
        {
            "chrom": ["chr1", "chr1"],
            "pos": [2, 6],
            "ref": ["C", "C"],
            "alt": ["T", "T"],
            "input_pos": ["2", "5"],
            "input_ref": ["CG", "AC"],
            "input_alt": ["TG", "AT"],
            "status": ["scored", "scored"],
            "reason": ["", ""],
            "score": [1.5, -0.5],
        }
    )
    out = tmp_path / "results.vcf.gz"
    assert write_results_vcf(merged, {"chr1": 100}, out, {"score": "s"}) == 0
    with pysam.VariantFile(str(out)) as vcf:
        assert [(r.pos, r.ref, r.alts[0]) for r in vcf] == [(2, "CG", "TG"), (5, "AC", "AT")]
    _bcftools_ok("norm", "-c", "e", "-f", _fasta(tmp_path), "-Ov", str(out))
    indexed = pysam.tabix_index(str(panel), preset="vcf")  # bcftools reads both indexed
    annotated = _bcftools_ok("annotate", "-a", str(out), "-c", "INFO/CVEP_SCORE", indexed)
    scores = [line.split("\t")[7] for line in annotated.splitlines() if line.startswith("chr1")]
    assert scores == ["CVEP_SCORE=1.5", "CVEP_SCORE=-0.5"]


def test_export_tabix_of_panel_scores_uses_reference_contigs_and_skips_unplaced(tmp_path):
    """A panel's scores.parquet: rows on the reference's contig (`ref_chrom`, not the panel's
    `17`); a row without POS or on a contig the reference lacks is left out and counted
    (they stopped the export: contig order, `building of index failed`)."""
    scores = tmp_path / "scores.parquet"
    pl.DataFrame(
        {
            "chrom": ["1", "1", "1", "weird"],
            "ref_chrom": ["chr1", "chr1", "chr1", None],
            "pos": [3, None, 1, 7],
            "ref": ["G", "A", "A", "A"],
            "alt": ["T", "G", "C", "C"],
            "score": [0.5, None, 1.5, None],
        }
    ).write_parquet(scores)
    out = tmp_path / "scores.tsv.gz"
    assert export_tabix(str(scores), ["score"], _fasta(tmp_path), str(out)) == 2
    table = pysam.TabixFile(str(out))
    assert list(table.contigs) == ["chr1"]
    assert [r.split("\t")[1:] for r in table.fetch("chr1")] == [
        ["1", "A", "C", "1.5"],
        ["3", "G", "T", "0.5"],
    ]


def test_export_commands_name_the_file_a_bad_input_is_in(tmp_path, caplog, monkeypatch):
    """`export-tabix` / `export-vcf` on a misspelt column, a missing or non-Parquet file, or an
    output not ending in .gz: exit 2 with a message naming the file (and the columns it has),
    not a traceback, and nothing written."""
    from carbon_vep.cli import main

    monkeypatch.chdir(tmp_path)
    scores = tmp_path / "snvs.parquet"
    SNVS.write_parquet(scores)
    fasta = _fasta(tmp_path)
    not_parquet = tmp_path / "panel.vcf"
    not_parquet.write_text("##fileformat=VCFv4.2\n")
    tabix = ["export-tabix", "--out", str(tmp_path / "out.tsv.gz")]
    vcf = ["export-vcf", "--reference", fasta, "--out", str(tmp_path / "out.vcf.gz")]
    cases = [
        (
            [*tabix, "--scores", str(scores), "--column", "scor"],
            "snvs.parquet: no column scor (its columns: chrom, pos, ref, alt, score, p_ref, p_alt)",
        ),
        ([*tabix, "--scores", str(tmp_path / "nope.parquet"), "--column", "score"], "nope.parquet"),
        ([*tabix, "--scores", str(not_parquet), "--column", "score"], "panel.vcf: cannot read"),
        (
            ["export-tabix", "--scores", str(scores), "--column", "score", "--out", "o.tsv"],
            "o.tsv: a tabix-indexed table must end in .gz",
        ),
        ([*vcf, "--merged", str(scores), "--field", "nope=x"], "snvs.parquet: no column nope"),
        ([*vcf, "--merged", str(tmp_path / "nope.parquet")], "nope.parquet: cannot read"),
    ]
    for args, message in cases:
        caplog.clear()
        assert main(args) == 2, args
        assert message in caplog.text, caplog.text
        assert "Traceback" not in caplog.text
    assert not list(tmp_path.glob("out.*")) and not list(tmp_path.glob("o.tsv*"))


# rows of one contig apart and out of order in the table, ties at one POS, contigs the
# reference orders chr2, chr10, chr1 (not alphabetically), chr3 without rows, and two contigs
# it lacks whose first rows come weird2 then weird1
SCATTERED = [  # (chrom, ref_chrom, pos, ref, alt, filter)
    ("1", "chr1", 50, "A", "G", "q10"),
    ("10", "chr10", 7, "C", "T", None),
    ("2", "chr2", 30, "G", "A", "PASS"),
    ("weird2", None, 5, "A", "C", None),
    ("1", "chr1", 10, "T", "C", "lowq;q10"),
    ("2", "chr2", 30, "G", "C", None),
    ("weird1", None, 3, "G", "T", None),
    ("1", "chr1", 50, "A", "T", "s50"),
    ("2", "chr2", 5, "C", "G", None),
    ("10", "chr10", 7, "C", "A", None),
    ("1", "chr1", 10, "T", "G", None),
    ("2", "chr2", 30, "G", "T", None),
]


def test_results_vcf_in_batches_sorts_scattered_rows_as_in_one(tmp_path, monkeypatch):
    """The records are read back a batch at a time in the VCF's order (`vcf_records`): with
    batches and table slices of 2, 3 and 5 rows, a contig's rows spread over every slice and ties at
    one POS across batches, the file is the same bytes as in one batch, in reference order
    (POS ties in the table's order), every reference contig declared, FILTERs declared in the
    order the records carry them."""
    from carbon_vep.report import vcf_records

    merged = pl.DataFrame(
        SCATTERED,
        schema=["chrom", "ref_chrom", "pos", "ref", "alt", "filter"],
        orient="row",
    ).with_columns(
        pl.lit("scored").alias("status"),
        pl.lit("").alias("reason"),
        (pl.int_range(pl.len()) / 4).alias("score"),
    )
    merged.write_parquet(tmp_path / "scores.parquet", row_group_size=4)
    lengths = {"chr2": 1000, "chr10": 1000, "chr1": 1000, "chr3": 1000}
    whole = tmp_path / "whole.vcf.gz"
    write_results_vcf(merged, lengths, whole, {"score": "s"})
    scan = pl.scan_parquet(tmp_path / "scores.parquet")
    # batches ending on, and crossing, the slices' starts; each read from its slices, or the
    # table dealt to spill files (a run of batches a file, one or two batches a run)
    for batch_rows, reread_limit, spill_files in READ_BACK_WAYS:
        monkeypatch.setattr(vcf_records, "BATCH_ROWS", batch_rows)
        monkeypatch.setattr(table_slices, "REREAD_LIMIT", reread_limit)
        monkeypatch.setattr(table_slices, "SPILL_FILES", spill_files)
        batched = tmp_path / f"batched{batch_rows}-{reread_limit}-{spill_files}.vcf.gz"
        assert write_results_vcf(scan, lengths, batched, {"score": "s"}) == 0
        assert gzip.decompress(batched.read_bytes()) == gzip.decompress(whole.read_bytes())
    assert not list(tmp_path.glob(".*spill*"))  # the spill folders are gone

    with pysam.VariantFile(str(batched)) as vcf:
        assert list(vcf.header.contigs) == ["chr2", "chr10", "chr1", "chr3", "weird2", "weird1"]
        assert list(vcf.header.filters) == ["PASS", "lowq", "q10", "s50"]
        records = [(r.chrom, r.pos, r.alts[0], r.info["CVEP_SCORE"][0]) for r in vcf]
        assert [r.pos for r in vcf.fetch("chr1")] == [10, 10, 50, 50]  # the index works
    row = {(c, p, a): i for i, (_, c, p, _, a, _) in enumerate(SCATTERED)}
    expected = [
        ("chr2", 5, "G"),
        ("chr2", 30, "A"),
        ("chr2", 30, "C"),
        ("chr2", 30, "T"),
        ("chr10", 7, "T"),
        ("chr10", 7, "A"),
        ("chr1", 10, "C"),
        ("chr1", 10, "G"),
        ("chr1", 50, "G"),
        ("chr1", 50, "T"),
        (None, 5, "C"),
        (None, 3, "T"),
    ]
    got = [(c if c.startswith("chr") else None, p, a) for c, p, a, _ in records]
    assert got == expected
    # each record has its own row's score: rows were not mixed up across batches
    assert [s for *_, s in records] == [row[(c, p, a)] / 4 for c, p, a in expected]


def test_export_tabix_in_batches_sorts_scattered_rows_as_in_one(tmp_path, monkeypatch):
    """export-tabix reads its lines back a batch at a time in the table's sort (`exports`,
    `table_slices`): with batches and slices of 2 and 3 rows, chr1's rows spread over every
    slice, three alleles at one POS (a position is never split over two batches: its lines
    are sorted by allele within one), a key twice (the table's order) and null scores, the file
    is the same bytes as in one batch, lines in the reference's order (chr2 before chr1), and
    the reference's contig without rows (chr3) and the unplaced rows are left out."""
    from carbon_vep.report import exports

    fasta = tmp_path / "ref.fa"
    fasta.write_text("".join(f">{c}\n" + "ACGT" * 25 + "\n" for c in ("chr2", "chr1", "chr3")))
    pysam.faidx(str(fasta))
    rows = [  # (chrom, pos, ref, alt, score)
        ("chr1", 50, "A", "T", 0.5),
        ("chr2", 7, "C", "A", None),
        ("chr1", 10, "T", "G", 1.0),
        ("chr1", 50, "A", "C", 2.0),
        ("weird", 3, "G", "T", 9.0),  # a contig the reference lacks: left out
        ("chr1", 50, "A", "G", None),
        ("chr2", 7, "C", "A", 3.0),  # the same key again: after the first, as in the table
        ("chr1", None, "A", "G", 9.0),  # no POS: left out
        ("chr1", 10, "T", "C", -1.0),
    ]
    pl.DataFrame(rows, schema=["chrom", "pos", "ref", "alt", "score"], orient="row").write_parquet(
        tmp_path / "scores.parquet", row_group_size=3
    )
    one = tmp_path / "one.tsv.gz"
    assert export_tabix(str(tmp_path / "scores.parquet"), ["score"], str(fasta), str(one)) == 2
    for size, reread_limit, spill_files in READ_BACK_WAYS:
        monkeypatch.setattr(exports, "TSV_BATCH_ROWS", size)
        monkeypatch.setattr(table_slices, "REREAD_LIMIT", reread_limit)
        monkeypatch.setattr(table_slices, "SPILL_FILES", spill_files)
        batched = tmp_path / f"batched{size}-{reread_limit}-{spill_files}.tsv.gz"
        export_tabix(str(tmp_path / "scores.parquet"), ["score"], str(fasta), str(batched))
        assert batched.read_bytes() == one.read_bytes()
        assert Path(f"{batched}.tbi").read_bytes() == (tmp_path / "one.tsv.gz.tbi").read_bytes()
    assert not list(tmp_path.glob(".*spill*"))
    lines = gzip.decompress(one.read_bytes()).decode().splitlines()
    assert lines == [
        "#chrom\tpos\tref\talt\tscore",
        "chr2\t7\tC\tA\t.",
        "chr2\t7\tC\tA\t3.0",
        "chr1\t10\tT\tC\t-1.0",
        "chr1\t10\tT\tG\t1.0",
        "chr1\t50\tA\tC\t2.0",
        "chr1\t50\tA\tG\t.",
        "chr1\t50\tA\tT\t0.5",
    ]
    table = pysam.TabixFile(str(batched))
    assert list(table.contigs) == ["chr2", "chr1"]
    assert [r.split("\t")[3] for r in table.fetch("chr1", 49, 50)] == ["C", "G", "T"]


def test_tabix_tsv_batches_end_where_a_position_ends(monkeypatch):
    """A batch of sorted keys is cut only where a position ends, so a position with more
    lines than a batch holds is one (larger) batch, and every line is in exactly one."""
    from carbon_vep.report import exports

    keys = pl.DataFrame(
        {"_rank": [0, 0, 0, 0, 0, 0, 1, 1], "pos": [1, 2, 2, 2, 2, 3, 3, 4], "_row": range(8)}
    )
    assert list(exports._batch_ends(keys, 2)) == [(0, 5), (5, 7), (7, 8)]
    assert list(exports._batch_ends(keys, 1)) == [(0, 1), (1, 5), (5, 6), (6, 7), (7, 8)]
    assert list(exports._batch_ends(keys, 100)) == [(0, 8)]
    assert list(exports._batch_ends(keys.clear(), 2)) == []
