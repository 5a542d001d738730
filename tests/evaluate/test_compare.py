"""The comparison gate (`carbon-vep compare`): pass, drift, missing values, JUnit, tolerances."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest
import yaml

from carbon_vep.cli import main
from carbon_vep.errors import InputError
from carbon_vep.evaluate.compare import load_baseline, read_results

ROOT = Path(__file__).resolve().parents[2]


def _results(tmp_path: Path, **columns) -> Path:
    table = pl.DataFrame(
        {"task": ["brca2", "brca2", "cag"], "metric": ["auroc", "auprc_trapezoid", "accuracy"]}
        | columns
    )
    path = tmp_path / "results_table.parquet"
    table.write_parquet(path)
    return path


def _baseline(tmp_path: Path, tolerance=None, **values) -> Path:
    doc = {
        "source": "test",
        "tolerance": tolerance or {"default": 0.01, "accuracy": 0.05},
        "values": {
            "brca2": {"auroc": {"m": 0.80}, "auprc_trapezoid": {"m": 0.50}},
            "cag": {"accuracy": {"m": 0.70}},
        }
        | values,
    }
    path = tmp_path / "baseline.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_unchanged_results_pass(tmp_path, capsys):
    results = _results(tmp_path, m=[0.80, 0.505, 0.74])
    junit = tmp_path / "junit.xml"
    code = main(
        [
            "compare",
            "--baseline",
            str(_baseline(tmp_path)),
            "--results",
            str(results),
            "--junit",
            str(junit),
            "--out",
            str(tmp_path / "gate.tsv"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASSED: 3 values within tolerance" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "0"
    assert pl.read_csv(tmp_path / "gate.tsv", separator="\t")["verdict"].to_list() == ["ok"] * 3


def test_planted_drift_fails_with_a_table_and_junit(tmp_path, capsys):
    results = _results(tmp_path, m=[0.78, 0.50, 0.70])  # auroc drifted by -0.02 > 0.01
    junit = tmp_path / "junit.xml"
    code = main(
        [
            "compare",
            "--baseline",
            str(_baseline(tmp_path)),
            "--results",
            str(results),
            "--junit",
            str(junit),
            "--out",
            str(tmp_path / "gate.tsv"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    header = out.splitlines()[0].split()
    assert header == [
        "task",
        "metric",
        "model",
        "baseline",
        "now",
        "difference",
        "allowed",
        "verdict",
    ]
    drift = next(line for line in out.splitlines() if "DRIFT" in line)
    assert drift.split()[:7] == ["brca2", "auroc", "m", "0.8000", "0.7800", "-0.0200", "±0.0100"]
    assert "FAILED: 1 of 3" in out
    cases = ET.parse(junit).getroot().iter("testcase")
    failed = [(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None]
    assert failed == [("brca2", "auroc [m]")]
    assert not (tmp_path / "gate.tsv").exists()  # the gate's output exists only on a pass


def test_missing_values_on_either_side_fail_and_are_named(tmp_path, capsys):
    results = _results(tmp_path, m=[0.80, None, 0.70])  # auprc missing in the results
    baseline = _baseline(tmp_path, extra={"auroc": {"m": 0.6}})  # a task the run lacks
    assert main(["compare", "--baseline", str(baseline), "--results", str(results)]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "MISSING" in line]
    assert any(line.startswith("brca2") and "auprc_trapezoid" in line for line in lines)
    assert any(
        line.startswith("extra") and "no value in the results table" in line for line in lines
    )
    # and a value the baseline lacks
    results = _results(tmp_path, m=[0.80, 0.50, 0.70], other=[0.1, 0.2, 0.3])
    assert main(["compare", "--baseline", str(_baseline(tmp_path)), "--results", str(results)])
    assert "no value in the baseline" in capsys.readouterr().out


def test_models_the_run_did_not_score_are_listed_not_failed(tmp_path, capsys):
    baseline = _baseline(tmp_path, cag={"accuracy": {"m": 0.70, "evo2": 0.88}})
    results = _results(tmp_path, m=[0.80, 0.50, 0.70])
    assert main(["compare", "--baseline", str(baseline), "--results", str(results)]) == 0
    assert "not run (model not in the results table)" in capsys.readouterr().out


def test_tolerances_per_metric_and_from_the_command_line(tmp_path, capsys):
    results = _results(tmp_path, m=[0.80, 0.50, 0.74])  # accuracy +0.04 <= 0.05
    args = ["compare", "--baseline", str(_baseline(tmp_path)), "--results", str(results)]
    assert main(args) == 0
    assert main([*args, "--tolerance", "accuracy=0.03"]) == 1
    assert main([*args, "--tolerance", "0"]) == 1  # replaces every tolerance
    assert main([*args, "--tolerance", "0.05"]) == 0
    capsys.readouterr()


def test_bad_baselines_are_named(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("values: {brca2: {auroc: {m: high}}}\n")
    with pytest.raises(InputError, match=r"b.yaml: values.brca2.auroc.m: expected a number"):
        load_baseline(path)
    path.write_text("tolerance: {default: -1}\nvalues: {}\n")
    with pytest.raises(InputError, match="tolerance.default"):
        load_baseline(path)
    with pytest.raises(InputError, match="results table not found"):
        read_results(tmp_path / "nope.parquet")


def test_make_baseline_round_trips_a_results_table(tmp_path, capsys):
    results = _results(tmp_path, m=[0.8, 0.5, 0.7], n=[0.1, None, 0.3])
    out = tmp_path / "made.yaml"
    assert (
        main(
            [
                "make-baseline",
                "--results",
                str(results),
                "--source",
                "s",
                "--out",
                str(out),
                "--tolerance",
                "0.02",
                "--tolerance",
                "accuracy=0.1",
            ]
        )
        == 0
    )
    baseline = load_baseline(out)
    assert baseline.values[("brca2", "auroc", "n")] == 0.1
    assert baseline.allowed("auroc") == 0.02 and baseline.allowed("accuracy") == 0.1
    # a null value in the table is a null in the baseline, and fails as missing
    assert main(["compare", "--baseline", str(out), "--results", str(results)]) == 1
    assert "no value in the baseline" in capsys.readouterr().out


def _published_table() -> dict[tuple[str, str, str], float]:
    """The published headline numbers as docs/suite-conventions.md states them (x100), keyed
    (task, metric, model) from the table's `task`, `metric` and `(model key)` cells."""
    page = (ROOT / "docs/suite-conventions.md").read_text()
    section = page.split("## Published headline numbers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    models = {i: re.search(r"\(`(\w+)`\)", cell) for i, cell in enumerate(header)}
    table = {}
    for line in rows[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        task, metric = cells[header.index("task")], cells[header.index("metric")]
        for i, model in models.items():
            if model:
                table[(task.strip("`"), metric.strip("`"), model[1])] = float(cells[i])
    return table


def test_published_baseline_is_the_suite_table():
    """baselines/published.yaml holds the published table of docs/suite-conventions.md, as
    fractions, for suite.yaml's tasks and metrics."""
    baseline = load_baseline(ROOT / "baselines/published.yaml")
    published = _published_table()
    assert len(published) == 7 * 4
    assert published[("brca2", "auroc", "carbon3b")] == 84.63
    assert set(baseline.values) == set(published)
    for key, value in published.items():
        assert baseline.values[key] == pytest.approx(value / 100, abs=1e-9), key
    suite = yaml.safe_load((ROOT / "config/suite.yaml").read_text())
    tasks = set(suite["datasets"]) | set(suite["tasks"])
    every_model = {name for name in baseline.not_gated if name.count("/") == 1}
    only_reported = {name.split("/")[0] for name in every_model} - {
        task for task, _, _ in baseline.values
    }
    assert only_reported == {
        "synonymous_codon_mouse",
        "sequence_recovery_gen_len",
        "genomic_niah*",
    }
    assert {task for task, _, _ in baseline.values} == tasks - only_reported
    assert suite["baseline"] == "baselines/published.yaml"


def test_published_baseline_gates_a_carbon3b_suite_run(tmp_path, capsys):
    """A suite results table (Carbon-3B only) at the published numbers passes, the other
    models listed as not run; one point off BRCA2 AUROC is within tolerance, 1.5 points is not;
    TraitGym AUPRC is allowed two."""
    baseline = load_baseline(ROOT / "baselines/published.yaml")
    rows = [(t, m, v) for (t, m, k), v in baseline.values.items() if k == "carbon3b"]
    rows += [tuple(name.split("/")) + (0.5,) for name in baseline.not_gated if "*/*/" not in name]
    rows += [("genomic_niah_yarn4.niah_neardup_d2_128k", "gen_exact_match", 0.4)]  # a pattern
    assert not baseline.gated("genomic_niah.niah_4k", "gen_exact_match", "carbon3b")
    assert baseline.gated("my_niah.niah_4k", "gen_exact_match", "carbon3b")  # another entry

    def run(**shift) -> int:
        table = pl.DataFrame(
            {
                "task": [t for t, _, _ in rows],
                "metric": [m for _, m, _ in rows],
                "carbon3b": [v + shift.get(t, 0.0) for t, _, v in rows],
            }
        )
        path = tmp_path / "results_table.tsv"
        table.write_csv(path, separator="\t")
        return main(
            [
                "compare",
                "--baseline",
                str(ROOT / "baselines/published.yaml"),
                "--results",
                str(path),
            ]
        )

    assert run() == 0
    out = capsys.readouterr().out
    assert out.count("not run") == 3 * 7 and "PASSED: 7 values" in out
    assert run(brca2=-0.0099) == 0
    assert run(brca2=-0.015) == 1
    assert run(traitgym_mendelian=0.015) == 0
    assert run(traitgym_mendelian=0.025) == 1
    capsys.readouterr()


def test_not_gated_may_name_a_model(tmp_path, capsys):
    """TASK/METRIC/MODEL leaves one model's values ungated (a model the baseline has no column
    for), while the same values of the baseline's models, and a value the baseline lacks for
    them, are still gated."""
    baseline = _baseline(tmp_path)
    doc = yaml.safe_load(baseline.read_text()) | {"not_gated": ["*/*/small"]}
    baseline.write_text(yaml.safe_dump(doc))
    results = _results(tmp_path, m=[0.80, 0.50, 0.70], small=[0.1, 0.2, 0.3])
    args = ["compare", "--baseline", str(baseline), "--results", str(results)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("not gated") == 3 and "PASSED: 3 values" in out
    assert main([*args, "--tolerance", "0"]) == 0  # no reference number for `small`
    results = _results(tmp_path, m=[0.90, 0.50, 0.70], small=[0.1, 0.2, 0.3])
    assert main(["compare", "--baseline", str(baseline), "--results", str(results)]) == 1
    capsys.readouterr()
    doc["not_gated"] = ["brca2/auroc/m/extra"]
    baseline.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="TASK/METRIC or TASK/METRIC/MODEL"):
        load_baseline(baseline)


def test_published_baseline_gates_every_model_suite_yaml_scores(tmp_path, capsys):
    """config/suite.yaml's own models at the published numbers pass its gate: a model the
    published table has no column for (Carbon-500M) is reported, not failed as missing."""
    baseline = load_baseline(ROOT / "baselines/published.yaml")
    suite = yaml.safe_load((ROOT / "config/suite.yaml").read_text())
    keys = sorted({(t, m) for t, m, _ in baseline.values})
    table = {"task": [t for t, _ in keys], "metric": [m for _, m in keys]}
    for model in suite["models"]:
        table[model] = [baseline.values.get((t, m, model), 0.5) for t, m in keys]
    path = tmp_path / "results_table.parquet"
    pl.DataFrame(table).write_parquet(path)
    args = ["compare", "--baseline", str(ROOT / "baselines/published.yaml"), "--results"]
    assert main([*args, str(path)]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    gated = [m for m in suite["models"] if any(k == m for _, _, k in baseline.values)]
    assert gated == ["carbon3b", "carbon8b"]
    assert f"PASSED: {len(keys) * len(gated)} values" in out
