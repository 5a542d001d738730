"""Whole-genome scan outputs, streamed (no torch): chunk files, the merge into output files,
the summary and the scan's record.

A scan job writes its chunk as Parquet row groups as it goes (`BaseWriter`): one row per scored
base (columns.SCAN_BASE). `merge_group` streams the rows of one output file's contigs (the
plan's `files`: a large contig alone, or a run of small ones) from the chunks holding them, in
plan order (which is reference order), into `positions/<name>.parquet`: per-base rows with
their `chrom`; the folder is one dataset that pyarrow, polars and DuckDB read as one table
(row-group statistics on `chrom` and `pos` let them skip to one contig or region).

From that file, `count_positions` writes `calibration/counts/<name>.parquet`: its SNVs counted
per calibration cell and score (`scan.calibrate`), which `calibrate-scan` adds up into the
scan's calibration; then `write_tsv` writes, from the Parquet file and the calibration,

- `snvs/<name>.tsv.gz` (+ `.tbi`, or `.csi` past 2^29 bp): per-SNV scores and their PHRED,
  bgzipped and tabix-indexed (every contig of the file answers region queries), 3 rows per
  base, with `##` header lines (ASCII only) naming the model, revision, normalisation, sign
  convention, the calibration, columns and contigs.

`<name>` is the contig's name encoded (`genome.contigs.encode_name`), or
`<first contig>+<N more>` for a shared file. Nothing is half-written: every file goes to a
temporary name and is renamed when complete, and the merge reads only completed chunks; the
same chunks give byte-identical merged files. `scan_record` writes `scan.json`: the build,
reference, model and which file holds each contig (what `carbon-vep annotate` reads).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pysam

from carbon_vep import columns, markdown
from carbon_vep.atomic import (
    TBI_MAX_POSITION,
    PendingFile,
    index_of,
    indexed_bgzf,
    indexed_bytes,
)
from carbon_vep.errors import InputError
from carbon_vep.genome.reference import Reference
from carbon_vep.scan.calibrate import (
    PHRED_COLUMNS,
    PHRED_DECIMALS,
    Calibration,
    CalibrationCounts,
    min_context_of,
    ranked,
)
from carbon_vep.scan.snvs import NeutralRegions, rounded_score, snv_rows, with_cells

BASE_SCHEMA = columns.schema(columns.SCAN_BASE)
_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 9,
    "use_dictionary": ["chrom", "ref", "phase"],
    "column_encoding": {"pos": "DELTA_BINARY_PACKED", "context_bp": "DELTA_BINARY_PACKED"},
    # row-group min/max of chrom and pos: readers (annotate, DuckDB, polars) skip row groups
    "write_statistics": ["chrom", "pos"],
    "store_schema": False,
}
ROW_GROUP_ROWS = 1 << 20  # bases per row group of the merged dataset (~12 MB written)
SNV_BATCH_BASES = 1 << 18  # bases whose SNVs are counted or written at a time (memory per job)

log = logging.getLogger("carbon_vep")


class BaseWriter:
    """Per-base rows into one Parquet file, a row group per `write`, under a temporary name
    until `close` renames it into place (a killed job leaves no file at `path`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.file = PendingFile(self.path)  # a killed writer's file removed first
        self.schema = pl.DataFrame(schema=BASE_SCHEMA).to_arrow().schema
        self.writer = pq.ParquetWriter(self.file.tmp, self.schema, **_WRITE_OPTIONS)
        self.rows = 0

    def write(self, frame: pl.DataFrame) -> None:
        if frame.height:
            self.writer.write_table(frame.to_arrow().cast(self.schema))
            self.rows += frame.height

    def close(self) -> None:
        self.writer.close()
        self.file.publish()

    def abort(self) -> None:
        self.writer.close()
        self.file.discard()


def read_chunk_rows(chunks: Sequence[str | Path], contigs: Sequence[str]) -> Iterator[pl.DataFrame]:
    """The rows of `contigs` in the chunk files, row group by row group, in order: each chunk is
    read once, whatever the number of contigs."""
    wanted = list(contigs)
    for path in chunks:
        parquet = pq.ParquetFile(path)
        for group in range(parquet.num_row_groups):
            frame = pl.from_arrow(parquet.read_row_group(group))
            part = frame.filter(pl.col("chrom").is_in(wanted))
            if part.height:
                yield part


def _in_order(frames: Iterator[pl.DataFrame], contigs: Sequence[str]) -> Iterator[pl.DataFrame]:
    """`frames`, checked to run through `contigs` in the given order, each by rising position
    (what tabix and the annotate lookup rely on); a chunk out of order stops the merge."""
    rank = {c: i for i, c in enumerate(contigs)}
    last = (-1, 0)
    for frame in frames:
        order = frame.select(
            pl.col("chrom").replace_strict(rank, return_dtype=pl.Int64).alias("rank"), "pos"
        )
        keys = order["rank"].cast(pl.Int64) * (1 << 32) + order["pos"]
        first = (order["rank"][0], order["pos"][0])
        if first <= last or not keys.diff().drop_nulls().gt(0).all():
            chrom = frame["chrom"][0]
            raise ValueError(f"{chrom}: chunk rows out of order at {frame['pos'][0]}")
        last = (order["rank"][-1], order["pos"][-1])
        yield frame


def _row_groups(frames: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    """Frames regrouped into row groups of ROW_GROUP_ROWS (the last one shorter): large row
    groups compress well; annotate still reads only the groups holding its positions."""
    pending: list[pl.DataFrame] = []
    held = 0
    for frame in frames:
        pending.append(frame)
        held += frame.height
        while held >= ROW_GROUP_ROWS:
            merged = pl.concat(pending)
            yield merged.head(ROW_GROUP_ROWS)
            pending, held = [merged.slice(ROW_GROUP_ROWS)], held - ROW_GROUP_ROWS
    if held:
        yield pl.concat(pending)


def ascii_header(text: str) -> str:
    """A header value in ASCII (pysam and many parsers read header lines as ASCII): other
    characters as backslash escapes (`\\u2212`), line breaks as spaces."""
    flat = " ".join(str(text).splitlines())
    return flat.encode("ascii", "backslashreplace").decode("ascii")


def tsv_header(
    contigs: Sequence[str],
    provenance: Mapping[str, Any],
    table: Sequence[columns.Column] = columns.SCAN_TSV,
    calibration: Calibration | None = None,
) -> str:
    lines = [
        "##carbon_vep_scan=per-SNV scores of every ACGT base (3 SNVs per base)",
        *(f"##{key}={value}" for key, value in provenance.items()),
        "##normalization=dna_block (softmax over the 4,096 6-mers; FNS marginals per base)",
        "##sign=score = log m(ref) - log m(alt): larger = more damaging",
        *(calibration.header_lines(len(table) > len(columns.SCAN_TSV)) if calibration else []),
        *(f"##column={c.name}: {c.description}" for c in table),
        *(f"##contig={contig}" for contig in contigs),
    ]
    lines = [ascii_header(line) for line in lines]
    return "\n".join([*lines, "#" + "\t".join(columns.names(table))]) + "\n"


def tsv_text(snvs: pl.DataFrame, table: Sequence[columns.Column], decimals: int) -> str:
    """TSV rows: the columns of `table`, in that order; scores at `decimals`, PHREDs at
    PHRED_DECIMALS."""
    names = columns.names(table)
    rounded = snvs.with_columns(
        rounded_score(pl.col("score"), decimals).alias("score"),
        *(pl.col(c).round(PHRED_DECIMALS).cast(pl.Utf8) for c in PHRED_COLUMNS if c in names),
    )
    return rounded.select(names).write_csv(
        None, separator="\t", include_header=False, float_precision=decimals, null_value="."
    )  # `.`: no value (an unranked SNV's PHRED), as VCF and bcftools write one


def count_snvs(
    counts: CalibrationCounts,
    bases: pl.DataFrame,
    reference: Reference,
    decimals: int,
    neutral: NeutralRegions | None,
    min_context: int,
) -> None:
    """Add the SNVs of per-base rows to `counts` (their printed scores' keys and context cells),
    SNV_BATCH_BASES bases at a time; those of bases with less than `min_context` bp of left
    context only to its unranked count (scan.calibrate.ranked)."""
    for piece in bases.iter_slices(SNV_BATCH_BASES):
        full = piece.filter(ranked(min_context))
        counts.unranked += 3 * (piece.height - full.height)
        if full.height:
            snvs = with_cells(snv_rows(full), reference, decimals, neutral)
            counts.add(*(snvs[c].to_numpy() for c in ("cell", "key", "neutral")))


def neutral_regions(bed: str | None, lengths: dict[str, int]) -> NeutralRegions | None:
    """The neutral BED's intervals on the reference's contigs (aliases as for scan regions)."""
    if bed is None:
        return None
    from carbon_vep.scan.targets import resolve_neutral

    targets, note = resolve_neutral(bed, lengths)
    if note:
        log.warning("%s", note)
    return NeutralRegions(targets)


def merge_plan_file(
    entry: Mapping[str, Any], chunks: Sequence[str | Path], parquet_out: str | Path
) -> dict[str, Any]:
    """One output file of the plan (`entry`, scan.plan.plan_file) from its chunks: merge_group,
    then the bases written checked against the bases the plan scores."""
    stats = merge_group(chunks, entry["contigs"], parquet_out)
    if stats["bases"] != entry["scored_bp"]:
        raise ValueError(
            f"{entry['name']}: the chunks hold {stats['bases']} bases of its contigs; "
            f"the plan scores {entry['scored_bp']}"
        )
    stats.pop("bases_per_contig")
    return stats


def merge_group(
    chunks: Sequence[str | Path], contigs: Sequence[str], parquet_out: str | Path
) -> dict[str, Any]:
    """Stream the rows of `contigs` (reference order) in `chunks` into one Parquet file (its
    SNVs are counted for the calibration from that file, in a job of its own: count_positions)."""
    writer = BaseWriter(parquet_out)
    start, rows, bases = time.monotonic(), 0, dict.fromkeys(contigs, 0)
    try:
        for part in _row_groups(_in_order(read_chunk_rows(chunks, contigs), contigs)):
            writer.write(part)
            rows += part.height
            for chrom, n in part.group_by("chrom").len().iter_rows():
                bases[chrom] += n
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return {
        "contigs": len(contigs),
        "bases": rows,
        "bases_per_contig": bases,
        "snvs": 3 * rows,
        "parquet_bytes": Path(parquet_out).stat().st_size,
        "merge_s": round(time.monotonic() - start, 3),
    }


def count_positions(
    parquet_in: str | Path,
    counts_out: str | Path,
    counts_meta: Mapping[str, Any],
    reference: Reference,
    neutral: NeutralRegions | None,
) -> dict[str, Any]:
    """The SNVs of an output file's Parquet (merge_group's) counted for the calibration, row
    group by row group: from the file, not the chunks, so that a change of the printed precision
    or the neutral set recounts the file and never needs the (temporary) chunks again."""
    decimals, counts, start = int(counts_meta["decimals"]), CalibrationCounts(), time.monotonic()
    min_context = min_context_of(counts_meta)
    parquet = pq.ParquetFile(parquet_in)
    for group in range(parquet.num_row_groups):
        bases = pl.from_arrow(parquet.read_row_group(group))
        count_snvs(counts, bases, reference, decimals, neutral, min_context)
    counts.write(counts_out, counts_meta)
    return {
        "snvs": 3 * parquet.metadata.num_rows,
        "unranked_snvs": counts.unranked,
        "neutral_snvs": int(counts.neutral_n.sum()),
        "count_s": round(time.monotonic() - start, 3),
    }


def write_tsv(
    parquet_in: str | Path,
    contigs: Sequence[str],
    tsv_out: str | Path,
    provenance: Mapping[str, Any],
    calibration: Calibration,
    reference: Reference,
    with_calibrated: bool = False,
) -> dict[str, Any]:
    """One output file's tabix TSV from its Parquet file: 3 SNVs a base with the score, its
    PHRED (and, `with_calibrated`, the calibrated score and its PHRED; `.` for a PHRED off the
    scales), row group by row group."""
    table = columns.SCAN_TSV_CALIBRATED if with_calibrated else columns.SCAN_TSV
    decimals, tsv_out, start = calibration.decimals, Path(tsv_out), time.monotonic()
    parquet = pq.ParquetFile(parquet_in)
    longest = max((reference.lengths.get(c, 0) for c in contigs), default=0)  # .tbi or .csi
    with indexed_bgzf(tsv_out, longest=longest) as out:
        out.write(tsv_header(contigs, provenance, table, calibration).encode("ascii"))
        for group in range(parquet.num_row_groups):
            bases = pl.from_arrow(parquet.read_row_group(group))
            for piece in bases.iter_slices(SNV_BATCH_BASES):
                snvs = with_cells(snv_rows(piece), reference, decimals, None)
                out.write(tsv_text(calibration.annotate(snvs), table, decimals).encode())
    return {
        "snvs": 3 * parquet.metadata.num_rows,
        "tsv_bytes": indexed_bytes(tsv_out),
        "tsv_s": round(time.monotonic() - start, 3),
    }


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
        raise InputError(scan_dir, f"not a scan's output folder (no {SCAN_RECORD})")
    record = read_json(path)
    if record.get("layout") != RECORD_LAYOUT:
        raise InputError(
            path, f"layout {record.get('layout')!r}; this version reads layout {RECORD_LAYOUT}"
        )
    return record


def _data_bytes(path: str | Path, block: int = 1 << 24) -> Iterator[bytes]:
    """The data lines of a bgzipped TSV (its `#` header lines left out), in blocks."""
    from pysam.libcbgzf import BGZFile

    with BGZFile(str(path), "rb") as handle:
        pending, in_header = b"", True
        while chunk := handle.read(block):
            if in_header:
                pending += chunk
                while pending.startswith(b"#") and b"\n" in pending:
                    pending = pending[pending.index(b"\n") + 1 :]
                if not pending or pending.startswith(b"#"):
                    continue  # the header goes on in the next block
                chunk, pending, in_header = pending, b"", False
            yield chunk


def concat_tsv(scan_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Every tabix TSV of a scan in one bgzipped, tabix-indexed file, in reference order, with
    one header (every contig's `##contig` line): for tools that take one annotation file
    (`bcftools annotate -a`). The rows are copied as they are; nothing is recomputed."""
    files = read_scan(scan_dir)["files"]
    names = [entry["name"] for entry in files]
    snvs = Path(scan_dir) / "snvs"
    paths = [snvs / f"{name}.tsv.gz" for name in names]
    with pysam.TabixFile(str(paths[0]), index=str(index_of(paths[0]))) as first:
        lines = list(first.header)
    csi = any(index_of(p).suffix == ".csi" for p in paths)  # a contig past what a .tbi holds
    contigs = [c for entry in files for c in entry["contigs"]]
    header = [h for h in lines if not h.startswith(("##contig=", "#chrom"))]
    header += [ascii_header(f"##contig={c}") for c in contigs]
    header.append(lines[-1])  # `#chrom ...`: the files' columns
    out = Path(out)
    with indexed_bgzf(out, longest=TBI_MAX_POSITION + 1 if csi else 0) as handle:
        handle.write(("\n".join(header) + "\n").encode("ascii"))
        for path in paths:
            for block in _data_bytes(path):
                handle.write(block)
    return {"files": len(names), "contigs": len(contigs), "bytes": out.stat().st_size}
