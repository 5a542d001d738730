"""VCFs shaped like those of population-frequency releases, annotation sources and hand-edited
files, as a new user brings them: INFO fields htslib cannot decode as declared, sites-only files
with an empty FORMAT column, space-separated records, panels with nothing to score, htslib's
two-line header errors, messages for the interface in use, and ClinVar-like panels read in
batches. Every file here is small and written by the test."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pysam
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.cli import main
from carbon_vep.config.fields import INTERFACE_VARIABLE
from carbon_vep.config.run import setting_name
from carbon_vep.config.stages import LabelSettings, PanelSettings
from carbon_vep.errors import InputError
from carbon_vep.genome.htslib import Messages
from carbon_vep.genome.reference import open_reference
from carbon_vep.variants import panel as panel_module
from carbon_vep.variants import panel_vcf
from carbon_vep.variants.ingest import ingest_panel, write_checked_panel
from carbon_vep.variants.panel import load_panel, read_panel
from carbon_vep.variants.summary import NothingScoreableError

ROOT = Path(__file__).resolve().parents[2]
SEQ = random_dna(4000, 41)
OTHER = {b: "ACGT".replace(b, "") for b in "ACGT"}

# A population-frequency release: per-population counts declared Number=G in INFO (as ExAC
# and gnomAD-style releases ship GC / GC_AFR ...), which htslib decodes in FORMAT fields only.
POPULATION_HEADER = """##fileformat=VCFv4.2
##source=population-release
##contig=<ID=chr1,length=4000>
##INFO=<ID=AC,Number=A,Type=Integer,Description="Allele count">
##INFO=<ID=AF,Number=A,Type=Float,Description="Allele frequency">
##INFO=<ID=AN,Number=1,Type=Integer,Description="Allele number">
##INFO=<ID=DP,Number=1,Type=Integer,Description="Depth">
##INFO=<ID=GC,Number=G,Type=Integer,Description="Genotype counts, in the order of FORMAT GL">
##INFO=<ID=CSQ,Number=.,Type=String,Description="Consequence">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO
"""


def _alt(pos: int, k: int = 0) -> str:
    return OTHER[SEQ[pos - 1]][k]


def _genome(tmp_path: Path) -> Path:
    return write_fasta(tmp_path / "genome.fa", {"chr1": SEQ})


def _snv(pos: int, info: str, k: int = 0, rid: str = ".") -> str:
    return f"chr1\t{pos}\t{rid}\t{SEQ[pos - 1]}\t{_alt(pos, k)}\t100\tPASS\t{info}"


def _population_records(gc_on_last_only: bool = False) -> list[str]:
    records = []
    for i, pos in enumerate(range(100, 3100, 100)):
        gc = "" if gc_on_last_only else ";GC=70,25,5"
        records.append(_snv(pos, f"AC=3;AF=0.03;AN=100;DP={30 + i}{gc};CSQ=missense|A", i % 3))
    multi = f"{OTHER[SEQ[3199]][0]},{OTHER[SEQ[3199]][1]}"
    records.append(  # a multi-allelic last record: Number=G has 6 values for 2 ALTs
        f"chr1\t3200\t.\t{SEQ[3199]}\t{multi}\t50\tPASS\tAC=1,2;AF=0.01,0.02;AN=100;DP=9;"
        "GC=90,4,1,3,1,1"
    )
    return records


def _write(path: Path, header: str, records: list[str], compression: str = "vcf") -> Path:
    path.write_text(header + "".join(f"{r}\n" for r in records))
    if compression == "bgzip":
        pysam.tabix_compress(str(path), f"{path}.gz", force=True)
        return Path(f"{path}.gz")
    return path


def _check_panel_cli(tmp_path: Path, panel: Path, *options: str) -> tuple[int, Path, Path]:
    out, summary = tmp_path / "out/checked.parquet", tmp_path / "out/checked_summary.json"
    reference = str(_genome(tmp_path))
    code = main(
        [
            "check-panel",
            "--panel",
            str(panel),
            "--reference",
            reference,
            "--build",
            "hg38",
            *options,
            "--out",
            str(out),
            "--summary",
            str(summary),
        ]
    )
    return code, out, summary


# ---- INFO fields htslib cannot decode as declared -----------------------------------------
@pytest.mark.parametrize("compression", ["vcf", "bgzip"])
def test_number_g_info_field_is_carried_as_raw_text(tmp_path, compression):
    records = _population_records()
    path = _write(tmp_path / "release.vcf", POPULATION_HEADER, records, compression)
    with open_reference(_genome(tmp_path)) as ref:
        checked, summary = ingest_panel(path, ref, PanelSettings("hg38", info_fields=("*",)))
    assert checked.height == summary["n_rows"] == 32  # 30 biallelic records + 2 ALTs
    assert checked["GC"].to_list() == ["70,25,5"] * 30 + ["90,4,1,3,1,1"] * 2
    assert checked["DP"].dtype == pl.Int64 and checked["DP"][0] == 30  # decoded as before
    assert checked["AC"].to_list()[-2:] == [1, 2]  # Number=A still split per ALT
    warnings = [n for n in summary["notes"] if "GC" in n]
    assert len(warnings) == 1 and "Number=G" in warnings[0] and "raw text" in warnings[0]
    assert (checked["status"] == "ok").all()


def test_undecodable_field_in_the_last_record_keeps_the_row_and_the_exit_code_says_so(tmp_path):
    """The record with the Number=G value is the file's last: no row may go missing, and no
    warning about blank lines the file does not have."""
    records = _population_records(gc_on_last_only=True)
    path = _write(tmp_path / "release.vcf", POPULATION_HEADER, records)
    code, out, summary_path = _check_panel_cli(tmp_path, path, "--info-field", "*")
    assert code == 0
    checked = pl.read_parquet(out)
    assert checked.height == 32  # every ALT of every record, the last record's two included
    assert checked["input_pos"].to_list()[-2:] == ["3200", "3200"]
    assert checked["GC"].to_list()[-1] == "90,4,1,3,1,1" and checked["GC"][0] is None
    summary = json.loads(summary_path.read_text())
    assert summary["n_rows"] == 32
    assert not [n for n in summary["notes"] if "blank line" in n]


def test_integer_field_with_text_is_carried_as_raw_text_not_nulled(tmp_path):
    """htslib turns an Integer value it cannot parse into a missing one, silently."""
    records = [_snv(pos, f"DP={pos // 100}") for pos in range(100, 2100, 100)]
    records[7] = _snv(800, "DP=low")  # a caller's placeholder
    path = _write(tmp_path / "calls.vcf", POPULATION_HEADER, records)
    panel = load_panel(path, info_fields=["DP"])
    assert panel.frame["DP"].to_list()[6:9] == ["7", "low", "9"]
    header_lines = POPULATION_HEADER.count("\n")
    assert panel.notes == [
        f"INFO field DP cannot be decoded as declared (Number=1, Type=Integer: 'low' does not "
        f"read as Integer, first at line {header_lines + 8}); carried as its raw text"
    ]


def test_undecodable_value_in_a_later_batch_is_read_again_as_text(tmp_path, monkeypatch):
    """A field found undecodable part-way (after batches went out) is read again from the
    first batch, as text everywhere: one type for the whole column."""
    monkeypatch.setattr(panel_vcf, "_BATCH_RECORDS", 4)
    records = [_snv(pos, f"AC={pos // 100}") for pos in range(100, 2100, 100)]
    records[13] = _snv(1400, "AC=1,2")  # two values for one ALT
    path = _write(tmp_path / "calls.vcf", POPULATION_HEADER, records)
    with open_reference(_genome(tmp_path)) as ref:
        checked, summary = ingest_panel(path, ref, PanelSettings("hg38", info_fields=("AC",)))
    assert checked.height == 20 and checked["AC"].dtype == pl.Utf8
    assert checked["AC"].to_list()[12:15] == ["13", "1,2", "15"]
    assert checked["row_id"].to_list() == list(range(20))
    assert any("AC cannot be decoded" in n and "means 1" in n for n in summary["notes"])


# ---- sites-only files with an empty FORMAT column -----------------------------------------
@pytest.mark.parametrize("compression", ["vcf", "bgzip"])
def test_sites_only_vcf_with_an_empty_format_column_is_read(tmp_path, compression):
    header = POPULATION_HEADER.replace("\tINFO\n", "\tINFO\tFORMAT\n")
    records = [_snv(pos, "DP=5") for pos in range(100, 2600, 100)]
    records[3] += "\t."  # some writers put an empty FORMAT value on the records too
    path = _write(tmp_path / "sites.vcf", header, records, compression)
    with open_reference(_genome(tmp_path)) as ref:
        checked, summary = ingest_panel(path, ref, PanelSettings("hg38", info_fields=("DP",)))
    assert checked.height == 25 and (checked["status"] == "ok").all()
    header_lines = header.count("\n")
    assert checked["source"][0] == f"{path}:line {header_lines + 1}"  # lines as in the file
    assert any("ends in a FORMAT column but names no sample" in n for n in summary["notes"])


# ---- one story for space-separated records ------------------------------------------------
SAMPLES_HEADER = POPULATION_HEADER.replace(
    "#CHROM", '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">\n#CHROM'
).replace("\tINFO\n", "\tINFO\tFORMAT\tS1\tS2\n")


@pytest.mark.parametrize(
    ("bad", "cause"),
    [
        # what each became before: a skipped row, a skipped row, an invalid (missing REF) row
        ("chr1\t500\t.\tA C\t.\t.\t.\tGT\t0/1\t0/1", "REF 'A C' holds a space"),
        ("chr1\t500\trs5\t. A\tC\t.\t.\tGT\t0/1\t0/1", "REF '. A' holds a space"),
        ("chr1\t500\t. A C\t.\t.\t.\t.\tGT\t0/1\t0/1", "ID '. A C' holds a space"),
        ("chr1\t500\t.\tA\tC\t.\t.\t. GT\t0/1\t0/1", "INFO key '. GT' holds a space"),
    ],
    ids=["ref-alt-joined", "ref-missing", "id", "info-format-joined"],
)
def test_space_separated_record_stops_naming_file_line_and_cause(tmp_path, bad, cause):
    records = [f"chr1\t{p}\t.\t{SEQ[p - 1]}\t{_alt(p)}\t.\t.\t.\tGT\t0/1\t0/1" for p in (100, 200)]
    path = _write(tmp_path / "edited.vcf", SAMPLES_HEADER, [*records, bad, records[0]])
    line = SAMPLES_HEADER.count("\n") + 3
    with pytest.raises(InputError) as caught:
        read_panel(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: malformed VCF record (the fields are not ")
    assert "tab-separated" in message and cause in message


# ---- complete reasons ---------------------------------------------------------------------
def test_htslib_header_error_keeps_its_second_line(tmp_path):
    path = tmp_path / "spaces.vcf"
    path.write_text(POPULATION_HEADER.replace("\t", " ") + _snv(100, ".") + "\n")
    with pytest.raises(InputError) as caught:
        read_panel(path)
    message = str(caught.value)
    chrom_line = POPULATION_HEADER.count("\n")
    assert message.startswith(f"{path}:{chrom_line}: cannot open as VCF/BCF: ")
    assert "spaces are present instead of tabs: '#CHROM POS ID REF ALT QUAL FILTER INFO'" in (
        message
    )


def test_messages_join_the_lines_that_continue_them():
    messages = Messages()
    messages.text = (
        '[E::bcf_hdr_parse_sample_line] Could not parse the "#CHROM.." line, either FORMAT is '
        "missing or spaces are present instead of tabs:\n\t#CHROM\tPOS\tID\n\n"
        "[W::vcf_parse] Contig '1' is not defined in the header.\n"
    )
    assert messages.errors() == (
        'Could not parse the "#CHROM.." line, either FORMAT is missing or spaces are present '
        "instead of tabs: '#CHROM\\tPOS\\tID'"
    )
    assert messages.lines("W") == ["Contig '1' is not defined in the header."]


def test_messages_are_unique_in_the_order_first_printed():
    """htslib warns once a contig the header lacks, and a panel on a draft assembly has
    thousands: each message once, in the order printed (kept in a dict, not a list searched
    for every message: 8,000 contigs in batches of 5,000 records took 15.9 s, now 1.9 s);
    new_lines hands each out once."""
    messages = Messages()
    names = [f"scaffold_{i}" for i in range(3000)]
    messages.text = "".join(
        f"[W::vcf_parse] Contig '{n}' is not defined in the header. (Quick workaround: index "
        "the file with tabix.)\n"
        for n in [*names, *names[::-1]]
    )
    lines = messages.lines("W")
    assert len(lines) == 3000 and lines[0].startswith("Contig 'scaffold_0' ")
    assert lines[-1].startswith("Contig 'scaffold_2999' ")
    assert messages.new_lines("W") == lines and messages.new_lines("W") == []
    assert messages.lines("E") == [] and messages.errors() == ""


# ---- nothing scoreable still explains itself ----------------------------------------------
def _sv_only(tmp_path: Path) -> Path:
    header = POPULATION_HEADER.replace(
        "#CHROM",
        '##ALT=<ID=DEL,Description="Deletion">\n##INFO=<ID=SVLEN,Number=A,'
        'Type=Integer,Description="SV length">\n#CHROM',
    )
    records = [
        f"chr1\t{p}\tsv{p}\t{SEQ[p - 1]}\t<DEL>\t.\tPASS\tSVLEN=-500" for p in range(100, 400, 50)
    ]
    records.append(f"chr1\t900\tins\t{SEQ[899]}\t{SEQ[899]}TTAGG\t.\tPASS\t.")
    return _write(tmp_path / "sv_only.vcf", header, records)


def test_nothing_scoreable_writes_every_rows_status_then_exits_2(tmp_path, caplog):
    code, out, summary_path = _check_panel_cli(tmp_path, _sv_only(tmp_path))
    assert code == 2
    checked = pl.read_parquet(out)
    assert checked.height == 7 and checked["id"].to_list()[-1] == "ins"
    assert checked["status"].to_list() == ["skipped"] * 7
    assert checked["reason"][0] == "symbolic, star or missing ALT '<DEL>'"
    assert checked["reason"][-1].startswith("insertion of 5 bp")
    summary = json.loads(summary_path.read_text())
    assert summary["status_counts"] == {"skipped": 7} and summary["n_scoreable"] == 0
    error = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "none of the 7 rows can be scored (6 × skipped: symbolic" in error[0]
    assert f"each row's status and reason are in {out}" in error[0]
    assert not list(out.parent.glob(".*"))  # no temporary file or batch left behind


def test_nothing_scoreable_error_carries_the_table_in_the_api(tmp_path):
    with open_reference(_genome(tmp_path)) as ref, pytest.raises(NothingScoreableError) as caught:
        ingest_panel(_sv_only(tmp_path), ref, PanelSettings("hg38"))
    assert caught.value.checked.height == 7 and caught.value.summary["n_rows"] == 7


def test_wrong_build_still_writes_nothing(tmp_path):
    records = [f"chr1\t{p}\t.\t{_alt(p)}\t{SEQ[p - 1]}\t.\t.\t." for p in range(100, 3100, 100)]
    path = _write(tmp_path / "other_build.vcf", POPULATION_HEADER, records)
    code, out, summary = _check_panel_cli(tmp_path, path)
    assert code == 2 and not out.exists() and not summary.exists()
    assert not [p for p in tmp_path.rglob("*") if ".parts-" in str(p)]  # nor batches on disk


# ---- messages for the interface in use ----------------------------------------------------
def test_setting_names_for_the_command_line_and_the_workflow(monkeypatch):
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    assert setting_name("format") == "`--format`"
    assert setting_name("info_fields") == "`--info-field`"
    assert setting_name("columns", "pos=POS_hg38") == "`--column pos=POS_hg38`"
    assert setting_name("label_source", "clinvar_clnsig") == "`--label-source clinvar_clnsig`"
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")
    assert setting_name("format") == "the config key `format`"
    assert setting_name("columns", "pos=POS_hg38") == (
        "the config key `columns` (`columns: {pos: POS_hg38}`)"
    )
    assert setting_name("info_fields", "CLNSIG") == (
        "the config key `info_fields` (`info_fields: [CLNSIG]`)"
    )


@pytest.mark.parametrize(
    ("interface", "expected"),
    [(None, "set `--format`"), ("workflow", "set the config key `format`")],
)
def test_panel_messages_name_the_setting_as_the_user_sets_it(
    tmp_path, monkeypatch, caplog, interface, expected
):
    if interface is None:
        monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(INTERFACE_VARIABLE, interface)
    panel = tmp_path / "variants.txt.bz2"
    panel.write_text("chrom\tpos\tref\talt\n1\t5\tA\tC\n")
    code, _, _ = _check_panel_cli(tmp_path, panel)
    assert code == 2
    assert expected in caplog.text and "in config" not in caplog.text
    table = tmp_path / "t.tsv"
    table.write_text("CHR\tchromosome\tpos\tref\talt\n1\tchr1\t5\tA\tC\n")
    with pytest.raises(InputError) as caught:
        read_panel(table)
    flag = "`--column chrom=CHR`" if interface is None else "(`columns: {chrom: CHR}`)"
    assert flag in str(caught.value)


# ---- ClinVar-size panels: read and checked in batches -------------------------------------
def _bench_module():
    from carbon_vep.benchmark import ingest

    return ingest


def test_clinvar_like_panel_in_small_batches_equals_one_batch(tmp_path, monkeypatch):
    """The bench's generated ClinVar-like VCF (multi-allelic records, indels, N and missing
    ALTs, REF mismatches): every ALT is a row, whatever the batch size, and duplicates across
    batches are found."""
    bench = _bench_module()
    monkeypatch.setattr(bench, "CONTIG_BP", 60_000)
    monkeypatch.setattr(bench, "RECORDS_PER_CONTIG", 700)
    fasta, vcf, n_alts = bench.generate(tmp_path, 1_400)
    duplicated = tmp_path / "with_duplicates.vcf"
    with pysam.BGZFile(str(vcf), "rb") as handle:
        lines = handle.read().decode().splitlines(keepends=True)
    first = next(line for line in lines if not line.startswith("#"))
    duplicated.write_text("".join(lines) + first)  # the first record again, at the end
    n_rows = n_alts + first.split("\t")[4].count(",") + 1
    options = PanelSettings("hg38", format="vcf"), LabelSettings(label_source="clinvar_clnsig")
    with open_reference(fasta) as ref:
        whole, summary = ingest_panel(duplicated, ref, *options)
        monkeypatch.setattr(panel_vcf, "_BATCH_RECORDS", 97)
        batched, batched_summary = ingest_panel(duplicated, ref, *options)
    assert whole.height == n_rows == summary["n_rows"]
    assert batched.equals(whole) and batched_summary == summary
    assert whole["duplicate_of"][-1] is not None and summary["n_duplicate_rows"] >= 1
    assert set(whole["status"]) == {"ok", "skipped", "ref_mismatch"}
    assert whole.filter(pl.col("n_alts_in_record") > 1).height > 0


def test_the_clinvar_like_panel_as_a_tsv_in_small_batches_equals_one_batch(tmp_path, monkeypatch):
    """The bench's ClinVar-like records as a TSV panel (`bench-ingest --panel-format tsv`):
    checked in batches of 97 rows it equals one batch, and each row gets the status and
    label its VCF record's ALT gets."""
    bench = _bench_module()
    monkeypatch.setattr(bench, "CONTIG_BP", 60_000)
    monkeypatch.setattr(bench, "RECORDS_PER_CONTIG", 700)
    fasta, vcf, n_alts = bench.generate(tmp_path, 1_400)
    tsv = bench.write_tsv_panel(vcf, tmp_path / "clinvar_like.tsv")
    labels = LabelSettings(label_source="clinvar_clnsig")
    with open_reference(fasta) as ref:
        from_vcf, _ = ingest_panel(vcf, ref, PanelSettings("hg38", format="vcf"), labels)
        whole, summary = ingest_panel(tsv, ref, PanelSettings("hg38", format="tsv"), labels)
        monkeypatch.setattr(panel_module, "_BATCH_ROWS", 97)
        batched, batched_summary = ingest_panel(tsv, ref, PanelSettings("hg38"), labels)
    assert whole.height == n_alts == from_vcf.height
    assert batched.equals(whole) and batched_summary == summary
    for column in ("chrom", "pos", "ref", "alt", "status", "label", "alt_index"):
        assert whole[column].to_list() == from_vcf[column].to_list(), column


