import gzip
from pathlib import Path

import polars as pl
import pysam
import pytest

from carbon_vep.columns import PANEL_KEY as KEY
from carbon_vep.columns import RESERVED as RESERVED_COLUMNS
from carbon_vep.errors import InputError
from carbon_vep.variants.panel import read_panel

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
    path.write_text("chromo,pos,ref,alt\n1,2,A,C\n")
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


# ---- VCF details -------------------------------------------------------------------------
def test_info_flag_number_r_and_vcf_columns(tmp_path):
    header = VCF_HEADER.replace(
        "##FORMAT", '##INFO=<ID=AD,Number=R,Type=Integer,Description="Depth per allele">\n##FORMAT'
    )
    path = tmp_path / "p.vcf"
    info = "AD=7,2,1;CLNSIG=Benign,_other"
    path.write_text(
        header + f"1\t100\trs9\tT\tG,C\t37.5\tq10;LowQual\t{info}\tGT\t0/1\t1/2\n"
        "1\t200\t.\tA\tC\t.\t.\tDB\tGT\t0/0\t0/1\n"
    )
    panel = read_panel(path, info_fields=["AD", "DB", "CLNSIG"])
    assert panel["AD"].to_list() == ["7,2", "7,1", None]  # REF's value and this ALT's
    assert panel["DB"].to_list() == [False, False, True]  # an absent flag is False, not null
    assert panel["CLNSIG"].to_list() == ["Benign,_other", "Benign,_other", None]
    assert panel["id"].to_list() == ["rs9", "rs9", None]
    assert panel["qual"].to_list() == [37.5, 37.5, None]
    assert panel["filter"].to_list() == ["q10;LowQual", "q10;LowQual", None]
    assert panel["alt_index"].to_list() == [1, 2, 1]
    assert panel["input_pos"].to_list() == ["100", "100", "200"]


def test_all_info_fields_and_reserved_names_renamed(tmp_path):
    header = VCF_HEADER.replace(
        "##FORMAT", '##INFO=<ID=score,Number=1,Type=Float,Description="a user score">\n##FORMAT'
    )
    path = tmp_path / "p.vcf"
    path.write_text(header + "1\t100\t.\tT\tG\t.\tPASS\tAF=0.5;score=3.5\tGT\t0/1\t0/1\n")
    panel = read_panel(path, info_fields=["*"])
    assert {"AF", "CLNSIG", "DB", "panel_score"} <= set(panel.columns)
    assert "score" not in panel.columns  # the pipeline's own score column will not clash
    assert panel["panel_score"].to_list() == [3.5]


def test_undeclared_info_field_that_never_occurs_is_an_error(tmp_path):
    vcf = write_vcf(tmp_path / "p.vcf", ["1\t100\t.\tT\tG\t.\tPASS\tAF=0.5\tGT\t0/1\t0/1"])
    with pytest.raises(InputError, match=r"p\.vcf: INFO field\(s\) \['LABLE'\].*declared"):
        read_panel(vcf, info_fields=["LABLE"])


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ("1\tabc\t.\tT\tG\t.\tPASS\t.\tGT\t0/1\t0/1", r"position 'abc'"),
        ("1 300 . T G . PASS . GT 0/1 0/1", r"not tab-separated"),
        ("1\t300\t.\tT", r"1\\t300"),
        ("", r"blank line between records"),
    ],
    ids=["non-integer-pos", "spaces", "truncated-line", "blank"],
)
def test_malformed_vcf_line_is_named(tmp_path, bad_line, expected):
    records = [
        "1\t100\t.\tT\tG\t.\tPASS\t.\tGT\t0/1\t0/1",
        bad_line,
        "1\t400\t.\tA\tC\t.\t.\t.\tGT\t0/1\t0/1",
    ]
    vcf = write_vcf(tmp_path / "bad.vcf", records)
    bad_line_number = VCF_HEADER.count("\n") + 2
    with pytest.raises(InputError, match=rf"bad\.vcf:{bad_line_number}: malformed .*{expected}"):
        read_panel(vcf)


