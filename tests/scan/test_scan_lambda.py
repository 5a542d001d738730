"""The shipped lambda phage scan (config/lambda_genome.yaml, what `make scan-lambda` runs) end to
end through the Snakefile with the demo model: every SNV of the genome scored, calibrated and
written with its PHRED and calibrated score; the summary and the run's HTML report show the
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

pytestmark = pytest.mark.workflow
ROOT = Path(__file__).resolve().parents[2]
SCAN = "results/scans/lambda/demo"
LAMBDA_SNVS = 3 * 48_502


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
    rows = pl.read_csv(tsv, separator="\t", comment_prefix="##")
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
    assert rows.height == LAMBDA_SNVS and all(rows[c].null_count() == 0 for c in rows.columns)
    assert rows["phred"].min() == 0.0 and rows["phred"].max() > 10
    with pysam.TabixFile(str(tsv)) as tabix:  # tabix answers; the header is ASCII
        assert len(list(tabix.fetch("NC_001416.1", 999, 1002))) == 9
        assert any(line.startswith("##calibrated=score minus") for line in tabix.header)
    calibration = json.loads((lambda_run / SCAN / "calibration/calibration.json").read_text())
    assert calibration["total"] == LAMBDA_SNVS and calibration["decimals"] == 3


def test_the_summary_and_the_run_report_show_the_calibration(lambda_run):
    summary = json.loads((lambda_run / SCAN / "summary.json").read_text())
    thresholds = summary["calibration"]["thresholds"]["score"]
    assert thresholds["phred_10"] <= thresholds["phred_20"] <= thresholds["phred_30"]
    levels = summary["calibration"]["snvs_by_context_level"]
    assert sum(levels.values()) == LAMBDA_SNVS and levels["global"] == 6  # 2 bases each end
    text = (lambda_run / SCAN / "summary.md").read_text()
    assert "## calibration" in text and "| PHRED 20 (top 1%) |" in text
    assert "| context | change | CpG |" in text
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
    scales = rows.select("phred", "calibrated", "calibrated_phred")
    assert all(scales[c].null_count() == 0 for c in scales.columns)
    tsv = pl.read_csv(
        lambda_run / SCAN / "snvs/NC_001416.1.tsv.gz", separator="\t", comment_prefix="##"
    )
    for row in rows.iter_rows(named=True):
        line = tsv.filter((pl.col("pos") == row["pos"]) & (pl.col("alt") == row["alt"]))
        for column in ("phred", "calibrated", "calibrated_phred"):
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
        values = [record.info["CVEP_PHRED"][0] for record in variants]  # Number=A: one per ALT
    assert values == pytest.approx(rows.sort("pos")["phred"].to_list(), abs=1e-4)
