"""Run the real Snakefile on the demo data through snakemake, then check the outputs' content."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pysam
import pytest
import yaml
from support.cluster import ci_config as _config
from support.cluster import ci_run_log, run_snakemake, workflow_env

from carbon_vep.atomic import index_of

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources/demo"
PANEL_ROWS = 56  # 44 VCF records, multi-allelic ones split into one row per ALT
pytestmark = pytest.mark.workflow


def _snakemake(workdir: Path, config: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_snakemake(workdir, config, "--cores", "2", *extra, timeout=900)


@pytest.fixture(scope="module")
def demo_run(ci_run) -> Path:
    """config/ci.yaml run once a session (support/cluster.py's `ci_run`, which
    tests/workflow/test_invariance.py compares with a run cut otherwise); read, or copied to
    be changed."""
    return ci_run


def test_dry_run_lists_every_stage(tmp_path):
    result = _snakemake(tmp_path, _config(tmp_path, tmp_path / "m"), "-n")
    assert result.returncode == 0, result.stderr[-2000:]
    for rule in ("check_panel", "make_shards", "merge_scores", "compute_metrics", "write_report"):
        assert rule in result.stdout


def test_a_normalization_the_recipe_does_not_compute_stops_the_dry_run(tmp_path):
    """The scan recipe computes dna_block only: a config asking for full_vocab is refused
    while the Snakefile parses, naming the config key (its rows used to say full_vocab)."""
    path = _config(tmp_path, tmp_path / "m")
    config = yaml.safe_load(path.read_text())
    config["datasets"]["demo_scan_lookup"]["normalization"] = "full_vocab"
    path.write_text(yaml.safe_dump(config))
    result = _snakemake(tmp_path, path, "-n")
    assert result.returncode != 0
    assert (
        "datasets.demo_scan_lookup: the config key `normalization` (`normalization: full_vocab`): "
        "recipe scan computes dna_block only" in result.stdout + result.stderr
    ), result.stdout[-2000:]


@pytest.mark.parametrize("dataset", ["demo_centered", "demo_nexttoken", "demo_scan_lookup"])
def test_scores_have_one_row_per_input_variant(demo_run, dataset):
    scores = pl.read_parquet(demo_run / f"results/{dataset}/demo/scores.parquet")
    assert scores.height == PANEL_ROWS
    assert scores["row_id"].to_list() == list(range(PANEL_ROWS))
    counts = dict(scores.group_by("status").len().iter_rows())
    assert counts["ref_mismatch"] == 1
    assert counts["skipped"] >= 3  # insertion, <DEL>, N allele (+ trimmed-tail site for centered)
    assert sum(counts.values()) == PANEL_ROWS
    scored = scores.filter(pl.col("status") == "scored")
    assert scored["score"].is_finite().all() and scored["score"].null_count() == 0
    assert scores.filter(pl.col("status") != "scored")["score"].null_count() == (
        PANEL_ROWS - scored.height
    )
    # the conflicting duplicate is scored once and reported on both rows
    dup = scores.filter(pl.col("n_copies_in_panel") == 2)
    assert dup.height == 2 and dup["score"].n_unique() == 1 and dup["LABEL"].n_unique() == 2
    # the multi-allelic site got three different scores, not one copied three times
    site = scored.filter(pl.col("pos") == 5883)
    assert site.height == 3 and site["score"].n_unique() == 3


def test_nexttoken_probabilities_and_centered_deltas_are_consistent(demo_run):
    nt = pl.read_parquet(demo_run / "results/demo_nexttoken/demo/scores.parquet")
    nt = nt.filter(pl.col("status") == "scored")
    assert ((nt["p_ref"] > 0) & (nt["p_ref"] < 1) & (nt["p_alt"] > 0)).all()
    expected = (nt["p_ref"] / nt["p_alt"]).log()
    assert (nt["score"] - expected).abs().max() < 1e-6
    assert set(nt["normalization"]) == {"acgt_strings"}
    ce = pl.read_parquet(demo_run / "results/demo_centered/demo/scores.parquet")
    ce = ce.filter(pl.col("status") == "scored")
    assert ((ce["score"] + ce["delta"]).abs() < 1e-12).all()
    assert (ce["ref_ll"] < 0).all() and ce["delta_rc"].null_count() == 0
    last = ce.filter(pl.col("pos") == 40000)
    assert last.height == 0  # the contig's last base falls in the trimmed tail: skipped


def test_scan_outputs_and_panel_lookup_agree(demo_run):
    base = demo_run / "results/scans/demo_scan/demo"
    positions = pl.read_parquet(base / "positions", hive_partitioning=True)
    assert positions["chrom"].cast(pl.Utf8).unique().to_list() == ["chr17"]
    assert positions["pos"].to_list() == list(range(30_001, 32_001))
    assert (positions["context_bp"] >= 240).all()
    logs = positions.select(pl.col(f"log_fns_{b}").cast(pl.Float64) for b in "ACGT")
    assert (logs.select(pl.all().exp()).sum_horizontal() - 1).abs().max() < 2e-3
    with pysam.TabixFile(str(base / "snvs/chr17.tsv.gz")) as tabix:
        snvs = [line.split("\t") for line in tabix.fetch("chr17", 30_000, 32_000)]
    assert len(snvs) == 3 * 2_000
    snvs = pl.DataFrame(
        {
            "pos": [int(r[1]) for r in snvs],
            "alt": [r[3] for r in snvs],
            "score_tsv": [float(r[4]) for r in snvs],
        }
    )
    lookup = pl.read_parquet(demo_run / "results/demo_scan_lookup/demo/scores.parquet")
    inside = lookup.filter(
        (pl.col("status") == "scored") & pl.col("pos").is_between(30_001, 32_000)
    )
    joined = inside.join(snvs, on=["pos", "alt"])
    assert joined.height == inside.height > 0
    # the same base may sit at another offset in its tile: same model, different context
    assert (joined["window_bp"] >= 240).all()


def test_every_tabix_index_is_its_own_jobs_output_stamped_after_its_file(demo_run):
    """Snakemake stamps a job's declared outputs when it ends: an index written by its file's
    job but not declared ended older than its file, and htslib warned on every read (`The
    index file is older than the data file`). Each index is now the output of a job after its
    file's (index_scan_tsv, index_vcf), so no older than it to the nanosecond: the old layout
    fails this whatever the timing."""
    results = demo_run / "results"
    indexed = [*results.glob("scans/*/*/snvs/*.tsv.gz"), *results.glob("*/*/results.vcf.gz")]
    assert len(indexed) == 4  # the scan's one file, the three panels' VCFs
    for data in indexed:
        index = index_of(data)
        assert index.is_file(), data
        assert index.stat().st_mtime_ns >= data.stat().st_mtime_ns, data
    log = ci_run_log(demo_run).read_text()
    assert log.count("rule index_scan_tsv:") == 1 and log.count("rule index_vcf:") == 3


def test_metrics_and_report(demo_run):
    metrics = json.loads((demo_run / "results/demo_centered/demo/metrics.json").read_text())
    assert sum(metrics["status_counts"].values()) == PANEL_ROWS
    for name in ("auroc", "auprc_trapezoid", "average_precision"):
        assert 0.0 <= metrics["metrics"][name] <= 1.0
        assert name in metrics["definitions"]
    # the two rows of the conflicting duplicate are kept but left out of the metrics
    excluded = metrics["n_excluded_label_conflict"]
    assert excluded == 2
    assert metrics["n_labelled"] + excluded == metrics["status_counts"]["scored"]
    assert metrics["provenance"]["build"] == "hg19"
    report = (demo_run / "results/demo_centered/demo/report.md").read_text()
    assert "## Input status counts" in report and "REF A but reference has C" in report


def test_niah_cells_are_built_scored_in_parts_and_reported(demo_run):
    """Genomic-NIAH through the Snakefile: each cell built once, its 10 rows scored by two
    score_niah jobs (rows 0:5, 5:10), merged back in the cell's order, with the model's and
    the cell's hashes in the provenance; the run's report has the NIAH section."""
    for cell in ("niah_512", "niah_neardup_d2_512"):
        built = pl.read_parquet(demo_run / f"results/niah/demo_niah/cells/{cell}.parquet")
        folder = demo_run / f"results/suite/niah/demo_niah/{cell}/demo"
        rows = pl.read_parquet(folder / "predictions.parquet")
        assert rows["uid"].to_list() == built["uid"].to_list()
        assert set(rows["status"]) == {"scored"} and rows["pred"].str.len_chars().max() == 24
        assert sorted(p.name for p in (folder / "parts").glob("rows_*.parquet")) == [
            "rows_00000.parquet",
            "rows_00001.parquet",
        ]
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["n_scored"] == 10 and len(metrics["by_depth"]) == 5  # five depths
        assert metrics["parameters"]["context_tokens"] == 512
        assert (
            str(demo_run / "resources/demo_model/config.json")
            in metrics["provenance"]["inputs_sha256"]
        )
    report = (demo_run / "results/report.html").read_text()
    # no section shows a header over nothing: an empty table is a line saying why
    assert "<tbody></tbody>" not in report
    assert "No pentanucleotide cell has its own mean" in report  # the small demo scan's cells
    assert (
        "id='Genomic-NIAH'" in report
        and "demo_niah.niah_neardup_d2_512" in (demo_run / "results/results_table.md").read_text()
    )


def test_sharded_workflow_equals_single_process_cli(demo_run, tmp_path):
    out = tmp_path / "cli.parquet"
    cmd = [
        sys.executable,
        "-m",
        "carbon_vep.cli",
        "score",
        "--panel",
        str(DEMO / "demo_panel.vcf"),
        "--info-field",
        "LABEL",
        "--info-field",
        "NOTE",
        "--reference",
        str(DEMO / "chr17.hg19.part.fa"),
        "--model",
        str(demo_run / "resources/demo_model"),
        "--trust-remote-code",
        "--recipe",
        "centered",
        "--rc-average",
        "--window-bp",
        "240",
        "--build",
        "hg19",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, env=workflow_env(), check=True, capture_output=True, timeout=600)
    wf = pl.read_parquet(demo_run / "results/demo_centered/demo/scores.parquet")
    cli = pl.read_parquet(out)
    assert wf.select("row_id", "status").equals(cli.select("row_id", "status"))
    diff = (wf["score"] - cli["score"]).abs().max()
    assert diff is not None and diff < 1e-6


def test_unusable_panel_stops_before_scoring(tmp_path):
    panel = tmp_path / "shifted.tsv"
    lines = ["chrom\tpos\tref\talt\tLABEL"]  # the demo config's label column
    seq = "".join(
        line.strip() for line in (DEMO / "chr17.hg19.part.fa").read_text().splitlines()[1:]
    ).upper()
    for pos0 in range(1000, 31000, 1000):  # 0-based positions, as from a BED file
        ref = seq[pos0]
        lines.append(f"chr17\t{pos0}\t{ref}\t{'A' if ref != 'A' else 'C'}\t{pos0 % 2}")
    panel.write_text("\n".join(lines) + "\n")
    config = _config(tmp_path, tmp_path / "m", panel=panel)
    # one dataset's scores asked for: the scan, tasks and NIAH cells of the config need not run
    result = _snakemake(tmp_path, config, "results/demo_centered/demo/scores.parquet")
    assert result.returncode != 0
    log = (tmp_path / "logs/results/demo_centered/check_panel.log").read_text()
    assert "add 1 to POS" in log and "shifted.tsv" in log
    assert not (tmp_path / "results/demo_centered/checked.parquet").exists()
    assert not list(tmp_path.glob("results/*/demo/shard_scores/*.parquet"))


def test_snakemake_report_bundles_the_reports(demo_run, tmp_path):
    """`snakemake --report report.zip` bundles the run report, the results table and every
    dataset's report (marked with report() in the rules) with the rule graph."""
    import zipfile

    bundle = tmp_path / "report.zip"
    config = demo_run / "config.yaml"
    result = _snakemake(demo_run, config, "--report", str(bundle))
    assert result.returncode == 0, result.stderr[-2000:]
    names = zipfile.ZipFile(bundle).namelist()
    assert any(n.endswith("report/report.html") for n in names)  # Snakemake's own page
    assert sum(n.endswith("/report.md") for n in names) == 3  # one per dataset x model
    assert any(n.endswith("/results_table.tsv") for n in names)
    assert sum(n.endswith("/report.html") for n in names) == 2  # ours, inside the bundle


