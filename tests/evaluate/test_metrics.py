"""VEP metrics against hand-computed values, one test per convention."""

import json
import logging

import numpy as np
import polars as pl
import pytest

from carbon_vep import cli
from carbon_vep.config.fields import ConfigError
from carbon_vep.config.stages import EvaluationSettings, LabelSettings, MetricSettings
from carbon_vep.errors import InputError
from carbon_vep.evaluate.bootstrap import bootstrap_intervals
from carbon_vep.evaluate.label_counts import UNMATCHED_LABELS
from carbon_vep.evaluate.metrics import (
    auprc_trapezoid,
    auroc,
    average_precision,
    by_chromosome,
    evaluated_rows,
    metric_columns,
    spearman,
    vep_metrics,
)

LABELS = np.array([0, 0, 1, 1])
SCORES = np.array([0.1, 0.4, 0.35, 0.8])
NO_BOOTSTRAP = MetricSettings(evaluation=EvaluationSettings(bootstrap=0))
LABEL = LabelSettings(label_column="LABEL")

# Three chromosomes: A (both classes, AUROC 1), B (AUROC 3/4), C (negatives only).
CHROMS = np.array(["A"] * 3 + ["B"] * 4 + ["C"] * 3)
CHROM_LABELS = np.array([0, 1, 1, 0, 0, 1, 1, 0, 0, 0])
CHROM_SCORES = np.array([0.1, 0.9, 0.5, 0.2, 0.6, 0.4, 0.8, 0.3, 0.7, 0.9])
AP_B = 0.5 * 1 + 0.5 * 2 / 3  # ranked 0.8(+) 0.6(-) 0.4(+) 0.2(-)


def test_auroc_hand_computed():
    # positive-negative pairs ranked correctly: (0.35>0.1), (0.8>0.1), (0.8>0.4) = 3 of 4
    assert auroc(LABELS, SCORES) == pytest.approx(0.75)


def test_average_precision_hand_computed():
    # ranked: 0.8(+) 0.4(-) 0.35(+) 0.1(-): precision 1 at recall .5, 2/3 at recall 1
    assert average_precision(LABELS, SCORES) == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)


def test_auprc_trapezoid_hand_computed():
    # PR points (recall, precision): (0,1) (.5,1) (.5,.5) (1,2/3) (1,.5); trapezoid area
    expected = 0.5 * 1.0 + 0.5 * (0.5 + 2 / 3) / 2
    assert auprc_trapezoid(LABELS, SCORES) == pytest.approx(expected)
    assert auprc_trapezoid(LABELS, SCORES) != pytest.approx(average_precision(LABELS, SCORES))


def test_by_chromosome_drop_single_class_renormalises_and_lists_what_it_dropped():
    result = by_chromosome(CHROM_LABELS, CHROM_SCORES, CHROMS, "auroc", "drop_single_class")
    assert result["value"] == pytest.approx(3 / 7 * 1.0 + 4 / 7 * 0.75)
    assert [c["chrom"] for c in result["chromosomes"]] == ["A", "B"]
    assert [c["weight"] for c in result["chromosomes"]] == pytest.approx([3 / 7, 4 / 7])
    assert result["dropped"] == [
        {"chrom": "C", "n": 3, "n_positive": 0, "weight_of_all": 0.3, "reason": "one class only"}
    ]
    assert result["dropped_weight"] == pytest.approx(0.3)
    ap = by_chromosome(CHROM_LABELS, CHROM_SCORES, CHROMS, "average_precision", "drop_single_class")
    assert ap["value"] == pytest.approx(3 / 7 * 1.0 + 4 / 7 * AP_B)


