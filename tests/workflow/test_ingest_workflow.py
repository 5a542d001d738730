"""A panel with every ingest pitfall, through the real Snakefile: every input row comes out with
the right status, scored rows are right, counts add up; unusable panels and configs stop early."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
import yaml
from support.cluster import run_snakemake, workflow_env

from carbon_vep.genome.reference import open_reference

ROOT = Path(__file__).resolve().parents[2]
FASTA = ROOT / "resources/demo/chr17.hg19.part.fa"
pytestmark = pytest.mark.workflow

with open_reference(FASTA) as _ref:
    SEQ = _ref.fetch("chr17", 0, 40_000)  # upper-cased; the file is soft-masked
RAW = "".join(FASTA.read_text().split("\n")[1:])  # as in the file, lowercase repeats included


def _snakemake(workdir: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_snakemake(workdir, config, "--cores", "2", *extra, timeout=900)


def _config(workdir: Path, model: Path, datasets: dict[str, dict]) -> Path:
    config = {
        "shard_size": 100,
        "bootstrap": 0,  # no confidence intervals: the statuses are what is tested here
        "models": {
            "demo": {
                "path": str(model),
                "trust_remote_code": True,
                "dtype": "float32",
                "device": "cpu",
            }
        },
        "datasets": datasets,
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _dataset(panel: Path, recipe: str, **extra) -> dict:
    return {
        "panel": str(panel),
        "format": "vcf",
        "reference": str(FASTA),
        "build": "hg19",
        "recipe": recipe,
        "window_bp": 120,
        **extra,
    }


def _other(pos: int, k: int = 0) -> str:
    return "ACGT".replace(SEQ[pos - 1], "")[k]


HEADER = """##fileformat=VCFv4.2
##source=carbon-vep tests/test_ingest_workflow.py
##contig=<ID=17,length=40000>
##ALT=<ID=DEL,Description="Deletion">
##ALT=<ID=NON_REF,Description="Any other allele">
##INFO=<ID=CLNSIG,Number=.,Type=String,Description="Clinical significance">
##INFO=<ID=END,Number=1,Type=Integer,Description="End position">
##INFO=<ID=SVLEN,Number=A,Type=Integer,Description="SV length">
##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tS1\tS2
"""


def pitfall_panel(path: Path) -> list[tuple[str, str, str]]:
    """Write the panel; return (ID, centered status, nexttoken status) per output row."""
    s, rows, expected = SEQ, [], []

    def add(name, pos, ref, alts, statuses, clnsig="Benign", chrom="17", info=""):
        info = ";".join(x for x in (f"CLNSIG={clnsig}" if clnsig else "", info) if x) or "."
        rows.append(f"{chrom}\t{pos}\t{name}\t{ref}\t{alts}\t50\tPASS\t{info}\tGT\t0/1\t1/1")
        expected.extend((name, *st) if isinstance(st, tuple) else (name, st, st) for st in statuses)

    for i, pos in enumerate(range(1_000, 25_000, 1_000)):  # enough SNVs to measure concordance
        add(
            f"snv{pos}",
            pos,
            s[pos - 1],
            _other(pos, i % 3),
            ["scored"],
            "Pathogenic" if i % 2 else "Benign",
        )
    add("multi", 25_000, s[24_999], ",".join("ACGT".replace(s[24_999], "")), ["scored"] * 3)
    add("plain26000", 26_000, s[25_999], _other(26_000), ["scored"])
    add(
        "gatk_padded",
        26_000,
        s[25_999:26_001],
        f"{s[25_999]},{_other(26_000)}{s[26_000]}",
        ["skipped", "scored"],
    )
    add("plain27001", 27_001, s[27_000], _other(27_001), ["scored"])
    add("fb_complex", 27_000, s[26_999:27_002], s[26_999] + _other(27_001) + s[27_001], ["scored"])
    add("mnv", 28_000, s[27_999:28_001], _other(28_000) + _other(28_001), ["skipped"])
    add("del250", 28_100, s[28_099:28_350], s[28_099], ["skipped"])
    add("sv76mb", 28_500, s[28_499], "<DEL>", ["skipped"], info="END=76028500;SVLEN=-76000000")
    add("star", 28_600, s[28_599], f"{_other(28_600)},*", ["scored", "skipped"])
    add("non_ref", 28_700, s[28_699], "<NON_REF>", ["skipped"])
    add("no_alt", 28_800, s[28_799], ".", ["skipped"])
    add("n_alt", 28_900, s[28_899], "N", ["skipped"])
    add("iupac_alt", 28_901, s[28_900], "R", ["skipped"])
    add("iupac_ref", 28_902, "Y", "A", ["skipped"])
    add("alt_is_ref", 29_000, s[28_999], s[28_999], ["skipped"])
    add("ref_mismatch", 29_100, _other(29_100), s[29_099], ["ref_mismatch"])
    add("indel_bad_ref", 29_150, _other(29_150) + "A", _other(29_150), ["ref_mismatch"])
    masked = next(p for p in range(29_200, 40_000) if RAW[p - 1].islower())
    add("lowercase", masked, RAW[masked - 1], _other(masked).lower(), ["scored"])
    add("ucsc_name", 29_300, s[29_299], _other(29_300), ["scored"], chrom="chr17")
    add("mito", 100, "A", "G", ["unknown_contig"], chrom="MT")
    add("scaffold", 100, "A", "G", ["unknown_contig"], chrom="chrUn_gl000220")
    add("past_end", 40_001, "A", "G", ["out_of_bounds"])
    add("spans_end", 39_999, s[39_998:40_000] + "A", "A", ["out_of_bounds"])
    # right-end: nothing left of the contig's first base to condition on (no_context)
    add("first_base", 1, s[0], _other(1), [("scored", "no_context")])
    add("near_start", 50, s[49], _other(50), ["scored"])
    add("last_base", 40_000, s[39_999], _other(40_000), [("contig_end", "scored")])  # 6-mer tail
    add("dup_a", 30_000, s[29_999], _other(30_000), ["scored"], "Pathogenic")
    add("dup_b", 30_000, s[29_999], _other(30_000), ["scored"], "Benign")
    add(
        "conflicting",
        30_500,
        s[30_499],
        _other(30_500),
        ["scored"],
        "Conflicting_classifications_of_pathogenicity",
    )
    add("missing_ref", 31_000, ".", "A", ["invalid"])
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return expected


@pytest.fixture(scope="module")
def pitfall_run(tmp_path_factory, demo_model_dir) -> tuple[Path, list]:
    workdir = tmp_path_factory.mktemp("pitfalls")
    expected = pitfall_panel(workdir / "pitfalls.vcf")
    extra = {"label_source": "clinvar_clnsig", "label_column": "label"}
    config = _config(
        workdir,
        demo_model_dir,
        {
            "pitfalls_centered": _dataset(workdir / "pitfalls.vcf", "centered", **extra),
            "pitfalls_nexttoken": _dataset(workdir / "pitfalls.vcf", "nexttoken", **extra),
        },
    )
    targets = [
        "results/pitfalls_centered/demo/metrics.json",  # the run summary
        "results/pitfalls_nexttoken/demo/scores.parquet",
    ]
    result = _snakemake(workdir, config, *targets)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir, expected


@pytest.mark.parametrize(
    ("dataset", "column"), [("pitfalls_centered", 1), ("pitfalls_nexttoken", 2)]
)
def test_every_input_row_has_its_status(pitfall_run, dataset, column):
    workdir, expected = pitfall_run
    scores = pl.read_parquet(workdir / f"results/{dataset}/demo/scores.parquet")
    assert scores.height == len(expected)
    assert scores["row_id"].to_list() == list(range(len(expected)))
    got = list(zip(scores["id"], scores["status"], strict=True))
    assert got == [(row[0], row[column]) for row in expected]
    assert scores.filter(pl.col("status") != "scored")["reason"].str.len_chars().min() > 0
    wanted = Counter(row[column] for row in expected)
    summary = json.loads((workdir / f"results/{dataset}/checked_summary.json").read_text())
    assert sum(summary["status_counts"].values()) == len(expected)
    assert summary["contig_aliases"] == {"17": "chr17"}
    assert dict(Counter(scores["status"])) == dict(wanted)
    if dataset == "pitfalls_centered":
        metrics = json.loads((workdir / f"results/{dataset}/demo/metrics.json").read_text())
        assert metrics["status_counts"] == dict(wanted)


@pytest.mark.parametrize("dataset", ["pitfalls_centered", "pitfalls_nexttoken"])
def test_scored_rows_are_the_right_variants(pitfall_run, dataset):
    workdir, _ = pitfall_run
    scores = pl.read_parquet(workdir / f"results/{dataset}/demo/scores.parquet")
    scored = scores.filter(pl.col("status") == "scored")
    assert scored["score"].is_finite().all()
    assert scores.filter(pl.col("status") != "scored")["score"].null_count() == (
        scores.height - scored.height
    )

    def one(name: str) -> dict:
        return scored.filter(pl.col("id") == name).row(0, named=True)

    # a padded caller allele is scored as the SNV it contains, at the right position
    for padded, plain in (("gatk_padded", "plain26000"), ("fb_complex", "plain27001")):
        assert (one(padded)["pos"], one(padded)["alt"]) == (one(plain)["pos"], one(plain)["alt"])
        assert one(padded)["score"] == one(plain)["score"]
        assert one(padded)["input_pos"] != str(one(padded)["pos"]) or padded == "gatk_padded"
    multi = scored.filter(pl.col("id") == "multi")
    assert multi["alt"].to_list() == list("ACGT".replace(SEQ[24_999], ""))
    assert multi["score"].n_unique() == 3  # one score per ALT, never one copied
    lowercase = one("lowercase")
    assert lowercase["alt"].isupper() and lowercase["input_ref"].islower()
    dup = scored.filter(pl.col("id").is_in(["dup_a", "dup_b"]))
    assert dup["score"].n_unique() == 1 and dup["label_conflict"].all()
    assert dup["duplicate_of"].to_list() == [None, dup["row_id"][0]]
    assert dup["label"].to_list() == [1, 0]
    conflicting = one("conflicting")
    assert conflicting["label"] is None and conflicting["label_conflict"]


def test_wrong_build_panel_stops_before_scoring(tmp_path, demo_model_dir):
    panel = tmp_path / "grch37_on_hg38.vcf"
    rows = []
    for pos in range(1_000, 31_000, 1_000):  # REF alleles of positions 137 bp away
        ref = SEQ[pos + 136]
        rows.append(f"17\t{pos}\t.\t{ref}\t{'A' if ref != 'A' else 'C'}\t.\tPASS\t.\tGT\t0/1\t0/1")
    panel.write_text(HEADER + "\n".join(rows) + "\n")
    config = _config(tmp_path, demo_model_dir, {"wrong": _dataset(panel, "centered")})
    # the rules' commands run with CARBON_VEP_INTERFACE=workflow: messages name config keys
    env = workflow_env(CARBON_VEP_INTERFACE="workflow")
    result = run_snakemake(tmp_path, config, "--cores", "2", env=env, timeout=900)
    assert result.returncode != 0
    message = "grch37_on_hg38.vcf: REF matches"
    assert message in result.stderr and "builds differ" in result.stderr  # on stderr
    log = (tmp_path / "logs/results/wrong/check_panel.log").read_text()
    assert message in log and "point the config key `reference` at the FASTA" in log
    assert not (tmp_path / "results/wrong/checked.parquet").exists()
    assert not list(tmp_path.glob("results/wrong/**/*.parquet"))


def test_two_builds_on_one_fasta_stop_at_workflow_start(tmp_path):
    panel = tmp_path / "p.vcf"
    pitfall_panel(panel)
    config = _config(
        tmp_path,
        tmp_path / "model",
        {
            "clinvar": _dataset(panel, "nexttoken", build="hg38"),
            "brca2": _dataset(panel, "centered", build="GRCh37"),
            "brca2_again": _dataset(panel, "centered", build="hg19"),  # same build, other spelling
        },
    )
    result = _snakemake(tmp_path, config, "-n")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "datasets.brca2 (build GRCh37) and datasets.clinvar (build hg38) use the same" in output
    assert "brca2_again" not in output and "check_panel" not in output  # no job planned