def test_plain_gzip_bgzip_and_bcf_read_the_same_rows(tmp_path):
    records = [
        "1\t100\trs1\tT\tG,C\t50\tPASS\tAF=0.1,0.2\tGT\t0/1\t1/2",
        "1\t200\t.\tA\t<DEL>\t.\tPASS\tEND=260\tGT\t0/0\t0/1",
    ]
    text = write_vcf(tmp_path / "p.vcf", records)
    end = '##INFO=<ID=END,Number=1,Type=Integer,Description="End">\n##FORMAT'
    text.write_text(text.read_text().replace("##FORMAT", end, 1))
    (tmp_path / "plain.vcf.gz").write_bytes(gzip.compress(text.read_bytes()))
    pysam.tabix_compress(str(text), str(tmp_path / "bg.vcf.gz"))
    with (
        pysam.VariantFile(str(text)) as src,
        pysam.VariantFile(str(tmp_path / "p.bcf"), "wb", header=src.header) as out,
    ):
        for record in src:
            out.write(record)
    frames = {
        p: read_panel(tmp_path / p, info_fields=["AF"])
        for p in ("p.vcf", "plain.vcf.gz", "bg.vcf.gz", "p.bcf")
    }
    key = ["chrom", "pos", "ref", "alt", "AF"]
    for name, frame in frames.items():
        assert frame.select(key).equals(frames["p.vcf"].select(key)), name
    first_line = 1 + sum(line.startswith("#") for line in text.read_text().splitlines())
    assert frames["bg.vcf.gz"]["source"][0] == f"{tmp_path / 'bg.vcf.gz'}:line {first_line}"
    assert frames["p.bcf"]["source"].to_list()[-1].endswith("p.bcf:record 2")


def test_truncated_bgzip_vcf_is_named(tmp_path):
    text = write_vcf(tmp_path / "p.vcf", ["1\t100\t.\tT\tG\t.\tPASS\t.\tGT\t0/1\t0/1"] * 50)
    pysam.tabix_compress(str(text), str(tmp_path / "p.vcf.gz"))
    data = (tmp_path / "p.vcf.gz").read_bytes()
    (tmp_path / "cut.vcf.gz").write_bytes(data[:-28])  # the BGZF end-of-file block is gone
    with pytest.raises(InputError, match=r"cut\.vcf\.gz: .*(truncated|EOF)"):
        read_panel(tmp_path / "cut.vcf.gz")