def test_by_chromosome_keep_all_keeps_every_chromosome():
    ap = by_chromosome(CHROM_LABELS, CHROM_SCORES, CHROMS, "average_precision", "keep_all")
    # C has no positives: sklearn's average precision is 0 there, and C keeps its weight
    assert ap["value"] == pytest.approx(0.3 * 1.0 + 0.4 * AP_B + 0.3 * 0.0)
    assert ap["dropped"] == [] and len(ap["chromosomes"]) == 3
    roc = by_chromosome(CHROM_LABELS, CHROM_SCORES, CHROMS, "auroc", "keep_all")
    assert roc["value"] is None  # AUROC is undefined on C, so the average is too
    with pytest.raises(ValueError, match="convention"):
        by_chromosome(CHROM_LABELS, CHROM_SCORES, CHROMS, "auroc", "traitgym")


def test_spearman_hand_computed():
    # delta = -score = [-5, -3, -4, -1, -2] has ranks [1, 3, 2, 5, 4]; sum d^2 = 4
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    delta = -np.array([5.0, 3.0, 4.0, 1.0, 2.0])
    assert spearman(x, delta) == pytest.approx(1 - 6 * 4 / (5 * 24))
    assert spearman(x[:2], delta[:2]) is None


def test_bootstrap_intervals_are_deterministic_and_bracket_the_estimate():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 200)
    scores = labels + rng.normal(0, 1.2, 200)

    def stat(index):
        return {"auroc": auroc(labels[index], scores[index])}

    first = bootstrap_intervals(200, stat, 200, seed=3)["auroc"]
    assert first == bootstrap_intervals(200, stat, 200, seed=3)["auroc"]
    assert first["low"] < auroc(labels, scores) < first["high"]
    assert first["n_resamples"] == 200 and first["level"] == 0.95
    assert first != bootstrap_intervals(200, stat, 200, seed=4)["auroc"]


def _merged(scores, labels, statuses=None, **extra):
    n = len(scores)
    return pl.DataFrame(
        {"status": statuses or ["scored"] * n, "score": scores, "LABEL": labels, **extra}
    )


def test_vep_metrics_uses_only_scored_labelled_rows_and_counts_statuses():
    merged = _merged(
        [0.1, 0.4, 0.35, 0.8, 99.0, None],
        ["0", "0", "1", "1", None, "1"],
        ["scored"] * 5 + ["ref_mismatch"],
    )
    result = vep_metrics(merged, LABEL, NO_BOOTSTRAP)
    assert result["n_labelled"] == 4 and result["n_scored_without_label"] == 1
    assert result["metrics"]["auroc"] == pytest.approx(0.75)
    assert result["status_counts"] == {"ref_mismatch": 1, "scored": 5}
    for name in result["metrics"]:
        assert name in result["definitions"]


def test_label_values_of_neither_class_are_named_with_their_counts(tmp_path, caplog):
    """A scored row whose label is in neither list leaves every metric; the count alone
    (n_scored_without_label) did not say why. The metrics name the commonest such values (as
    written, of scored rows, nulls aside) with their rows, count the rest, and warn once."""
    words = ["VUS"] * 4 + ["pathogenic?"] * 3 + [f"other{i}" for i in range(11)]
    labels = ["0", "1", "0", "1", None, None, *words, "VUS"]
    statuses = ["scored"] * (len(labels) - 1) + ["ref_mismatch"]  # the last VUS: not scored
    scores = [0.1, 0.8, 0.2, 0.9] + [0.5] * (len(labels) - 4)
    result = vep_metrics(_merged(scores, labels, statuses), LABEL, NO_BOOTSTRAP)
    assert result["n_scored_without_label"] == 2 + 18
    unmatched = result[UNMATCHED_LABELS]
    assert unmatched["values"][:3] == [
        {"value": "VUS", "n": 4},
        {"value": "pathogenic?", "n": 3},
        {"value": "other0", "n": 1},
    ]
    assert len(unmatched["values"]) == 10  # then other1, other10, other2 .. other6: by text
    assert unmatched["n_other_values"] == 3 and unmatched["n_other_rows"] == 3
    (warning,) = [w for w in result["warnings"] if "label value" in w]
    assert warning.startswith("18 scored rows left out of the metrics hold a label value of ")
    assert warning.endswith(
        "'VUS' (4), 'pathogenic?' (3), 'other0' (1), 'other1' (1), 'other10' (1) and 8 other values"
    )
    assert result["metrics"]["auroc"] == pytest.approx(1.0)
    # the job writes the same JSON and logs the warning as one line
    _merged(scores, labels, statuses).write_parquet(tmp_path / "scores.parquet")
    settings = json.dumps({"label_column": "LABEL", "bootstrap": 0})
    argv = ["metrics", "--merged", str(tmp_path / "scores.parquet"), "--settings", settings]
    argv += ["--task", "t", "--model-key", "m", "--out", str(tmp_path / "metrics.json")]
    with caplog.at_level(logging.WARNING):
        assert cli.main(argv) == 0
    assert json.loads((tmp_path / "metrics.json").read_text())[UNMATCHED_LABELS] == unmatched
    assert [r.getMessage() for r in caplog.records if "label value" in r.getMessage()] == [warning]
    # every scored row labelled or null: the key says none, and there is no warning
    clean = vep_metrics(_merged([0.1, 0.8, 0.5], ["0", "1", None]), LABEL, NO_BOOTSTRAP)
    assert clean[UNMATCHED_LABELS] == {"values": [], "n_other_values": 0, "n_other_rows": 0}
    assert not [w for w in clean["warnings"] if "label value" in w]


