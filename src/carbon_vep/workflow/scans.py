"""What a scan's plan decides for the jobs after it (plan_scan is a checkpoint): the chunks of
each output file, the chunk statistics, the output files themselves, and the plans as
`snakemake -n` prints them."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from carbon_vep.config.run import RunConfig
from carbon_vep.workflow.digests import fingerprint
from carbon_vep.workflow.paths import RunPaths


def read_plan(path: str) -> dict:
    """The plan JSON, read once per version of the file (input functions ask for every job)."""
    return _read_plan(path, os.stat(path).st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_plan(path: str, mtime_ns: int) -> dict:
    with open(path) as handle:
        return json.load(handle)


class ScanInputs:
    def __init__(self, run: RunConfig) -> None:
        self.run = run
        self.paths = RunPaths(run.outdir)

    def _chunk_file(self, wc: Any, index: int, pattern: str) -> str:
        return pattern.format(scan=wc.scan, model=wc.model, chunk=f"{index:05d}")

    def file_chunks(self, wc: Any, plan: dict) -> list[str]:
        """The chunks holding bases of this output file's contigs, in plan (reference) order."""
        files = {entry["name"]: entry for entry in plan["files"]}
        return [self._chunk_file(wc, i, self.paths.scan_chunk) for i in files[wc.file]["chunks"]]

    def chunk_stats(self, wc: Any, plan: dict) -> list[str]:
        chunks = range(len(plan["chunks"]))
        return [self._chunk_file(wc, i, self.paths.scan_chunk_stats) for i in chunks]

    def output_files(self, wc: Any, plan: dict, kind: str) -> list[str]:
        """The Parquet files, calibration counts, tabix TSVs or their indexes (the kind the
        plan names, `files[].index`) of the scan, one per output file of the plan."""
        pattern = {
            "parquet": self.paths.scan_positions,
            "counts": self.paths.scan_calibration_counts,
            "tsv": self.paths.scan_snvs,
            "index": self.paths.scan_snvs_index,
        }[kind]
        # a plan from before `files[].index` (c81db7d) was a .tbi's: a .csi did not exist
        return [
            pattern.format(
                scan=wc.scan, model=wc.model, file=e["name"], index_kind=e.get("index", "tbi")
            )
            for e in plan["files"]
        ]

    # ---- what a job takes from the plan (params: its rerun trigger) ---------------------------
    # The jobs after the plan read it with ancient(): a plan rewritten (another group_bp, another
    # model's estimate) does not rerun them by its date; each job's own part of it, as a
    # fingerprint in its params, reruns it when that part changed
    # (docs/scans.md#what-a-config-edit-reruns).
    def _plan(self, wc: Any) -> dict:
        return read_plan(self.paths.scan_plan.format(scan=wc.scan))

    def chunk_key(self, wc: Any) -> str:
        """What a scan_chunk job reads from the plan: its pieces and the tiles."""
        plan = self._plan(wc)
        tiles = {"tile_bp": plan["tile_bp"], "min_context": plan["min_context"]}
        return fingerprint({**tiles, "pieces": plan["chunks"][int(wc.chunk)]})

    def file_key(self, wc: Any) -> str:
        """What a job on one output file reads from the plan: the file's entry (its contigs,
        scored bases and chunks)."""
        files = {entry["name"]: entry for entry in self._plan(wc)["files"]}
        return fingerprint(files[wc.file])

    def plan_notes(self) -> list[str]:
        """The plan (bases, SNVs, jobs, N skipped, GPU-hours, bytes) of every scan whose
        plan_scan has run, or how to get it: `snakemake -n` prints them before any model job."""
        notes = []
        for scan in self.run.scans:
            path = self.paths.scan_plan_report.format(scan=scan)
            if os.path.isfile(path):
                with open(path) as handle:
                    notes.append(handle.read())
            else:
                notes.append(
                    f"scan {scan}: not planned yet (plan_scan runs first, no model; or run "
                    "`snakemake --until plan_scan` (no model job), then `-n` shows the plan)"
                )
        return notes