# ---- tables ------------------------------------------------------------------------------
def test_tsv_comments_blank_lines_and_line_numbers(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text(
        "##source=my pipeline\n##build=hg38\n#CHROM\tPOS\tREF\tALT\tlabel\n"
        "chr1\t10\tA\tC\t1\n\nchr1\t1,234\tG\tT\t0\nchr1\t12.0\tG\tT\t0\nchr1\t13.5\tG\tT\t\n\n"
    )
    panel = read_panel(path)
    assert panel["source"].to_list() == [f"{path}:line {n}" for n in (4, 6, 7, 8)]
    assert panel["pos"].to_list() == [10, None, 12, None]
    assert panel["input_pos"].to_list() == ["10", "1,234", "12.0", "13.5"]
    assert panel["label"].to_list() == [1, 0, 0, None]


def test_a_tsv_quoted_by_r_reads_as_its_unquoted_twin(tmp_path):
    """R's write.table quotes every text field, the header's names too: read as a CSV's quotes
    are (they were read as characters: `"chrom"` was no key column). In a TSV whose header is
    not quoted, a quote stays a character (a note may hold one)."""
    quoted = tmp_path / "r.tsv"
    quoted.write_text(
        '"chrom"\t"pos"\t"ref"\t"alt"\t"note"\n'
        '"chr1"\t10\t"A"\t"C"\t"a ""tab\there"""\n"chr1"\t11\t"G"\t"T"\tNA\n'
    )
    plain = tmp_path / "plain.tsv"
    plain.write_text('chrom\tpos\tref\talt\tnote\nchr1\t10\tA\tC\t5" of "x\nchr1\t11\tG\tT\tNA\n')
    read, twin = read_panel(quoted), read_panel(plain)
    assert read.drop("source", "note").equals(twin.drop("source", "note"))
    assert read["note"].to_list() == ['a "tab\there"', "NA"]
    assert twin["note"].to_list() == ['5" of "x', "NA"]
    assert read["source"].to_list() == [f"{quoted}:line {n}" for n in (2, 3)]
    ragged = tmp_path / "ragged.tsv"  # a quoted tab is no separator; the count names line 3
    ragged.write_text('"chrom"\t"pos"\t"ref"\t"alt"\n"1"\t10\t"A"\t"C\tG"\n"1"\t11\t"A"\n')
    with pytest.raises(InputError, match=r"ragged\.tsv:3: 3 fields where the header has 4$"):
        read_panel(ragged)
    named = tmp_path / "row_names.tsv"  # write.table's default row.names = TRUE
    named.write_text('"chrom"\t"pos"\t"ref"\t"alt"\n"1"\t"1"\t10\t"A"\t"C"\n')
    with pytest.raises(InputError, match=r"5 fields where the header has 4 \(R's write\.table"):
        read_panel(named)


def test_ragged_table_names_the_line(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("chrom,pos,ref,alt\n1,10,A,C\n1,11,A,C,EXTRA\n1,12,A,C\n")
    with pytest.raises(InputError, match=r"p\.csv:3: 5 fields where the header has 4"):
        read_panel(path)


def test_user_column_map_displaces_a_same_named_column(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("chrom\tpos\tpos_hg38\tref\talt\tstatus\n1\t5\t10\tA\tC\tVUS\n")
    panel = read_panel(path, columns={"pos": "pos_hg38"})
    assert panel["pos"].to_list() == [10]
    assert panel["panel_pos"].to_list() == [5]  # carried, not lost
    assert panel["panel_status"].to_list() == ["VUS"]  # the pipeline's `status` will not clash


def test_ambiguous_key_column_asks_for_a_map(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("CHR\tchromosome\tpos\tref\talt\n1\tchr1\t5\tA\tC\n")
    with pytest.raises(InputError, match=r"several columns could be 'chrom'"):
        read_panel(path)
    assert read_panel(path, columns={"chrom": "chromosome"})["chrom"].to_list() == ["chr1"]


def test_hub_parquet_schemas(tmp_path):
    brca2 = tmp_path / "brca2_vep.parquet"
    pl.DataFrame(
        {
            "chrom": ["13", "13"],
            "pos": [32_315_508, 32_315_508],
            "ref": ["G", "G"],
            "alt": ["A", "C"],
            "score": [-1.2, 0.4],
            "class": ["LOF", "FUNC/INT"],
            "ref_seq": ["ACGT", "ACGT"],
            "var_seq": ["ACAT", "ACCT"],
        }
    ).write_parquet(brca2)
    panel = read_panel(brca2)
    assert panel["panel_score"].to_list() == [-1.2, 0.4]  # the DMS score is carried
    assert panel["class"].to_list() == ["LOF", "FUNC/INT"]
    assert panel["source"].to_list() == [f"{brca2}:row 1", f"{brca2}:row 2"]

    clinvar = tmp_path / "clinvar_coding.parquet"
    pl.DataFrame(
        {
            "chrom": [1, 22],
            "pos": [925_952, 17_085_000],
            "ref": ["G", "C"],
            "alt": ["A", "T"],
            "label": [1, 0],
            "region": ["coding", "coding"],
            "variant_type": ["missense", "synonymous"],
        }
    ).write_parquet(clinvar)
    panel = read_panel(clinvar)
    assert panel["chrom"].to_list() == ["1", "22"] and panel["label"].to_list() == [1, 0]
    assert panel["panel_variant_type"].to_list() == ["missense", "synonymous"]

    traitgym = tmp_path / "mendelian_traits_vep.parquet"
    pl.DataFrame(
        {
            "chrom": ["1"],
            "pos": [100],
            "ref": ["A"],
            "alt": ["G"],
            "label": [True],
            "consequence": ["5_prime_UTR_variant"],
            "score": [0.1],
        }
    ).write_parquet(traitgym)
    panel = read_panel(traitgym)
    assert panel["label"].to_list() == [True] and panel["panel_score"].to_list() == [0.1]


def test_trailing_blank_lines_are_harmless_but_a_non_vcf_is_named(tmp_path):
    vcf = write_vcf(tmp_path / "p.vcf", ["1\t100\t.\tT\tG\t.\tPASS\t.\tGT\t0/1\t0/1", "", ""])
    assert read_panel(vcf)["pos"].to_list() == [100]
    junk = tmp_path / "calls.vcf"
    junk.write_text("chrom\tpos\tref\talt\n1\t100\tT\tG\n")
    with pytest.raises(InputError, match=r"calls\.vcf: cannot open as VCF/BCF.*##fileformat"):
        read_panel(junk)


def test_reserved_names_cover_every_column_the_pipeline_adds():
    from carbon_vep.scoring.shard import SCORE_SCHEMA

    added = set(SCORE_SCHEMA) - set(KEY) | {"n_copies_in_panel", "window_start", "shard"}
    assert added <= RESERVED_COLUMNS


# ---- input handling: blank lines, positions, ragged rows, ALT lists, encodings ------------
SITES_HEADER = (
    "##fileformat=VCFv4.2\n\n##contig=<ID=1,length=3000>\n"
    "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
)


def test_blank_line_in_vcf_header_keeps_every_line_number(tmp_path):
    good = tmp_path / "p.vcf"
    good.write_text(SITES_HEADER + "1\t10\t.\tA\tC\t.\t.\t.\n1\t11\t.\tA\tC\t.\t.\t.\n")
    assert read_panel(good)["source"].to_list() == [f"{good}:line {n}" for n in (5, 6)]
    bad = tmp_path / "bad.vcf"
    bad.write_text(SITES_HEADER + "1\t10\t.\tA\tC\t.\t.\t.\n1\tXYZ\t.\tA\tC\t.\t.\t.\n")
    with pytest.raises(InputError, match=r"bad\.vcf:6: .*'1\\tXYZ"):
        read_panel(bad)


def test_blank_lines_around_a_table_add_no_row(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_text("\nchrom\tpos\tref\talt\n1\t10\tA\tC\n1\t11\tA\tG\n\n")
    panel = read_panel(path)
    assert panel.height == 2
    assert panel["source"].to_list() == [f"{path}:line {n}" for n in (3, 4)]


def test_positions_that_needed_rounding_are_not_read_as_integers(tmp_path):
    path = tmp_path / "p.tsv"
    values = ["238", "238.0", "+239", "2.380e+02", "1.234e+04", "1e3", "12.5"]
    path.write_text("chrom\tpos\tref\talt\n" + "".join(f"1\t{v}\tA\tC\n" for v in values))
    panel = read_panel(path)
    assert panel["pos"].to_list() == [238, 238, 239, None, None, None, None]
    assert panel["input_pos"].to_list() == values


@pytest.mark.parametrize("row", ["1\t11\tA", "1\t11\tA\tC\tEXTRA"])
def test_short_and_long_table_rows_are_both_named(tmp_path, row):
    path = tmp_path / "p.tsv"
    path.write_text(f"chrom\tpos\tref\talt\n1\t10\tA\tC\n{row}\n1\t12\tA\tC\n")
    n_fields = row.count("\t") + 1
    with pytest.raises(InputError, match=rf"p\.tsv:3: {n_fields} fields where the header has 4"):
        read_panel(path)


def test_table_alt_list_is_split_into_one_row_per_alt(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('chrom,pos,ref,alt,alt_index\n1,10,A,C,x\n1,11,A,"T,G,C",y\n')
    panel = read_panel(path)
    assert panel["alt"].to_list() == ["C", "T", "G", "C"]
    assert panel["input_alt"].to_list() == ["C", "T", "G", "C"]
    assert panel["source"].to_list() == [f"{path}:line {n}" for n in (2, 3, 3, 3)]
    assert panel["alt_index"].to_list() == [1, 1, 2, 3]
    assert panel["n_alts_in_record"].to_list() == [1, 3, 3, 3]
    assert panel["panel_alt_index"].to_list() == ["x", "y", "y", "y"]  # the user's, renamed
    assert panel["row_id"].to_list() == [0, 1, 2, 3]


def test_table_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "p.tsv"
    path.write_bytes(b"chrom\tpos\tref\talt\tnote\n1\t10\tA\tC\tok\n1\t11\tA\tC\tM\xfcller\n")
    with pytest.raises(InputError, match=r"p\.tsv:3: not UTF-8 text \(byte 0xfc"):
        read_panel(path)
    utf16 = tmp_path / "u.tsv"
    utf16.write_bytes("chrom\tpos\tref\talt\n1\t10\tA\tC\n".encode("utf-16"))
    with pytest.raises(InputError, match=r"u\.tsv: the file is UTF-16"):
        read_panel(utf16)


def test_vcf_info_value_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "p.vcf"
    header = SITES_HEADER.replace(
        "#CHROM", '##INFO=<ID=NOTE,Number=1,Type=String,Description="n">\n#CHROM'
    )
    path.write_bytes(header.encode() + b"1\t10\t.\tA\tC\t.\t.\tNOTE=M\xfcller\n")
    with pytest.raises(InputError, match=r"p\.vcf:6: not UTF-8 text") as error:
        read_panel(path, info_fields=["NOTE"])
    assert "ends before" not in str(error.value)


def test_vcf_with_a_byte_order_mark_says_so(tmp_path):
    path = tmp_path / "p.vcf"
    path.write_text("\ufeff" + SITES_HEADER + "1\t10\t.\tA\tC\t.\t.\t.\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"p\.vcf: .*byte-order mark \(BOM\)"):
        read_panel(path)