def test_label_conflicts_are_excluded_and_counted():
    merged = _merged(
        [0.1, 0.4, 0.35, 0.8, 5.0, -5.0],
        ["0", "0", "1", "1", "0", "1"],
        label_conflict=[False, False, False, False, True, True],
    )
    result = vep_metrics(merged, LABEL, NO_BOOTSTRAP)
    assert result["n_excluded_label_conflict"] == 2 and result["n_labelled"] == 4
    assert result["metrics"]["auroc"] == pytest.approx(0.75)  # the two conflicts left out
    assert any("conflicting labels" in w for w in result["warnings"])


def test_by_chromosome_groups_on_the_reference_contig_not_the_panels_spelling():
    # chromosome B written two ways (`B`, `chrB`) is one reference contig: one group, as if
    # the panel had spelled it one way
    spelled = ["A"] * 3 + ["B", "chrB", "B", "chrB"] + ["C"] * 3
    merged = _merged(
        list(CHROM_SCORES),
        [str(v) for v in CHROM_LABELS],
        chrom=spelled,
        ref_chrom=list(CHROMS),
    )
    result = vep_metrics(merged, LABEL, NO_BOOTSTRAP)
    expected = by_chromosome(CHROM_LABELS, CHROM_SCORES, CHROMS, "auroc", "drop_single_class")
    assert result["metrics"]["auroc_by_chrom_weighted_drop_single_class"] == pytest.approx(
        expected["value"]
    )
    kept = result["by_chromosome"]["auroc"]["drop_single_class"]["chromosomes"]
    assert sorted(c["chrom"] for c in kept) == ["A", "B"]


def test_vep_metrics_by_chromosome_breakdowns_spearman_and_intervals():
    merged = _merged(
        list(CHROM_SCORES),
        [str(v) for v in CHROM_LABELS],
        chrom=list(CHROMS),
        region=["coding"] * 5 + ["intron"] * 5,
        dms=[1.0, 2.0, 3.0, 4.0, 5.0, None, 6.0, 7.0, 8.0, 9.0],
    )
    options = MetricSettings(spearman_column="dms", evaluation=EvaluationSettings(bootstrap=50))
    result = vep_metrics(merged, LABEL, options)
    metrics = result["metrics"]
    assert metrics["auroc_by_chrom_weighted_drop_single_class"] == pytest.approx(6 / 7)
    assert metrics["auroc_by_chrom_weighted_keep_all"] is None
    assert metrics["average_precision_by_chrom_weighted_keep_all"] == pytest.approx(
        0.3 + 0.4 * AP_B
    )
    dropped = result["by_chromosome"]["auroc"]["drop_single_class"]["dropped"]
    assert [d["chrom"] for d in dropped] == ["C"]
    assert any("C (30.0%)" in w for w in result["warnings"])
    # breakdown by region: coding rows 0-4 (labels 0,1,1,0,0), intron rows 5-9 (1,1,0,0,0)
    regions = {g["group"]: g for g in result["breakdowns"]["region"]}
    assert regions["coding"]["auroc"] == pytest.approx(auroc(CHROM_LABELS[:5], CHROM_SCORES[:5]))
    assert regions["intron"]["n_positive"] == 2
    # Spearman on the 9 rows with a value, against delta = -score
    keep = np.array([True] * 5 + [False] + [True] * 4)
    dms = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    expected = spearman(dms, -CHROM_SCORES[keep])
    assert metrics["spearman_delta_vs_dms"] == pytest.approx(expected)
    for name in ("auroc", "average_precision", "spearman_delta_vs_dms"):
        interval = result["confidence_intervals"][name]
        assert interval["low"] <= interval["high"]


