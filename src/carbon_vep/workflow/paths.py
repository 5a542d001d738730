"""The run's file patterns under its output folder: one home for every path a rule and the
package both name (Snakemake wildcards in `{braces}`). A job's log is `job_log(folder, name)`:
the folder of the job's outputs, under `logs/`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from carbon_vep.config.tasks import SweepPoint
from carbon_vep.scan import CALIBRATED_TABLE, CONTEXTS_TABLE, RAW_TABLE, SUMMARY_FILE

CALIBRATION_TABLES = (RAW_TABLE, CALIBRATED_TABLE, CONTEXTS_TABLE)


@dataclass(frozen=True)
class RunPaths:
    outdir: str

    # ---- logs -------------------------------------------------------------------------------
    @staticmethod
    def log(pattern: str) -> str:
        """The log of the job writing `pattern`: under `logs/`, the output's path made relative
        (an absolute outdir would give `logs//abs/...`, which Snakemake warns about)."""
        return "logs/" + os.path.normpath(pattern).lstrip("/")

    @staticmethod
    def job_log(folder: str, name: str) -> str:
        """The log `name`.log of a job writing under `folder` (a pattern of this class; "" for
        the jobs writing outside the outdir: Hub files, downloads, demo models)."""
        return RunPaths.log(os.path.join(folder, f"{name}.log"))

    # ---- models and verified inputs ---------------------------------------------------------
    @property
    def hub_dir(self) -> str:
        return f"{self.outdir}/hub"

    @property
    def hub_model_record(self) -> str:
        """fetch_model's record that a Hub model is in the local cache (compute nodes are
        offline)."""
        return f"{self.hub_dir}/{{model}}.json"

    @property
    def inputs_dir(self) -> str:
        """The sha256 records of the inputs (record_*_inputs), merged into provenance."""
        return f"{self.outdir}/inputs"

    @property
    def dataset_inputs(self) -> str:
        """The sha256 of a dataset's inputs (record_dataset_inputs), merged into provenance."""
        return f"{self.inputs_dir}/dataset_{{dataset}}.json"

    @property
    def task_inputs(self) -> str:
        return f"{self.inputs_dir}/task_{{task}}.json"

    @property
    def model_inputs(self) -> str:
        return f"{self.inputs_dir}/model_{{model}}.json"

    @property
    def niah_inputs(self) -> str:
        return f"{self.inputs_dir}/niah_{{niah}}.{{cell}}.json"

    # ---- variant panels ---------------------------------------------------------------------
    @property
    def dataset_dir(self) -> str:
        """A dataset's checked panel and shards (no model yet)."""
        return f"{self.outdir}/{{dataset}}"

    @property
    def checked_panel(self) -> str:
        """check_panel's rows, each with a status and a reason."""
        return f"{self.dataset_dir}/checked.parquet"

    @property
    def checked_summary(self) -> str:
        return f"{self.dataset_dir}/checked_summary.json"

    @property
    def shards_dir(self) -> str:
        """make_shards' folder (a checkpoint: the shards are known once it has run)."""
        return f"{self.dataset_dir}/shards"

    @property
    def shard(self) -> str:
        return f"{self.shards_dir}/shard_{{shard}}.parquet"

    @property
    def dataset_model_dir(self) -> str:
        """A dataset's results with one model."""
        return f"{self.dataset_dir}/{{model}}"

    @property
    def shard_scores(self) -> str:
        return f"{self.dataset_model_dir}/shard_scores/shard_{{shard}}.parquet"

    @property
    def scores(self) -> str:
        """A panel's scores, merged from its shards (or looked up in a scan)."""
        return f"{self.dataset_model_dir}/scores.parquet"

    @property
    def vcf_export(self) -> str:
        """The scores as a bgzipped VCF (`export_vcf: true`), written without its index."""
        return f"{self.dataset_model_dir}/results.vcf.gz"

    @property
    def vcf_export_index(self) -> str:
        """The VCF's index (index_vcf), declared so that Snakemake stamps it after the VCF:
        `{index_kind}` tbi, or csi where a contig of the reference passes 2^29 bp (the VCF's
        header says: `report.vcf_export.vcf_index_suffix`)."""
        return f"{self.vcf_export}.{{index_kind}}"

    @property
    def metrics(self) -> str:
        return f"{self.dataset_model_dir}/metrics.json"

    @property
    def evaluated(self) -> str:
        """The rows compute_metrics evaluated (the run report plots them)."""
        return f"{self.dataset_model_dir}/evaluated.parquet"

    @property
    def dataset_report(self) -> str:
        return f"{self.dataset_model_dir}/report.md"

    # ---- the run ----------------------------------------------------------------------------
    @property
    def results_table(self) -> str:
        """Every result's headline metrics, one row each (Parquet; the gate compares it)."""
        return f"{self.outdir}/results_table.parquet"

    @property
    def results_table_tsv(self) -> str:
        return f"{self.outdir}/results_table.tsv"

    @property
    def results_table_md(self) -> str:
        return f"{self.outdir}/results_table.md"

    @property
    def run_report(self) -> str:
        """The run's self-contained HTML page."""
        return f"{self.outdir}/report.html"

    @property
    def run_summary(self) -> str:
        """The run report's Markdown summary."""
        return f"{self.outdir}/summary.md"

    @property
    def baseline_comparison(self) -> str:
        """compare_baseline's table of the results against the baseline (`baseline:`)."""
        return f"{self.outdir}/baseline_comparison.tsv"

    @property
    def baseline_junit(self) -> str:
        """The comparison as JUnit XML (declared a log: kept when the gate fails)."""
        return f"{self.outdir}/baseline_comparison.junit.xml"

    # ---- scans ------------------------------------------------------------------------------
    @property
    def scan_plan_dir(self) -> str:
        """A scan's plan, and one folder a model (scan_dir)."""
        return f"{self.outdir}/scans/{{scan}}"

    @property
    def scan_plan(self) -> str:
        """plan_scan's plan (a checkpoint: chunks and output files)."""
        return f"{self.scan_plan_dir}/plan.json"

    @property
    def scan_plan_report(self) -> str:
        return f"{self.scan_plan_dir}/plan.md"

    @property
    def scan_dir(self) -> str:
        return f"{self.scan_plan_dir}/{{model}}"

    @property
    def scan_chunk(self) -> str:
        """A chunk's scores (temporary: merged per output file)."""
        return f"{self.scan_dir}/chunks/chunk_{{chunk}}.parquet"

    @property
    def scan_chunk_stats(self) -> str:
        return f"{self.scan_dir}/chunks/chunk_{{chunk}}.json"

    @property
    def scan_positions(self) -> str:
        """An output file's scores (a large contig, or small contigs together)."""
        return f"{self.scan_dir}/positions/{{file}}.parquet"

    @property
    def scan_calibration(self) -> str:
        """calibrate_scan's rank scales and context means of a scan's SNVs."""
        return f"{self.scan_dir}/calibration"

    @property
    def scan_calibration_counts(self) -> str:
        """An output file's counts, which calibrate_scan adds up."""
        return f"{self.scan_calibration}/counts/{{file}}.parquet"

    @property
    def scan_calibration_json(self) -> str:
        return f"{self.scan_calibration}/{SUMMARY_FILE}"

    @property
    def scan_calibration_tables(self) -> list[str]:
        return [f"{self.scan_calibration}/{name}" for name in CALIBRATION_TABLES]

    @property
    def scan_snvs(self) -> str:
        """An output file's SNVs, calibrated, as a bgzipped TSV, written without its index."""
        return f"{self.scan_dir}/snvs/{{file}}.tsv.gz"

    @property
    def scan_snvs_index(self) -> str:
        """The TSV's index (index_scan_tsv), declared so that Snakemake stamps it after the TSV:
        `{index_kind}` tbi, or csi where a contig of the file passes 2^29 bp (the plan's
        `files[].index`)."""
        return f"{self.scan_snvs}.{{index_kind}}"

    @property
    def scan_summary(self) -> str:
        """summarize_scan's summary (JSON): written once every file of the scan is."""
        return f"{self.scan_dir}/summary.json"

    @property
    def scan_summary_md(self) -> str:
        return f"{self.scan_dir}/summary.md"

    @property
    def scan_record(self) -> str:
        """The scan's record that annotate_from_scan reads (build, files, provenance)."""
        return f"{self.scan_dir}/scan.json"

    @property
    def scan_tracks(self) -> str:
        """A scan's genome-browser tracks (`tracks: true`)."""
        return f"{self.scan_dir}/tracks"

    @property
    def scan_track(self) -> str:
        """One bigWig track."""
        return f"{self.scan_tracks}/{{track}}.bw"

    @property
    def scan_track_hub(self) -> str:
        """The UCSC track hub beside the bigWigs."""
        return f"{self.scan_tracks}/hub.txt"

    @property
    def scan_tracks_summary(self) -> str:
        return f"{self.scan_tracks}/tracks.json"

    # ---- suite tasks ------------------------------------------------------------------------
    @property
    def task_dir(self) -> str:
        """A suite task's results with one model."""
        return f"{self.outdir}/suite/{{task}}/{{model}}"

    @property
    def task_predictions(self) -> str:
        return f"{self.task_dir}/predictions.parquet"

    @property
    def task_metrics(self) -> str:
        return f"{self.task_dir}/metrics.json"

    # a kind with sweeps (config.tasks): its rule writes the headline (`{point}` empty, the
    # paths above) and each sweep point (`{point}` = sweep_point(...)) through one pattern
    @property
    def task_point_dir(self) -> str:
        return f"{self.outdir}/suite/{{task}}/{{point}}{{model}}"

    @property
    def task_point_predictions(self) -> str:
        return f"{self.task_point_dir}/predictions.parquet"

    @property
    def task_point_metrics(self) -> str:
        return f"{self.task_point_dir}/metrics.json"

    # a task cut into `parts` jobs: each part's outputs, merged into the two above
    @property
    def task_part_predictions(self) -> str:
        return f"{self.task_point_dir}/parts/predictions_{{part}}.parquet"

    @property
    def task_part_metrics(self) -> str:
        return f"{self.task_point_dir}/parts/metrics_{{part}}.json"

    @staticmethod
    def sweep_point(point: SweepPoint) -> str:
        """`{point}` of a sweep point's outputs: suite/<task>/sweep/<setting>_<value>/<model>/."""
        return f"sweep/{point.setting}_{point.value}/"

    # ---- Genomic-NIAH -----------------------------------------------------------------------
    @property
    def niah_dir(self) -> str:
        """A NIAH entry's cells."""
        return f"{self.outdir}/niah/{{niah}}"

    @property
    def niah_cell(self) -> str:
        """A Genomic-NIAH cell, fetched or built."""
        return f"{self.niah_dir}/cells/{{cell}}.parquet"

    @property
    def niah_result(self) -> str:
        """A model's predictions and metrics on a NIAH cell."""
        return f"{self.outdir}/suite/niah/{{niah}}/{{cell}}/{{model}}"

    @property
    def niah_part_rows(self) -> str:
        """A score_niah job's rows (a range of the cell's rows)."""
        return f"{self.niah_result}/parts/rows_{{part}}.parquet"

    @property
    def niah_part_metrics(self) -> str:
        return f"{self.niah_result}/parts/metrics_{{part}}.json"

    @property
    def niah_predictions(self) -> str:
        return f"{self.niah_result}/predictions.parquet"

    @property
    def niah_metrics(self) -> str:
        return f"{self.niah_result}/metrics.json"