def test_every_written_column_and_status_is_defined(demo_run):
    from carbon_vep import columns

    defined = columns.by_name(
        columns.PANEL, columns.VCF_RECORD, columns.LABEL, columns.CHECK, columns.SCORE
    )
    carried = {"LABEL", "NOTE"}  # the panel's INFO fields asked for in the config
    statuses = {s.value for s in columns.OUTPUT_STATUSES}
    for dataset in ("demo_centered", "demo_nexttoken", "demo_scan_lookup"):
        scores = pl.read_parquet(demo_run / f"results/{dataset}/demo/scores.parquet")
        assert set(scores.columns) <= set(defined) | carried
        for name in set(scores.columns) - carried - {"status", "reason"}:
            assert scores[name].dtype == defined[name].dtype, name
        assert set(scores["status"]) <= statuses
    part = demo_run / "results/scans/demo_scan/demo/positions/chr17.parquet"
    expected = columns.schema(columns.SCAN_BASE)
    assert pl.read_parquet(part).schema == pl.Schema(expected)


# ---- the comparison gate and deterministic reruns (config/ci.yaml, baselines/demo.yaml) ------
def test_demo_matches_its_baseline(demo_run):
    """The run above is config/ci.yaml gated on baselines/demo.yaml (found next to the
    Snakefile): its last rule passed, every metric of the demo is within 1e-6 of the baseline.
    A change that moves a demo metric fails here until the baseline is regenerated on purpose."""
    gate = pl.read_csv(demo_run / "results/baseline_comparison.tsv", separator="\t")
    baseline = yaml.safe_load((ROOT / "baselines/demo.yaml").read_text())["values"]
    expected = {(t, m, k) for t, metrics in baseline.items() for m, v in metrics.items() for k in v}
    assert set(gate.select("task", "metric", "model").iter_rows()) == expected
    assert set(gate["verdict"]) == {"ok"}
    junit = (demo_run / "results/baseline_comparison.junit.xml").read_text()
    assert 'failures="0"' in junit and f'tests="{len(expected)}"' in junit


