"""Reports: the Markdown page per dataset x model, the run's HTML page and its summary."""

import base64
import json
import re

import numpy as np
import polars as pl
import pytest

from carbon_vep.config.stages import (
    EvaluationSettings,
    LabelSettings,
    MetricSettings,
    PerturbationSettings,
    RecoverySettings,
)
from carbon_vep.config.tasks import TASK_KINDS
from carbon_vep.evaluate.metrics import evaluated_rows, vep_metrics
from carbon_vep.report.html import TASK_SECTIONS, render_html
from carbon_vep.report.markdown import (
    REPORT_COLUMNS,
    render_report,
    render_summary,
    write_report,
)
from carbon_vep.report.page import load_run
from carbon_vep.report.results_table import results_markdown, results_table
from carbon_vep.suite.perturbation import perturbation_metrics
from carbon_vep.suite.recovery import recovery_metrics

LABELS = LabelSettings(label_column="label")

PROVENANCE = {
    "model": "org/model-{m}",
    "revision": "abc123",
    "dtype": "bfloat16",
    "upcast_output_layer": "false",
}


def _scores(seed: int) -> pl.DataFrame:
    """40 variants on chr1 / chr2 plus chr3 with negatives only, and two unscored rows."""
    rng = np.random.default_rng(seed)
    labels = np.array([0, 1] * 16 + [0] * 8)
    scores = labels * 1.0 + rng.normal(0, 0.8, labels.size)
    chroms = ["chr1"] * 16 + ["chr2"] * 16 + ["chr3"] * 8
    frame = pl.DataFrame(
        {
            "chrom": chroms,
            "pos": list(range(1, 41)),
            "ref": ["A"] * 40,
            "alt": ["C"] * 40,
            "status": ["scored"] * 40,
            "reason": [""] * 40,
            "score": scores,
            "label": [str(v) for v in labels],
            "recipe": ["centered"] * 40,
            "normalization": ["full_vocab"] * 40,
            "region": ["coding", "intron"] * 20,
        }
    )
    extra = pl.DataFrame(
        {
            "chrom": ["chr1", "chr9"],
            "pos": [50, 60],
            "ref": ["A", "G"],
            "alt": ["T", "C"],
            "status": ["ref_mismatch", "unknown_contig"],
            "reason": ["REF A but reference has C", "contig 'chr9' not in the reference"],
            "score": [None, None],
            "label": ["1", "0"],
            "recipe": [None, None],
            "normalization": [None, None],
            "region": ["coding", "coding"],
        }
    )
    merged = pl.concat([frame, extra], how="vertical_relaxed")
    return merged.with_row_index("row_id").with_columns(pl.col("row_id").cast(pl.Int64))


def _named(result: dict, task: str, model: str, headline: list[str]) -> dict:
    provenance = {k: v.format(m=model) for k, v in PROVENANCE.items()}
    return {
        **result,
        "task": task,
        "model_key": model,
        "headline_metrics": headline,
        "provenance": provenance,
    }