def test_a_spearman_column_the_pipeline_writes_itself_is_refused():
    """A panel's DMS `score` is carried as `panel_score`; `spearman_column: score` named the
    pipeline's own score, and ρ(score, delta = −score) came out −1 without a word."""
    merged = _merged([0.1, 0.4, 0.35, 0.8], ["0", "0", "1", "1"], panel_score=[4.0, 1.0, 3.0, 2.0])
    for column in ("score", "delta"):
        options = MetricSettings(spearman_column=column, evaluation=EvaluationSettings(bootstrap=0))
        with pytest.raises(ConfigError, match=f"'{column}' names a column the pipeline writes"):
            vep_metrics(merged, LABEL, options)
    options = MetricSettings(
        spearman_column="panel_score", evaluation=EvaluationSettings(bootstrap=0)
    )
    result = vep_metrics(merged, LABEL, options)
    delta = -np.array([0.1, 0.4, 0.35, 0.8])
    expected = spearman(np.array([4.0, 1.0, 3.0, 2.0]), delta)
    assert result["metrics"]["spearman_delta_vs_panel_score"] == pytest.approx(expected)


def test_a_scans_calibrated_score_gets_its_metrics_beside_the_raw_ones():
    """A from_scan panel carries `calibrated`: the same metrics and intervals on it, equal to
    the metrics of a panel whose score is the calibrated one."""
    calibrated = list(CHROM_SCORES[::-1])
    merged = _merged(
        list(CHROM_SCORES),
        [str(v) for v in CHROM_LABELS],
        chrom=list(CHROMS),
        calibrated=calibrated,
    )
    options = MetricSettings(evaluation=EvaluationSettings(bootstrap=30))
    result = vep_metrics(merged, LABEL, options)
    swapped = _merged(calibrated, [str(v) for v in CHROM_LABELS], chrom=list(CHROMS))
    alone = vep_metrics(swapped, LABEL, options)
    assert result["calibrated"]["metrics"] == alone["metrics"]
    assert result["calibrated"]["confidence_intervals"] == alone["confidence_intervals"]
    assert result["metrics"]["auroc"] != result["calibrated"]["metrics"]["auroc"]
    assert "calibrated" in result["definitions"]
    assert "calibrated" not in vep_metrics(_merged([0.1, 0.9], ["0", "1"]), LABEL, NO_BOOTSTRAP)


def test_sign_flip_warning():
    result = vep_metrics(_merged(list(-SCORES * 10), [str(v) for v in LABELS]), LABEL, NO_BOOTSTRAP)
    assert result["metrics"]["auroc"] == pytest.approx(0.25)
    assert any("sign flipped" in w for w in result["warnings"])


def test_one_class_gives_no_metrics_but_a_warning():
    result = vep_metrics(_merged([0.1, 0.2], ["1", "1"]), LABEL, NO_BOOTSTRAP)
    assert result["metrics"] == {} and result["n_labelled"] == 2
    assert any("fewer than two classes" in w for w in result["warnings"])


