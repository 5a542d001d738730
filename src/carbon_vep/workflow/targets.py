"""The files a run produces (what `rule all` asks for and the run report reads), and the
wildcard patterns that send a dataset, task or NIAH entry to the rules of its kind."""

from __future__ import annotations

import re
from typing import Any

from carbon_vep.config.run import RunConfig
from carbon_vep.config.tasks import kind_of_rule
from carbon_vep.workflow.paths import RunPaths

NOTHING = "^$"  # a wildcard pattern that matches no name


def names_pattern(names: list[str]) -> str:
    """A wildcard constraint matching exactly these names (nothing when there are none)."""
    return "|".join(names) or NOTHING


class Targets:
    def __init__(self, run: RunConfig, baseline: str | None) -> None:
        self.run, self.baseline = run, baseline
        self.paths = RunPaths(run.outdir)

    def models_of(self, kind: str, key: str) -> list[str]:
        """The models an entry (`datasets`, `scans`, `tasks` or `niah`) runs with."""
        return self.run.entry_models(getattr(self.run, kind)[key])

    def final_outputs(self) -> list[str]:
        """Scores, metrics and report of every (dataset, model) pair, scans, the suite's
        outputs, the comparison with the baseline."""
        paths = self.paths
        panels = [
            pattern.format(dataset=dataset, model=model)
            for dataset in self.run.datasets
            for model in self.models_of("datasets", dataset)
            for pattern in (paths.scores, paths.metrics, paths.dataset_report)
        ]
        suite = self.sweep_outputs() + self.suite_outputs()
        return panels + self.scan_outputs() + suite + self.gate_outputs()

    def gate_outputs(self) -> list[str]:
        """The comparison with the baseline, when the config names one (compare_baseline)."""
        return [self.paths.baseline_comparison] if self.baseline else []

    def scan_outputs(self) -> list[str]:
        """The summary of every scan and model (it needs every file of the scan), and the
        tracks of the scans that ask for them."""
        summaries = [
            pattern.format(scan=scan, model=model)
            for scan, model in self.scan_models()
            for pattern in (self.paths.scan_summary, self.paths.scan_summary_md)
        ]
        tracks = [
            self.paths.scan_tracks_summary.format(scan=scan, model=model)
            for scan, model in self.scan_models()
            if self.run.scans[scan].tracks
        ]
        return summaries + tracks

    def vcf_exports(self) -> list[str]:
        return [self.paths.vcf_export.format(dataset=d, model=m) for d, m in self.vcf_export_keys()]

    def vcf_export_keys(self) -> list[tuple[str, str]]:
        """(dataset, model) of every VCF export (`export_vcf: true`)."""
        return [
            (dataset, model)
            for dataset, spec in self.run.datasets.items()
            if spec.export_vcf
            for model in self.models_of("datasets", dataset)
        ]

    def run_results(self) -> list[tuple[str, str]]:
        """(metrics JSON, row-level file) of every result: variant panels, suite tasks, NIAH."""
        paths = self.paths
        panels = [
            (
                paths.metrics.format(dataset=dataset, model=model),
                paths.evaluated.format(dataset=dataset, model=model),
            )
            for dataset in self.run.datasets
            for model in self.models_of("datasets", dataset)
        ]
        tasks = [
            (
                paths.task_metrics.format(task=task, model=model),
                paths.task_predictions.format(task=task, model=model),
            )
            for task in self.run.tasks
            for model in self.models_of("tasks", task)
        ]
        niah = [
            (
                paths.niah_metrics.format(niah=key, cell=cell.name, model=model),
                paths.niah_predictions.format(niah=key, cell=cell.name, model=model),
            )
            for key, entry in self.run.niah.items()
            for cell in entry.cells()
            for model in self.run.entry_models(entry)
        ]
        return panels + tasks + niah

    def sweep_results(self) -> list[tuple[str, str]]:
        """(metrics JSON, predictions) of every sweep point of every task, for each of its
        models (not results-table rows: the report draws them beside their task)."""
        paths = self.paths
        return [
            (
                paths.task_point_metrics.format(task=task, point=point, model=model),
                paths.task_point_predictions.format(task=task, point=point, model=model),
            )
            for task in self.run.tasks
            for point in map(paths.sweep_point, self.run.sweep_points(task))
            for model in self.models_of("tasks", task)
        ]

    def sweep_metrics(self) -> list[str]:
        return [metrics for metrics, _ in self.sweep_results()]

    def sweep_outputs(self) -> list[str]:
        return [path for pair in self.sweep_results() for path in pair]

    def run_metrics(self) -> list[str]:
        return [metrics for metrics, _ in self.run_results()]

    def run_rows(self) -> list[str]:
        """The row file of each metrics JSON, in the same order (the HTML report plots them)."""
        return [rows for _, rows in self.run_results()]

    def suite_outputs(self) -> list[str]:
        """VCF exports, the results table and the run's HTML report (a scan-only config has no
        metrics to tabulate, but its report shows the scans' calibration)."""
        paths = self.paths
        tables = [paths.results_table, paths.results_table_tsv, paths.results_table_md]
        pages = [paths.run_report, paths.run_summary]
        return (
            self.vcf_exports()
            + (tables if self.run_results() else [])
            + (pages if self.run_dirs() else [])
        )

    def run_tables(self) -> dict[str, str]:
        """The results table (Parquet, Markdown) when the run has metrics, for the run report."""
        if not self.run_results():
            return {}
        return {"table": self.paths.results_table, "table_md": self.paths.results_table_md}

    def run_scan_summaries(self) -> list[str]:
        """Every scan's summary JSON (one per scan and model), in run_scan_dirs' order."""
        return [self.paths.scan_summary.format(scan=s, model=m) for s, m in self.scan_models()]

    def run_scan_dirs(self) -> list[str]:
        """Every scan's output folder (one per scan and model)."""
        return [self.paths.scan_dir.format(scan=s, model=m) for s, m in self.scan_models()]

    def scan_models(self) -> list[tuple[str, str]]:
        """(scan, model) of every scan and each of its models, in config order."""
        return [(scan, model) for scan in self.run.scans for model in self.models_of("scans", scan)]

    def run_dirs(self) -> list[Any]:
        return self.run_results() or self.run_scan_dirs()

    # ---- wildcard patterns ----------------------------------------------------------------
    def dataset_pattern(self, lookup: bool) -> str:
        """The datasets scored by lookup in a scan (recipe from_scan), or the others."""
        lookups = self.run.scan_lookups()
        return names_pattern([d for d in self.run.datasets if (d in lookups) == lookup])

    def task_pattern(self, kind: str) -> str:
        """The tasks of one kind."""
        return names_pattern([t for t, spec in self.run.tasks.items() if spec.kind == kind])

    def rule_task_pattern(self, rule: str) -> str:
        """The tasks a task kind's rule runs (config.tasks: the kind that declares `rule`)."""
        return self.task_pattern(kind_of_rule(rule).name)

    def rule_point_pattern(self, rule: str) -> str:
        """`{point}` of a task kind's rule: empty (the headline) or a sweep point of its tasks."""
        kind = kind_of_rule(rule).name
        points = sorted(
            {
                re.escape(self.paths.sweep_point(point))
                for task, spec in self.run.tasks.items()
                if spec.kind == kind
                for point in self.run.sweep_points(task)
            }
        )
        return f"(?:{'|'.join(points)})?"  # never "": Snakemake reads that as no constraint

    def niah_pattern(self, source: str) -> str:
        """The NIAH entries whose cells come from `source` (hub or build)."""
        return names_pattern([k for k, e in self.run.niah.items() if e.source == source])