def _write(folder, name: str, result: dict, rows: pl.DataFrame, rows_name: str):
    """The metrics JSON in `folder`, its row file in a folder of its own: the report pairs the
    files it is given, it does not look for them by name."""
    folder.mkdir(parents=True)
    rows_path = folder.parent / f"{folder.name}_rows" / rows_name
    rows_path.parent.mkdir()
    rows.write_parquet(rows_path)
    (folder / "metrics.json").write_text(json.dumps(result))
    return folder / "metrics.json", rows_path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("run")
    paths = []
    options = MetricSettings(evaluation=EvaluationSettings(bootstrap=30))
    for i, model in enumerate(("m1", "m2")):
        scores = _scores(i)
        result = _named(
            vep_metrics(scores, LABELS, options),
            "ds",
            model,
            ["auroc", "average_precision_by_chrom_weighted_drop_single_class"],
        )
        evaluated = evaluated_rows(scores, LABELS)
        paths.append(_write(tmp_path / "ds" / model, "ds", result, evaluated, "evaluated.parquet"))
    predictions = pl.DataFrame(
        {
            "status": ["scored"] * 4,
            "accuracy": [0.5, 0.25, 1.0, 0.75],
            "type": ["a", "a", "b", "b"],
            "label": ["A" * 30] * 4,
            "prompt_non_acgt": [0] * 4,
        }
    )
    result = recovery_metrics(predictions, RecoverySettings(), EvaluationSettings(bootstrap=30))
    result = _named(result, "rec", "m1", ["accuracy"])
    paths.append(
        _write(tmp_path / "suite/rec/m1", "rec", result, predictions, "predictions.parquet")
    )
    pairs = pl.DataFrame(
        {
            "status": ["scored"] * 3,
            "correct": [True, True, False],
            "tie": [False, False, True],
            "margin": [0.3, 0.1, 0.0],
            "non_acgt": [0, 0, 0],
        }
    )
    result = perturbation_metrics(pairs, PerturbationSettings(), EvaluationSettings(bootstrap=30))
    result = _named(result, "cag", "m2", ["accuracy"])
    result["warnings"].append("<b>not bold</b>")
    paths.append(_write(tmp_path / "suite/cag/m2", "cag", result, pairs, "predictions.parquet"))
    return load_run([m for m, _ in paths], [r for _, r in paths])


@pytest.fixture(scope="module")
def page(run):
    return render_html(run, results_table([r.metrics for r in run]))


def test_every_task_kind_has_its_section():
    """A kind declared in config.tasks but without a section would never reach the page."""
    assert list(TASK_SECTIONS) == list(TASK_KINDS)


