"""The run's file patterns under its output folder: one home for every path a rule and the
package both name (Snakemake wildcards in `{braces}`)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RunPaths:
    outdir: str

    @staticmethod
    def log(pattern: str) -> str:
        """The log of the job writing `pattern`: under `logs/`, the output's path made relative
        (an absolute outdir would give `logs//abs/...`, which Snakemake warns about)."""
        return "logs/" + os.path.normpath(pattern).lstrip("/")

    @property
    def log_dir(self) -> str:
        """Where the logs of the jobs writing under the outdir go."""
        return self.log(self.outdir)

    @property
    def hub_model_record(self) -> str:
        """fetch_model's record that a Hub model is in the local cache (compute nodes are
        offline)."""
        return f"{self.outdir}/hub/{{model}}.json"

    @property
    def scan_dir(self) -> str:
        return f"{self.outdir}/scans/{{scan}}/{{model}}"

    @property
    def scan_calibration(self) -> str:
        """calibrate_scan's rank scales and context means of a scan's SNVs."""
        return f"{self.scan_dir}/calibration"

    @property
    def scan_tracks(self) -> str:
        """A scan's genome-browser tracks (`tracks: true`)."""
        return f"{self.scan_dir}/tracks"

    @property
    def dataset_inputs(self) -> str:
        """The sha256 of a dataset's inputs (record_dataset_inputs), merged into provenance."""
        return f"{self.outdir}/inputs/dataset_{{dataset}}.json"

    @property
    def task_inputs(self) -> str:
        return f"{self.outdir}/inputs/task_{{task}}.json"

    @property
    def model_inputs(self) -> str:
        return f"{self.outdir}/inputs/model_{{model}}.json"

    @property
    def niah_cell(self) -> str:
        """A Genomic-NIAH cell, fetched or built."""
        return f"{self.outdir}/niah/{{niah}}/cells/{{cell}}.parquet"

    @property
    def niah_inputs(self) -> str:
        return f"{self.outdir}/inputs/niah_{{niah}}.{{cell}}.json"

    @property
    def niah_result(self) -> str:
        """A model's predictions and metrics on a NIAH cell."""
        return f"{self.outdir}/suite/niah/{{niah}}/{{cell}}/{{model}}"
