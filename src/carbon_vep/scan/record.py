"""A finished scan's summary and record (no torch): `summarize` checks the bases written
against the plan and the calibration's counts, and gives the totals, the bytes per SNV and the
calibration's summary (`summary_markdown`: as Markdown); `scan_record` is `scan.json`: the
build, reference, model and which output file holds each contig, what `carbon-vep annotate`, the
tracks and `concat_tsv` read (`read_scan`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from carbon_vep import markdown
from carbon_vep.atomic import indexed_bytes
from carbon_vep.errors import InputError
from carbon_vep.scan.calibrate import Calibration


def summarize(
    plan: Mapping[str, Any],
    chunk_stats: Sequence[Mapping[str, Any]],
    parquet_files: Sequence[str | Path],
    tsv_files: Sequence[str | Path],
    calibration: Calibration,
) -> dict[str, Any]:
    """The run's final summary: the plan's counts, what was written, wall time, bytes per SNV,
    and the calibration (totals, the scores at PHRED 10 / 20 / 30, contexts)."""
    totals = dict(plan["totals"])
    written = sum(s["bases"] for s in chunk_stats)
    parquet = sum(Path(p).stat().st_size for p in parquet_files)
    tsv = sum(indexed_bytes(p) for p in tsv_files)
    snvs = max(totals["snvs"], 1)
    if written != totals["scored_bp"]:
        raise ValueError(f"chunks wrote {written} bases; the plan scores {totals['scored_bp']}")
    if calibration.raw.total + calibration.unranked != 3 * written:
        raise ValueError(
            f"the calibration counts {calibration.raw.total} SNVs and {calibration.unranked} "
            f"unranked; the chunks scored {3 * written}"
        )
    return {
        **totals,
        "bases_written": written,
        "scan_wall_s": round(sum(s["wall_s"] for s in chunk_stats), 1),
        "forward_s": round(sum(s.get("forward_s", 0.0) for s in chunk_stats), 1),
        "parquet_bytes": parquet,
        "tsv_bytes": tsv,
        "parquet_bytes_per_snv": round(parquet / snvs, 3),
        "tsv_bytes_per_snv": round(tsv / snvs, 3),
        "hg38_projection_gb": {
            "parquet": round(parquet / snvs * 9.3e9 / 1e9, 1),
            "tabix_tsv": round(tsv / snvs * 9.3e9 / 1e9, 1),
        },
        "calibration": calibration.summary(),
    }


def summary_markdown(summary: Mapping[str, Any], plan_text: str, contexts: str = "") -> str:
    """The plan, what was measured, and the calibration: its thresholds and `contexts` (a
    Markdown table of the most extreme context cells)."""
    s = summary
    return plan_text + "\n".join(
        [
            "",
            "## scan summary (measured)",
            "",
            f"- bases scored: {s['bases_written']:,}; SNVs: {3 * s['bases_written']:,}; "
            f"skipped as N / non-ACGT: {s['skipped_non_acgt_bp']:,} bp in {s['n_runs']:,} runs",
            f"- scan jobs' wall time: {s['scan_wall_s']:,.1f} s in all "
            f"(model forward passes {s['forward_s']:,.1f} s)",
            f"- Parquet dataset: {s['parquet_bytes']:,} bytes ({s['parquet_bytes_per_snv']} "
            f"bytes/SNV; hg38 at this rate: {s['hg38_projection_gb']['parquet']} GB)",
            f"- tabix TSV + index: {s['tsv_bytes']:,} bytes ({s['tsv_bytes_per_snv']} bytes/SNV; "
            f"hg38 at this rate: {s['hg38_projection_gb']['tabix_tsv']} GB)",
            "",
            *_calibration_markdown(s["calibration"]),
            contexts,
        ]
    )


def _calibration_markdown(c: Mapping[str, Any]) -> list[str]:
    def score(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    thresholds = c["thresholds"]
    rows = [
        [
            f"PHRED {p} (top {top})",
            score(thresholds["score"][f"phred_{p}"]),
            score(thresholds["calibrated"][f"phred_{p}"]),
        ]
        for p, top in ((10, "10%"), (20, "1%"), (30, "0.1%"))
    ]
    return [
        "## calibration",
        "",
        f"PHRED = -10 log10(rank / {c['snvs']:,}) over every SNV of the scan scored with at least "
        f"min_context ({c['min_context']:,}) bp of left context; `calibrated` = score minus the "
        f"mean of those of the neutral SNVs ({c['neutral']}) of its pentanucleotide context and "
        f"alternate base (cells under {c['context_min_count']} neutral SNVs fall back to the "
        "trinucleotide, then the global mean; docs/calibration.md).",
        "",
        markdown.table(["the lowest score at", "score", "calibrated"], rows),
        "",
        f"- SNVs without a PHRED (less left context: a contig start, after a gap): "
        f"{c['unranked_snvs']:,}",
        f"- pentanucleotide cells by the mean they use: {c['pentanucleotide_cells_by_mean_used']}",
        f"- SNVs by context: {c['snvs_by_context_level']} (trinucleotide / global: within 2 bp "
        "of an N or a contig end)",
        "",
    ]


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


SCAN_RECORD = "scan.json"  # in a scan's output folder (scans/<scan>/<model>/)
RECORD_LAYOUT = 2  # positions/<file>.parquet with a chrom column; snvs/<file>.tsv.gz


def scan_record(plan: Mapping[str, Any], provenance: Mapping[str, Any]) -> dict[str, Any]:
    """What a scan is, for the tools that read it later (`carbon-vep annotate`): its build,
    reference (absolute path), model and tiles (`provenance`), its output files in reference
    order with their contigs, and for each contig its file, its length in the reference and its
    scored bases."""
    return {
        "layout": RECORD_LAYOUT,
        **provenance,
        "reference": os.path.abspath(plan["reference"]),
        "group_bp": plan["group_bp"],
        "files": [{"name": e["name"], "contigs": e["contigs"]} for e in plan["files"]],
        "contigs": {
            contig: {"file": n.get("file"), "length": n["length"], "scored_bp": n["scored_bp"]}
            for contig, n in plan["contigs"].items()
        },
    }


def read_scan(scan_dir: str | Path) -> dict:
    """The scan's record (`scan.json`): build, reference, model, which file holds each contig."""
    path = Path(scan_dir) / SCAN_RECORD
    if not path.is_file():
        if (Path(scan_dir) / "positions").is_dir():
            raise InputError(
                scan_dir,
                f"no {SCAN_RECORD}: a scan merged by an older carbon-vep (one positions/chrom=*/ "
                "folder per contig); run its merge again (delete the folder's positions/, snvs/ "
                "and summary.json, then rerun the workflow: the chunks are kept if present)",
            )
        # a scan's outputs are one folder a model (scans/<scan>/<model>): name those within
        models = sorted(str(p.parent) for p in Path(scan_dir).glob(f"*/{SCAN_RECORD}"))
        within = f"; a scan's outputs are one folder a model: {', '.join(models)}" if models else ""
        raise InputError(scan_dir, f"not a scan's output folder (no {SCAN_RECORD}){within}")
    record = read_json(path)
    if record.get("layout") != RECORD_LAYOUT:
        raise InputError(
            path, f"layout {record.get('layout')!r}; this version reads layout {RECORD_LAYOUT}"
        )
    return record