def _rerun_config(run: Path, **changes) -> Path:
    config = yaml.safe_load((run / "config.yaml").read_text()) | changes
    path = run / "rerun.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_workflow_fails_on_drift_with_a_table_and_junit(demo_run, tmp_path):
    """`baseline:` makes the gate the last rule: a planted drift fails snakemake itself, the log
    holds the table and the JUnit XML names the drifted value; only the gate reruns."""
    from support.cluster import copy_run

    run = copy_run(demo_run, tmp_path / "run")
    drifted = yaml.safe_load((ROOT / "baselines/demo.yaml").read_text())
    drifted["values"]["demo_centered"]["auroc"]["demo"] += 0.05
    (run / "drifted.yaml").write_text(yaml.safe_dump(drifted))
    config = _rerun_config(run, baseline=str(run / "drifted.yaml"))
    # mtime only: the changed config hash in the provenance params must not rerun the scoring
    result = _snakemake(run, config, "--rerun-triggers", "mtime")
    assert result.returncode != 0
    assert "compare_baseline" in result.stderr and "score_shard" not in result.stderr
    log = (run / "logs/results/compare_baseline.log").read_text()
    header = next(line for line in log.splitlines() if line.startswith("task"))
    assert header.split() == [
        "task",
        "metric",
        "model",
        "baseline",
        "now",
        "difference",
        "allowed",
        "verdict",
    ]
    drift = [line for line in log.splitlines() if "DRIFT" in line]
    assert len(drift) == 1 and drift[0].split()[:3] == ["demo_centered", "auroc", "demo"]
    n = sum(len(models) for metrics in drifted["values"].values() for models in metrics.values())
    assert drift[0].split()[5] == "-0.0500" and f"FAILED: 1 of {n}" in log
    import xml.etree.ElementTree as ET

    cases = ET.parse(run / "results/baseline_comparison.junit.xml").getroot().iter("testcase")
    failed = [(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None]
    assert failed == [("demo_centered", "auroc [demo]")]
    assert not (run / "results/baseline_comparison.tsv").exists()


def _tasks(run: Path) -> list[str]:
    return list(yaml.safe_load((run / "config.yaml").read_text())["tasks"])


def _one_job_of_each_model_rule(run: Path) -> list[str]:
    """An output of one job of every model rule of the run: the first shard of each dataset
    (each recipe scores differently), one task of each kind (its first part), the first part
    of one NIAH cell,
    and the scan's merged files (their chunks' Parquet is temporary: no file to name once the
    run is done, so the chunks are forced by rule name)."""
    results = run / "results"
    config = yaml.safe_load((run / "config.yaml").read_text())
    tasks = {task["kind"]: name for name, task in sorted(config["tasks"].items(), reverse=True)}
    picks = [
        *(min(d.glob("shard_*.parquet")) for d in results.glob("*/demo/shard_scores")),
        *(
            results / f"suite/{name}/demo/parts/predictions_00000.parquet"
            for name in tasks.values()
        ),
        min(results.glob("suite/niah/*/*/demo/parts/rows_*.parquet")),
        *results.glob("scans/*/demo/positions/*.parquet"),
    ]
    return [str(p.relative_to(run)) for p in picks]


def test_cpu_reruns_are_identical(demo_run, tmp_path):
    """One job of every model rule run again on CPU gives identical outputs, value for value
    (the baselines' 1e-6 tolerance is for printing, not for noise). Determinism is a property
    of a job, so one job a rule, and only those jobs (`--force` on their outputs: the stages
    after them read the same bytes; the merged Parquet after a rerun is compared in
    tests/workflow/test_resume.py and test_slurm.py)."""
    from support.cluster import copy_run

    run = copy_run(demo_run, tmp_path / "run")
    forced = _one_job_of_each_model_rule(run)
    result = _snakemake(
        run, run / "config.yaml", "--force", "--forcerun", "scan_chunk", "--", *forced
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    for rule in ("score_shard", "scan_chunk", "score_recovery", "score_perturbation", "score_niah"):
        assert f"rule {rule}:" in log, rule  # each model rule did score again
    shards = [f for f in forced if "/shard_scores/" in f]
    assert log.count("rule score_shard:") == len(shards) >= 2  # one a dataset, not every shard
    assert "rule compute_metrics:" not in log  # the jobs alone, nothing after them
    for name in forced:
        assert (run / name).stat().st_mtime > (demo_run / name).stat().st_mtime, name
    tables = sorted(p.relative_to(demo_run) for p in (demo_run / "results").rglob("*.parquet"))
    assert len(tables) > 15
    for name in tables:
        first, second = pl.read_parquet(demo_run / name), pl.read_parquet(run / name)
        assert first.equals(second), name
    for name in sorted(p.relative_to(demo_run) for p in demo_run.glob("results/**/metrics.json")):
        first, second = (json.loads((r / name).read_text()) for r in (demo_run, run))
        assert first == second, name


def test_every_result_records_its_inputs_hashes(demo_run):
    """The provenance of each result: the sha256 of its panel, reference or task file and of
    every file of the model (weights, tokenizer, remote code), and the model's Hub commit."""
    import hashlib

    model = demo_run / "resources/demo_model"

    def sha(path):
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    centered = json.loads((demo_run / "results/demo_centered/demo/metrics.json").read_text())
    recovery = json.loads((demo_run / "results/suite/demo_recovery/demo/metrics.json").read_text())
    for metrics, own in (
        (centered, [DEMO / "demo_panel.vcf", DEMO / "chr17.hg19.part.fa"]),
        (recovery, [DEMO / "demo_recovery.tsv"]),
    ):
        hashes = metrics["provenance"]["inputs_sha256"]
        for path in own:
            assert hashes[str(path)] == sha(path)
        for name in ("model.safetensors", "tokenization_hybrid_dna.py", "config.json"):
            assert hashes[f"{model}/{name}"] == sha(model / name)
        assert metrics["provenance"]["model_commit"] is None  # a local directory


# ---- the run's HTML report in a real browser ---------------------------------------------
def test_the_report_works_in_a_browser_offline(demo_run):
    """results/report.html of the CI config in headless Chromium from file:// with every
    network request refused: it loads with no console error and no request leaving the file,
    every figure decodes to a non-empty image, every in-page link lands on an element, every
    table has its header, sorting a column orders its rows, metrics carry their definitions, the
    print stylesheet hides the contents bar. A full-page screenshot goes to
    results/report_screenshot.png (a CI artifact)."""
    from support.browser import CHROMIUM_FLAGS, chromium_path, sync_playwright

    executable = chromium_path()
    report = demo_run / "results/report.html"
    shot = ROOT / "results/report_screenshot.png"
    shot.parent.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
        requests, errors = [], []
        context.route(
            "**/*",
            lambda route: (
                route.continue_()
                if route.request.url.startswith("file://")
                else (requests.append(route.request.url), route.abort())
            ),
        )
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(report.as_uri(), wait_until="load")
        images = page.evaluate(
            "Array.from(document.images).map(i => "
            "[i.alt, i.complete, i.naturalWidth, i.naturalHeight])"
        )
        links = page.evaluate(
            "Array.from(document.querySelectorAll('a[href^=\"#\"]')).map(a => "
            "[a.getAttribute('href'), !!document.getElementById("
            "decodeURIComponent(a.getAttribute('href').slice(1)))])"
        )
        tables = page.evaluate(
            "Array.from(document.tables || document.querySelectorAll('table'))"
            ".map(t => t.querySelectorAll('thead th').length)"
        )
        hints = page.evaluate(
            "Array.from(document.querySelectorAll('#results ~ table abbr'))"
            ".map(a => [a.textContent, a.title])"
        )
        sorted_values = _sort_column(page)
        page.screenshot(path=str(shot), full_page=True)
        page.emulate_media(media="print")
        nav_printed = page.evaluate("getComputedStyle(document.querySelector('nav')).display")
        browser.close()
    assert not errors, errors
    assert not requests, requests  # everything is inline: no script, style or image fetched
    assert len(images) >= 10 and all(ok and w > 50 and h > 50 for _, ok, w, h in images), images
    assert len(links) >= 8 and all(found for _, found in links), links
    assert tables and all(n > 0 for n in tables)
    # the results table's metrics, defined on hover; NIAH's ll_correct is no headline there
    assert {"auroc", "gen_exact_match"} <= {text for text, _ in hints}
    assert "ll_correct" not in {text for text, _ in hints}
    assert all(title for _, title in hints)
    assert sorted_values == sorted(sorted_values, reverse=True)
    assert nav_printed == "none"
    assert shot.stat().st_size > 50_000


def _sort_column(page) -> list[float]:
    """Click the results table's model column twice (ascending, then descending): its numbers."""
    header = page.locator("h2#results ~ table").first.locator("th").nth(2)
    header.click()
    header.click()
    texts = page.locator("h2#results ~ table").first.locator("tbody tr td:nth-child(3)")
    return [float(t.split()[0]) for t in texts.all_text_contents() if t != "—"]


MODEL_RULES = ("score_shard", "scan_chunk", "score_recovery", "score_perturbation", "score_niah")


# the jobs that compute metrics from rows already scored: the panels' and each task kind's merge
METRIC_RULES = ("compute_metrics", "merge_recovery", "merge_perturbation", "merge_niah")


@pytest.mark.parametrize(
    "edit",
    ["panel_metric_settings", "bootstrap", "new_task", "scan_tracks", "new_dataset"],
)
def test_a_config_edit_reruns_no_model_job_it_cannot_change(demo_run, tmp_path, edit):
    """`snakemake -n` on the finished CI run after an edit: no model job of an entry the edit
    leaves alone (a panel's metric settings, the bootstrap, another entry added, a scan's
    tracks), only the new entry's own when one is added. The bootstrap reruns every job that
    computes metrics (each task kind's merge, compute_metrics) and none that scores."""
    import re

    from support.cluster import copy_run

    run = copy_run(demo_run, tmp_path / "run")
    config = yaml.safe_load((run / "config.yaml").read_text())
    if edit == "panel_metric_settings":
        config["datasets"]["demo_centered"].update(
            headline_metrics=["auroc"], breakdown_columns=["NOTE"], spearman_column="NOTE"
        )
    elif edit == "bootstrap":
        config["bootstrap"] = 50  # the CI config's is 0
    elif edit == "new_task":
        config["tasks"]["demo_cag_again"] = dict(config["tasks"]["demo_cag_expansion"])
    elif edit == "scan_tracks":
        config["scans"]["demo_scan"]["tracks"] = True
    else:
        config["datasets"]["demo_again"] = dict(config["datasets"]["demo_nexttoken"])
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(run, run / "config.yaml", "-n", "-p")
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    jobs = []  # (rule, wildcards) of each planned job, a block of the dry run's output each
    for block in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) \w+:)", log):
        head = re.match(r"(?:local)?(?:rule|checkpoint) (\w+):", block)
        if head:
            wildcards = re.search(r"^\s+wildcards: (.*)$", block.split("\n\n")[0], re.M)
            jobs.append((head.group(1), wildcards.group(1) if wildcards else ""))
    model_jobs = [(rule, wc) for rule, wc in jobs if rule in MODEL_RULES]
    if edit == "new_task":
        assert model_jobs and all("task=demo_cag_again" in wc for _, wc in model_jobs), jobs
    elif edit == "new_dataset":  # its shards come from a checkpoint: planned after it runs
        assert all("dataset=demo_again" in wc for _, wc in model_jobs), jobs
        assert ("check_panel", "dataset=demo_again") in jobs
    else:
        assert model_jobs == [], model_jobs
    if edit == "panel_metric_settings":
        assert ("compute_metrics", "dataset=demo_centered, model=demo") in jobs
        assert {rule for rule, _ in jobs} & set(METRIC_RULES) == {"compute_metrics"}
    if edit == "bootstrap":
        from carbon_vep.config.niah_grid import niah_config_name

        niah = config["niah"]["demo_niah"]
        cells = [niah_config_name(t, c) for t in niah["tasks"] for c in niah["contexts"]]
        expected = [
            *(("compute_metrics", f"dataset={d}, model=demo") for d in config["datasets"]),
            *(
                ("merge_recovery" if task["kind"] == "sequence_recovery" else "merge_perturbation",
                 f"task={name}, point=, model=demo")
                for name, task in config["tasks"].items()
            ),
            *(("merge_niah", f"niah=demo_niah, cell={c}, model=demo") for c in cells),
        ]  # fmt: skip
        assert sorted(job for job in jobs if job[0] in METRIC_RULES) == sorted(expected)