def test_table_in_small_batches_equals_one_batch(tmp_path, monkeypatch):
    rows = [f"chr1\t{p}\t{SEQ[p - 1]}\t{_alt(p)}\t{p % 2}" for p in range(100, 3100, 100)]
    rows += [rows[0][:-1] + "1", "chrX\t5\tA\tC\t1", "chr1\tabc\tA\tC\t1"]
    path = tmp_path / "p.tsv"
    path.write_text("chrom\tpos\tref\talt\tlabel\n" + "\n".join(rows) + "\n")
    options = PanelSettings("hg38"), LabelSettings(label_column="label")
    with open_reference(_genome(tmp_path)) as ref:
        whole, summary = ingest_panel(path, ref, *options)
        monkeypatch.setattr(panel_module, "_BATCH_ROWS", 7)
        batched, batched_summary = ingest_panel(path, ref, *options)
    assert batched.equals(whole) and batched_summary == summary
    assert whole["duplicate_of"][30] == 0 and whole["label_conflict"][0]
    assert whole["status"].to_list()[-2:] == ["unknown_contig", "invalid"]


def test_write_checked_panel_writes_only_the_output(tmp_path):
    records = [_snv(pos, "DP=5") for pos in range(100, 3100, 100)]
    path = _write(tmp_path / "p.vcf", POPULATION_HEADER, records)
    out = tmp_path / "results/checked.parquet"
    with open_reference(_genome(tmp_path)) as ref:
        summary = write_checked_panel(path, ref, PanelSettings("hg38"), None, out)
    assert [p.name for p in out.parent.iterdir()] == ["checked.parquet"]
    assert pl.read_parquet(out).height == summary["n_rows"] == 30
