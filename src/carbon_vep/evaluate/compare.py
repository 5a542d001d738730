"""The comparison gate: a run's results table against a stored baseline (`carbon-vep compare`).

A baseline is a YAML file (baselines/*.yaml): where its numbers come from (`source`), the
tolerances (absolute, in the metric's units: metrics are fractions, so 0.01 = one point of the
×100 table), and the values by task, metric and model key:

    source: how the numbers were obtained
    tolerance: {default: 0.01, auroc: 0.02}
    values:
      brca2:
        auroc: {carbon3b: 0.8463}

Every (task, metric, model) of the results table's models is compared; a value missing on
either side fails and is named, unless the baseline lists it under `not_gated` (TASK/METRIC, or
TASK/METRIC/MODEL for one model's values, or a shell pattern of them: `*/*/carbon500m`, a model
the published table has no column for: reported by the run, with no reference number).
Baseline models that the run did not score are listed as not run (the run decides which models
it scores). CPU only, no torch.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep import atomic
from carbon_vep.config.fields import ConfigError
from carbon_vep.errors import InputError

Key = tuple[str, str, str]  # (task, metric, model)
DEFAULT_TOLERANCE = 0.01

OK, DRIFT, MISSING, NOT_RUN, NOT_GATED = "ok", "DRIFT", "MISSING", "not run", "not gated"
FAILING = (DRIFT, MISSING)


@dataclass(frozen=True)
class Baseline:
    values: dict[Key, float | None]
    tolerance: dict[str, float] = field(default_factory=dict)  # metric -> allowed |difference|
    default_tolerance: float = DEFAULT_TOLERANCE
    source: str = ""
    # TASK/METRIC (every model) or TASK/METRIC/MODEL reported without a reference number;
    # shell-style patterns (fnmatch) allowed
    not_gated: frozenset[str] = frozenset()

    def gated(self, task: str, metric: str, model: str) -> bool:
        from fnmatch import fnmatchcase

        def key(pattern: str) -> str:  # a pattern of three parts names the model too
            return f"{task}/{metric}/{model}" if pattern.count("/") == 2 else f"{task}/{metric}"

        return not any(fnmatchcase(key(pattern), pattern) for pattern in self.not_gated)

    def allowed(self, metric: str) -> float:
        return self.tolerance.get(metric, self.default_tolerance)


def _number(value: Any, where: str, path: Path) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(path, f"{where}: expected a number or null, got {value!r}")
    return float(value)


def load_baseline(path: str | Path) -> Baseline:
    """A baseline YAML file, checked: every value a number (or null), tolerances ≥ 0."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(path, "baseline file not found")
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise InputError(path, f"not valid YAML: {err}") from err
    if not isinstance(doc, Mapping) or not isinstance(doc.get("values"), Mapping):
        raise InputError(path, "a baseline needs a `values:` mapping task -> metric -> model")
    tolerance = dict(doc.get("tolerance") or {})
    default = tolerance.pop("default", DEFAULT_TOLERANCE)
    tolerances = {m: _number(v, f"tolerance.{m}", path) for m, v in tolerance.items()}
    for metric, value in {"default": default, **tolerances}.items():
        if not isinstance(value, int | float) or value < 0:
            raise InputError(path, f"tolerance.{metric}: expected a number >= 0, got {value!r}")
    values: dict[Key, float | None] = {}
    for task, metrics in doc["values"].items():
        if not isinstance(metrics, Mapping):
            raise InputError(path, f"values.{task}: expected metric -> model -> value")
        for metric, models in metrics.items():
            if not isinstance(models, Mapping):
                raise InputError(path, f"values.{task}.{metric}: expected model -> value")
            for model, value in models.items():
                where = f"values.{task}.{metric}.{model}"
                values[(str(task), str(metric), str(model))] = _number(value, where, path)
    not_gated = doc.get("not_gated") or []
    if not isinstance(not_gated, list) or not all(
        isinstance(n, str) and n.count("/") in (1, 2) for n in not_gated
    ):
        raise InputError(path, "not_gated: expected a list of TASK/METRIC or TASK/METRIC/MODEL")
    source = str(doc.get("source", ""))
    return Baseline(values, tolerances, float(default), source, frozenset(not_gated))


