"""The shipped lambda phage scan (config/lambda_genome.yaml, what `make scan-lambda` runs) end to
end through the Snakefile with the demo model: every SNV of the genome scored, calibrated and
written with its calibrated score, and its PHRED past the config's min_context (24,000 bp; the
bases before have less left context, `.`); the summary and the run's HTML report show the
distribution and the context cells; a panel annotated from the scan carries the scales, and its
VCF export describes them in INFO header lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import pysam
import pytest
import yaml
from support.cluster import run_snakemake, workflow_env

from carbon_vep.scan.calibrate import NO_OWN_MEANS

pytestmark = pytest.mark.workflow
ROOT = Path(__file__).resolve().parents[2]
SCAN = "results/scans/lambda/demo"
LAMBDA_SNVS = 3 * 48_502
# the config's min_context: the genome's first 24,000 bases have less left context, no PHRED
UNRANKED_SNVS = 3 * 24_000


def _read_tsv(path: Path) -> pl.DataFrame:
    """The TSV as annotation.md reads it: `.` no value, the PHREDs numbers (the first 72,000
    rows have none, more than polars samples to guess a type)."""
    phreds = dict.fromkeys(("phred", "calibrated_phred"), pl.Float32)
    return pl.read_csv(
        path, separator="\t", comment_prefix="##", null_values=".", schema_overrides=phreds
    )


@pytest.fixture(scope="module")
def lambda_run(tmp_path_factory, demo_model_dir) -> Path:
    workdir = tmp_path_factory.mktemp("lambda")
    config = yaml.safe_load((ROOT / "config/lambda_genome.yaml").read_text())
    config["models"]["demo"].update(path=str(demo_model_dir), build_demo=False)
    config["scans"]["lambda"]["reference"] = str(ROOT / config["scans"]["lambda"]["reference"])
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_snakemake(workdir, path, "--cores", "2")  # rule all: the scan and report.html
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def test_every_snv_of_the_genome_is_in_the_tsv_with_its_scales(lambda_run):
    tsv = lambda_run / SCAN / "snvs/NC_001416.1.tsv.gz"
    rows = _read_tsv(tsv)
    assert rows.columns == [
        "#chrom",
        "pos",
        "ref",
        "alt",
        "score",
        "phred",
        "calibrated",
        "calibrated_phred",
    ]
    assert rows.height == LAMBDA_SNVS
    assert all(rows[c].null_count() == 0 for c in rows.columns if "phred" not in c)
    short = (rows["pos"] <= 24_000).to_list()  # less than min_context bp of left context
    assert rows["phred"].is_null().to_list() == rows["calibrated_phred"].is_null().to_list()
    assert rows["phred"].is_null().to_list() == short
    assert rows["phred"].min() == 0.0 and rows["phred"].max() > 10
    with pysam.TabixFile(str(tsv)) as tabix:  # tabix answers; the header is ASCII
        assert len(list(tabix.fetch("NC_001416.1", 999, 1002))) == 9
        assert any(line.startswith("##calibrated=score minus") for line in tabix.header)
    calibration = json.loads((lambda_run / SCAN / "calibration/calibration.json").read_text())
    assert calibration["total"] == LAMBDA_SNVS - UNRANKED_SNVS and calibration["decimals"] == 3
    assert calibration["unranked_snvs"] == UNRANKED_SNVS


def test_the_summary_and_the_run_report_show_the_calibration(lambda_run):
    summary = json.loads((lambda_run / SCAN / "summary.json").read_text())
    thresholds = summary["calibration"]["thresholds"]["score"]
    assert thresholds["phred_10"] <= thresholds["phred_20"] <= thresholds["phred_30"]
    levels = summary["calibration"]["snvs_by_context_level"]
    assert sum(levels.values()) + UNRANKED_SNVS == LAMBDA_SNVS
    assert levels["global"] == 3  # the last base (its start has less than min_context)
    text = (lambda_run / SCAN / "summary.md").read_text()
    assert "## calibration" in text and "| PHRED 20 (top 1%) |" in text
    assert (
        f"SNVs without a PHRED (less left context: a contig start, after a gap): {UNRANKED_SNVS:,}"
        in text
    )
    # 73,506 ranked SNVs, ~24 a cell: no cell has its own mean (contexts_markdown's table:
    # tests/scan/test_calibrate.py)
    assert NO_OWN_MEANS in text
    html = (lambda_run / "results/report.html").read_text()
    assert "scan lambda / demo" in html and "Mean score of each context cell" in html
    assert html.count("data:image/png;base64,") >= 2  # the distribution and the context cells


def test_a_panel_from_the_scan_carries_the_scales_into_its_vcf(lambda_run, tmp_path):
    seq = "".join(
        line.strip()
        for line in (ROOT / "resources/genome/lambda_phage.fa").read_text().splitlines()[1:]
    )
    records = [(p, seq[p - 1], "A" if seq[p - 1] != "A" else "C") for p in (500, 20_000, 48_000)]
    vcf = tmp_path / "panel.vcf"
    header = "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\n"
    lines = "".join(f"NC_001416.1\t{p}\t.\t{r}\t{a}\t.\t.\t.\n" for p, r, a in records)
    vcf.write_text(header + lines)
    out, exported = tmp_path / "annotated.parquet", tmp_path / "annotated.vcf.gz"
    env = workflow_env()
    subprocess.run(
        [
            "carbon-vep",
            "annotate",
            "--scan",
            str(lambda_run / SCAN),
            "--panel",
            str(vcf),
            "--out",
            str(out),
        ],
        check=True,
        env=env,
    )
    rows = pl.read_parquet(out)
    assert rows["status"].to_list() == ["scored"] * 3
    assert rows["calibrated"].null_count() == 0
    assert rows["phred"].is_null().to_list() == [True, True, False]  # 500, 20,000: < 24,000
    tsv = _read_tsv(lambda_run / SCAN / "snvs/NC_001416.1.tsv.gz")
    for row in rows.iter_rows(named=True):
        line = tsv.filter((pl.col("pos") == row["pos"]) & (pl.col("alt") == row["alt"]))
        for column in ("phred", "calibrated", "calibrated_phred"):
            if line[column][0] is None:
                assert row[column] is None, column
            else:
                assert row[column] == pytest.approx(line[column][0], abs=1e-6), column
    reference = ROOT / "resources/genome/lambda_phage.fa"
    subprocess.run(
        [
            "carbon-vep",
            "export-vcf",
            "--merged",
            str(out),
            "--reference",
            str(reference),
            "--out",
            str(exported),
        ],
        check=True,
        env=env,
    )
    with pysam.VariantFile(str(exported)) as variants:
        info = variants.header.info
        assert {"CVEP_PHRED", "CVEP_CALIBRATED", "CVEP_CALIBRATED_PHRED"} <= set(info)
        assert "10 = top 10%" in info["CVEP_PHRED"].description
        values = [record.info.get("CVEP_PHRED", [None])[0] for record in variants]  # Number=A
    assert values[:2] == [None, None]  # no PHRED, no INFO value
    assert values[2] == pytest.approx(rows.sort("pos")["phred"][2], abs=1e-4)