def test_html_is_one_self_contained_page_with_every_section(page):
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    # one inline script (the table sorter), nothing loaded from elsewhere
    assert page.count("<script") == 1 and "<script>" in page and "<link" not in page
    images = re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,([^"]+)"', page)
    alts = [alt for alt, _ in images]
    assert len(images) == 5, alts  # ROC/PR, score distributions, chromosome bars, recovery, pairs
    assert all(base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n" for _, data in images)
    for text in (
        "ROC and PR, ds",
        "scores, ds",
        "AUROC by chromosome, ds",
        "recovery accuracy by type, rec",
        "margins, cag",
    ):
        assert text in alts
    for anchor in ("results", "ds", "rec", "cag", "provenance"):
        assert f"id='{anchor}'" in page


def test_html_comparison_table_status_counts_and_provenance(run, page):
    ds_m1 = run[0].metrics
    assert f"{100 * ds_m1['metrics']['auroc']:.2f} [" in page  # x100 with its interval
    assert "average_precision_by_chrom_weighted_drop_single_class" in page
    assert "<td>ref_mismatch</td>" in page and "<td>unknown_contig</td>" in page
    assert "chr3 (20.0%)" in page  # the one-class chromosome and its weight of all rows
    assert "org/model-m1" in page and "org/model-m2" in page and "abc123" in page
    assert "&lt;b&gt;not bold&lt;/b&gt;" in page and "<b>not bold</b>" not in page
    assert "ties" in page and "chance = 0.25" in page


def test_summary_markdown_has_the_results_table(run):
    metrics = [r.metrics for r in run]
    summary = render_summary(metrics, results_markdown(metrics))
    assert "| task | metric (×100) | m1 | m2 |" in summary
    assert "| rec | accuracy | 62.50" in summary and " — |" in summary  # m2 did not run rec
    assert "- ds / m1: ref_mismatch: 1, scored: 40, unknown_contig: 1" in summary


def test_markdown_report_per_dataset(run):
    page = render_report(_scores(0), run[0].metrics, "ds scored by m1")
    assert "## Input status counts" in page and "| ref_mismatch | 1 |" in page
    assert "dropped one-class chromosomes chr3 (n=8, weight 0.200)" in page
    assert "average_precision_by_chrom_weighted_keep_all" in page
    assert "REF A but reference has C" in page


def test_the_report_from_its_file_reads_only_the_columns_it_renders(run, tmp_path):
    """write_report reads REPORT_COLUMNS of the merged table alone (a ClinVar-size panel's
    other columns stayed in memory for nothing): its page is the one the whole frame gives."""
    merged = _scores(0).with_columns(pl.lit("x" * 50).alias("CLNDN"))
    merged.write_parquet(tmp_path / "scores.parquet")
    (tmp_path / "metrics.json").write_text(json.dumps(run[0].metrics))
    write_report(
        str(tmp_path / "scores.parquet"), str(tmp_path / "metrics.json"), "t", tmp_path / "r.md"
    )
    assert (tmp_path / "r.md").read_text() == render_report(merged, run[0].metrics, "t")
    assert set(REPORT_COLUMNS) < set(merged.columns)


def test_the_top_ten_breaks_a_tie_at_the_cut_in_the_tables_order(run, tmp_path):
    """The highest scores come from a top-k over the Parquet read in streaming queries: four
    rows share the 10th place's score, and the first two of them in the table (slices of 3
    rows apart) make the list; unscored rows (null scores, one with a high score left from a
    failed run) never do, and a scored row without a score does not stop the page."""
    scores = [5.0, 1.0, 3.0, 2.0, 9.0, 2.0, 8.0, 2.0, 7.0, 6.0, 2.0, 4.0, 3.5, 0.5]
    merged = pl.DataFrame(
        {
            "chrom": ["chr1"] * 14 + ["chr2", "chr2", "chr2"],
            "pos": [*range(1, 15), 1, 2, 3],
            "ref": ["A"] * 17,
            "alt": ["C"] * 17,
            "status": ["scored"] * 14 + ["skipped", "failed", "scored"],
            "reason": [""] * 14 + ["too long", "boom", ""],
            "recipe": ["nexttoken"] * 17,
            "normalization": ["acgt_strings"] * 17,
            "score": [*scores, None, 99.0, None],
        }
    )
    merged.write_parquet(tmp_path / "scores.parquet", row_group_size=3)
    (tmp_path / "metrics.json").write_text(json.dumps(run[0].metrics))
    write_report(
        str(tmp_path / "scores.parquet"), str(tmp_path / "metrics.json"), "t", tmp_path / "r.md"
    )
    page = (tmp_path / "r.md").read_text()
    assert page == render_report(merged, run[0].metrics, "t")
    table = page.split("## Highest-scoring variants")[1].split("##")[0]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    listed = [c[:2] for c in cells if c[0].startswith("chr") and c[0] != "chrom"]
    # scores 9 8 7 6 5 4 3.5 3, then the 2.0s at POS 4, 6, 8, 11: the first two make it
    assert listed == [["chr1", str(p)] for p in (5, 7, 9, 10, 1, 12, 13, 3, 4, 6)]
    assert "17 input rows, 15 scored" in page
    assert "| skipped | too long | 1 |" in page and "| failed | boom | 1 |" in page


def test_reasons_with_equal_counts_keep_the_order_of_their_first_row(run):
    """The 'Rows not scored' table: most rows first, ties in the order the panel has them (not
    group_by's arbitrary order, which made two runs' report.md differ)."""
    reasons = ["z last", "a first", "m middle", "a first", "q", "b"]
    scored = _scores(0)
    unscored = scored.head(6).with_columns(
        pl.lit("skipped").alias("status"),
        pl.Series("reason", reasons),
        pl.lit(None, dtype=pl.Float64).alias("score"),
    )
    merged = pl.concat([scored, unscored], how="vertical_relaxed")
    pages = {render_report(merged, run[0].metrics, "t") for _ in range(5)}
    assert len(pages) == 1
    table = pages.pop().split("## Rows not scored, by reason")[1].split("##")[0]
    order = [line.split(" | ")[1] for line in table.splitlines() if line.startswith("| skipped")]
    assert order == ["a first", "z last", "m middle", "q", "b"]


def test_the_report_plots_the_rows_the_metrics_used(run):
    """The curves come from the evaluated rows compute_metrics wrote (labels as 0/1, conflicts
    and unscored rows already left out), not from labels recomputed by the report."""
    rows = run[0].rows
    assert rows.columns == ["row_id", "chrom", "label01", "score"]
    assert rows.height == run[0].metrics["n_labelled"] == 40
    assert run[0].metrics["parameters"]["recipe"] == "centered"
    with pytest.raises(ValueError, match="2 metrics files but 1 row files"):
        load_run(["a.json", "b.json"], ["a.parquet"])


def test_a_table_without_rows_is_a_line_saying_why():
    from carbon_vep.report.page import html_table

    assert html_table(["a", "b"], [], empty="Nothing scanned yet.") == (
        "<p class='empty'>Nothing scanned yet.</p>"
    )
    assert "<tbody><tr>" in html_table(["a", "b"], [["x", 1]])


def test_brackets_are_explained_only_where_there_are_intervals(run):
    """With `bootstrap: 0` no metric has an interval: neither the dataset's report nor the
    results table says "Brackets" (it used to, over numbers without any)."""
    with_intervals = run[0].metrics
    assert "Brackets: 95% bootstrap interval." in render_report(_scores(0), with_intervals, "t")
    assert "Brackets:" in results_markdown([with_intervals])
    options = MetricSettings(evaluation=EvaluationSettings(bootstrap=0))
    plain = _named(vep_metrics(_scores(0), LABELS, options), "ds", "m1", ["auroc"])
    assert not plain.get("confidence_intervals")
    assert "Brackets" not in render_report(_scores(0), plain, "t")
    table = results_markdown([plain])
    assert "| ds | auroc |" in table and "Brackets" not in table


def test_results_table_refuses_two_metrics_of_one_task_and_model(tmp_path, caplog):
    """Two metrics JSON of one (task, model) cannot share a cell: the command names the task,
    the model and both files (exit 2, nothing written), not a polars pivot error."""
    from carbon_vep.cli import main

    result = {"kind": "perturbation", "metrics": {"accuracy": 0.5}, "definitions": {}}
    paths = []
    for name, value in (("a", 0.5), ("b", 0.75)):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "metrics.json"
        named = _named(result, "pert", "demo", ["accuracy"])
        path.write_text(json.dumps({**named, "metrics": {"accuracy": value}}))
        paths.append(str(path))
    out = {f: str(tmp_path / f"table.{f}") for f in ("parquet", "tsv", "md")}
    argv = ["results-table", "--metrics", *paths, "--out-parquet", out["parquet"]]
    code = main([*argv, "--out-tsv", out["tsv"], "--out-md", out["md"]])
    assert code == 2
    (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "'pert'" in error and "'demo'" in error and paths[0] in error and paths[1] in error
    assert not any((tmp_path / f"table.{f}").exists() for f in out)


def test_every_output_in_the_snakemake_report_has_a_caption():
    """`snakemake --report` shows each report() output with its caption: the scan summary's
    was missing (an empty caption beside the datasets' and the run's)."""
    from pathlib import Path

    rules = Path(__file__).resolve().parents[2] / "workflow/rules"
    for smk in sorted(rules.glob("*.smk")):
        text = smk.read_text()
        for call in re.finditer(r"report\(\n(.*?)\n\s*\)", text, re.S):
            caption = re.search(r'caption="([^"]+)"', call.group(1))
            assert caption, f"{smk.name}: report() without a caption: {call.group(1).strip()}"
            assert (rules / caption.group(1)).resolve().is_file(), caption.group(1)