def read_results(path: str | Path) -> tuple[dict[Key, float | None], list[str]]:
    """The results table (`results_table.parquet` or `.tsv`: task, metric, one column per
    model) as {(task, metric, model): value}, and its models in column order."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "results table not found")
    try:
        if path.suffix == ".parquet":
            table = pl.read_parquet(path)
        else:
            table = pl.read_csv(path, separator="\t", null_values=["", "null", "NaN", "nan"])
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot read results table: {err}") from err
    missing = [c for c in ("task", "metric") if c not in table.columns]
    if missing:
        raise InputError(path, f"not a results table: no column(s) {missing}")
    models = [c for c in table.columns if c not in ("task", "metric")]
    values: dict[Key, float | None] = {}
    for row in table.iter_rows(named=True):
        for model in models:
            value = row[model]
            ok = value is not None and not (isinstance(value, float) and math.isnan(value))
            values[(row["task"], row["metric"], model)] = float(value) if ok else None
    return values, models


def parse_tolerances(items: Sequence[str]) -> tuple[float | None, dict[str, float]]:
    """`--tolerance X` (every metric) and `--tolerance METRIC=X` options."""
    every: float | None = None
    per_metric: dict[str, float] = {}
    for item in items:
        name, sep, text = item.rpartition("=")
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"--tolerance {item!r}: expected X or METRIC=X") from None
        if value < 0:
            raise ConfigError(f"--tolerance {item!r}: a tolerance is >= 0")
        if sep:
            per_metric[name] = value
        else:
            every = value
    return every, per_metric


def with_tolerances(baseline: Baseline, items: Sequence[str]) -> Baseline:
    """The baseline with command-line tolerances: `X` replaces every tolerance, `METRIC=X`
    that metric's."""
    every, per_metric = parse_tolerances(items)
    tolerance = dict(baseline.tolerance)
    default = baseline.default_tolerance
    if every is not None:
        tolerance, default = {}, every
    tolerance.update(per_metric)
    return Baseline(baseline.values, tolerance, default, baseline.source, baseline.not_gated)


def compare(
    baseline: Baseline, results: Mapping[Key, float | None], models: Sequence[str]
) -> pl.DataFrame:
    """One row per (task, metric, model): baseline, now, difference, allowed and verdict."""
    run_models = set(models)
    keys = list(baseline.values) + [k for k in results if k not in baseline.values]
    rows = []
    for key in keys:
        task, metric, model = key
        then = baseline.values.get(key)
        now = results.get(key)
        allowed = baseline.allowed(metric)
        difference = None if then is None or now is None else now - then
        if model not in run_models:
            verdict, note = NOT_RUN, "model not in the results table"
        elif not baseline.gated(task, metric, model):
            verdict, note = NOT_GATED, "listed under not_gated"
        elif key not in baseline.values or then is None:
            verdict, note = MISSING, "no value in the baseline"
        elif key not in results or now is None:
            verdict, note = MISSING, "no value in the results table"
        elif abs(difference) <= allowed + 1e-12:
            verdict, note = OK, ""
        else:
            verdict, note = DRIFT, f"|difference| > {allowed:g}"
        rows.append(
            {
                "task": task,
                "metric": metric,
                "model": model,
                "baseline": then,
                "now": now,
                "difference": difference,
                "allowed": allowed,
                "verdict": verdict,
                "note": note,
            }
        )
    schema = {
        "task": pl.Utf8,
        "metric": pl.Utf8,
        "model": pl.Utf8,
        "baseline": pl.Float64,
        "now": pl.Float64,
        "difference": pl.Float64,
        "allowed": pl.Float64,
        "verdict": pl.Utf8,
        "note": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def failures(table: pl.DataFrame) -> pl.DataFrame:
    return table.filter(pl.col("verdict").is_in(FAILING))


def _fmt(value: float | None, signed: bool = False) -> str:
    """Four decimals (metrics are fractions); a tiny non-zero value in scientific notation, so
    that a 1e-6 tolerance or drift does not print as 0.0000."""
    if value is None:
        return "—"
    sign = "+" if signed else ""
    if value != 0 and abs(value) < 5e-5:
        return f"{value:{sign}.1e}"
    return f"{value:{sign}.4f}"


def format_table(table: pl.DataFrame) -> str:
    """The comparison as a plain-text table (what `carbon-vep compare` prints), then a verdict."""
    header = ("task", "metric", "model", "baseline", "now", "difference", "allowed", "verdict")
    lines = [
        (
            r["task"],
            r["metric"],
            r["model"],
            _fmt(r["baseline"]),
            _fmt(r["now"]),
            _fmt(r["difference"], signed=True),
            f"±{_fmt(r['allowed'])}",
            f"{r['verdict']} ({r['note']})" if r["note"] else r["verdict"],
        )
        for r in table.iter_rows(named=True)
    ]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *lines, strict=True)]
    out = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, tuple("-" * w for w in widths), *lines)
    ]
    failed = failures(table).height
    compared = table.filter(~pl.col("verdict").is_in((NOT_RUN, NOT_GATED))).height
    out.append("")
    out.append(
        f"FAILED: {failed} of {compared} values drifted or are missing"
        if failed
        else f"PASSED: {compared} values within tolerance"
    )
    return "\n".join(out) + "\n"