def test_clinvar_labels_need_no_second_setting(tmp_path):
    """label_source clinvar_clnsig derives `label` at ingest; metrics read it without a
    `label_column` (it once had to be set again, or no metric was computed)."""
    merged = _merged(list(SCORES), ["x"] * len(SCORES)).with_columns(
        pl.Series("label", LABELS, dtype=pl.Int8)
    )
    clinvar = LabelSettings(label_source="clinvar_clnsig")
    assert clinvar.column == "label"
    result = vep_metrics(merged, clinvar, NO_BOOTSTRAP)
    assert result["parameters"]["label_column"] == "label"
    assert result["metrics"]["auroc"] == pytest.approx(0.75)
    path = tmp_path / "scores.parquet"
    merged.write_parquet(path)
    settings = json.dumps({"label_source": "clinvar_clnsig", "bootstrap": 0})
    out = tmp_path / "metrics.json"
    argv = [
        "metrics",
        "--merged",
        str(path),
        "--settings",
        settings,
        "--task",
        "clinvar",
        "--model-key",
        "m",
        "--out",
        str(out),
    ]
    assert cli.main(argv) == 0
    assert json.loads(out.read_text())["metrics"]["auroc"] == pytest.approx(0.75)


def test_a_label_column_the_scored_table_lacks_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("CARBON_VEP_INTERFACE", "workflow")
    merged = _merged([0.1, 0.9], ["0", "1"])
    missing = LabelSettings(label_column="LBL")
    with pytest.raises(InputError, match=r"^s\.parquet: label column 'LBL' \(the config key"):
        vep_metrics(merged, missing, NO_BOOTSTRAP, "s.parquet")
    result = vep_metrics(merged, LabelSettings(), NO_BOOTSTRAP)  # none configured: no metrics
    assert result["metrics"] == {} and result["warnings"]


def test_the_metrics_job_reads_only_its_columns_and_writes_what_the_whole_table_gives(tmp_path):
    """The job loads the columns the metrics read (a ClinVar table's INFO fields stay on
    disk): its JSON and rows equal the metrics of the whole table, with every input used
    (reference contig spelled apart from the panel's, conflicts, a breakdown, Spearman, the
    calibrated score, the recipe)."""
    n = 10
    merged = _merged(
        list(CHROM_SCORES),
        [str(v) for v in CHROM_LABELS],
        ["scored"] * 9 + ["ref_mismatch"],
        row_id=list(range(n)),
        chrom=[f"chr{c}" for c in CHROMS],
        ref_chrom=[c if i % 2 else None for i, c in enumerate(CHROMS)],
        label_conflict=[False] * 8 + [True, False],
        region=["coding", "intron"] * 5,
        dms=[float(i) for i in range(n)],
        calibrated=list(CHROM_SCORES[::-1]),
        recipe=["centered"] * n,
        normalization=["published"] * n,
        INFO_GENEINFO=["BRCA2:675"] * n,
        INFO_CLNREVSTAT=["criteria_provided"] * n,
    )
    merged.write_parquet(tmp_path / "scores.parquet")
    options = MetricSettings(
        spearman_column="dms",
        breakdown_columns=("region",),
        evaluation=EvaluationSettings(bootstrap=20),
    )
    settings = {"label_column": "LABEL", "bootstrap": 20, "spearman_column": "dms"}
    argv = ["metrics", "--merged", str(tmp_path / "scores.parquet"), "--breakdown", "region"]
    argv += ["--settings", json.dumps(settings), "--task", "t", "--model-key", "m"]
    argv += ["--out", str(tmp_path / "m.json"), "--rows-out", str(tmp_path / "rows.parquet")]
    assert cli.main(argv) == 0
    written = json.loads((tmp_path / "m.json").read_text())
    whole = json.loads(json.dumps(vep_metrics(merged, LABEL, options)))
    assert {k: written[k] for k in whole} == whole
    assert whole["parameters"]["recipe"] == "centered" and "calibrated" in whole
    assert whole["n_excluded_label_conflict"] == 1
    rows = pl.read_parquet(tmp_path / "rows.parquet")
    assert rows.equals(evaluated_rows(merged, LABEL))
    assert metric_columns(merged.columns, LabelSettings(label_column="LBL"), options) == (
        merged.columns
    )  # the error names every column of the table