def junit_xml(table: pl.DataFrame, name: str = "carbon-vep baseline") -> str:
    """JUnit XML (one testcase per task/metric/model) that CI systems display."""
    failed = failures(table).height
    skipped = table.filter(pl.col("verdict").is_in((NOT_RUN, NOT_GATED))).height
    suites = ET.Element("testsuites", name=name, tests=str(table.height), failures=str(failed))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=name,
        tests=str(table.height),
        failures=str(failed),
        errors="0",
        skipped=str(skipped),
    )
    for r in table.iter_rows(named=True):
        case = ET.SubElement(
            suite, "testcase", classname=r["task"], name=f"{r['metric']} [{r['model']}]"
        )
        detail = (
            f"{r['task']} {r['metric']} {r['model']}: baseline {_fmt(r['baseline'])}, "
            f"now {_fmt(r['now'])}, difference {_fmt(r['difference'], signed=True)}, "
            f"allowed ±{_fmt(r['allowed'])}"
        )
        if r["verdict"] in FAILING:
            failure = ET.SubElement(
                case, "failure", message=f"{r['verdict']}: {r['note']}", type=r["verdict"]
            )
            failure.text = detail
        elif r["verdict"] in (NOT_RUN, NOT_GATED):
            ET.SubElement(case, "skipped", message=r["note"])
        else:
            ET.SubElement(case, "system-out").text = detail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode")


def run_gate(
    baseline_path: str | Path,
    results_path: str | Path,
    tolerances: Sequence[str] = (),
    junit: str | Path | None = None,
    out: str | Path | None = None,
) -> tuple[bool, str]:
    """Compare, write the JUnit file and the comparison TSV; (passed, printed table)."""
    baseline = with_tolerances(load_baseline(baseline_path), tolerances)
    results, models = read_results(results_path)
    table = compare(baseline, results, models)
    if junit:
        atomic.write_text(junit_xml(table), junit)
    passed = failures(table).height == 0
    if out and passed:  # the gate's output exists only when the gate passes
        with atomic.atomic_path(out) as tmp:
            table.write_csv(tmp, separator="\t")
    return passed, format_table(table)


def baseline_yaml(
    results_path: str | Path, source: str, tolerance: Mapping[str, float] | None = None
) -> str:
    """A baseline file from a results table (never typed by hand): every value it holds."""
    import yaml

    results, _ = read_results(results_path)
    values: dict[str, dict[str, dict[str, float | None]]] = {}
    for (task, metric, model), value in results.items():
        values.setdefault(task, {}).setdefault(metric, {})[model] = value
    doc = {
        "source": source,
        "tolerance": dict(tolerance or {"default": DEFAULT_TOLERANCE}),
        "values": values,
    }
    header = f"# Written by `carbon-vep make-baseline` from {Path(results_path).name}.\n"
    return header + yaml.safe_dump(doc, sort_keys=False, width=100)
