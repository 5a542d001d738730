"""A scan's tabix TSVs (no torch), from an output file's Parquet file (`scan.positions`) and the
scan's calibration (`scan.calibrate`): `write_tsv` writes

- `snvs/<name>.tsv.gz` (+ `.tbi`, or `.csi` past 2^29 bp): per-SNV scores and their PHRED,
  bgzipped and tabix-indexed (every contig of the file answers region queries), 3 rows per
  base, with `##` header lines (ASCII only) naming the model, revision, normalisation, sign
  convention, the calibration, columns and contigs (`<name>`: as the Parquet file's);

and `concat_tsv` copies every TSV of a scan into one file of the same kind, for tools that take
one annotation file. Nothing is half-written: each file goes to a temporary name and is renamed,
with its index, when complete.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pysam

from carbon_vep import columns
from carbon_vep.atomic import TBI_MAX_POSITION, index_of, indexed_bgzf, indexed_bytes
from carbon_vep.genome.reference import Reference
from carbon_vep.scan.calibrate import PHRED_COLUMNS, PHRED_DECIMALS, Calibration
from carbon_vep.scan.record import read_scan
from carbon_vep.scan.snvs import SNV_BATCH_BASES, rounded_score, snv_rows, with_cells


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


def write_tsv(
    parquet_in: str | Path,
    contigs: Sequence[str],
    tsv_out: str | Path,
    provenance: Mapping[str, Any],
    calibration: Calibration,
    reference: Reference,
    with_calibrated: bool = False,
    index: bool = True,
) -> dict[str, Any]:
    """One output file's tabix TSV from its Parquet file: 3 SNVs a base with the score, its
    PHRED (and, `with_calibrated`, the calibrated score and its PHRED; `.` for a PHRED off the
    scales), row group by row group; `index=False`: without its index (the workflow's
    index_scan_tsv job writes it, `atomic.index_tabix`)."""
    table = columns.SCAN_TSV_CALIBRATED if with_calibrated else columns.SCAN_TSV
    decimals, tsv_out, start = calibration.decimals, Path(tsv_out), time.monotonic()
    parquet = pq.ParquetFile(parquet_in)
    longest = max((reference.lengths.get(c, 0) for c in contigs), default=0)  # .tbi or .csi
    with indexed_bgzf(tsv_out, longest=longest, index=index) as out:
        out.write(tsv_header(contigs, provenance, table, calibration).encode("ascii"))
        for group in range(parquet.num_row_groups):
            bases = pl.from_arrow(parquet.read_row_group(group))
            for piece in bases.iter_slices(SNV_BATCH_BASES):
                snvs = with_cells(snv_rows(piece), reference, decimals, None)
                out.write(tsv_text(calibration.annotate(snvs), table, decimals).encode())
    return {
        "snvs": 3 * parquet.metadata.num_rows,
        "tsv_bytes": indexed_bytes(tsv_out) if index else tsv_out.stat().st_size,
        "tsv_s": round(time.monotonic() - start, 3),
    }


def _data_bytes(path: str | Path, block: int = 1 << 24) -> Iterator[bytes]:
    """The data lines of a bgzipped TSV (its `#` header lines left out), in blocks."""
    from pysam.libcbgzf import BGZFile

    with BGZFile(str(path), "rb") as handle:
        pending, in_header = b"", True
        while chunk := handle.read(block):
            if in_header:
                pending += chunk
                at = 0  # walked line by line, cut once (a line a contig: one copy each was slow)
                while pending.startswith(b"#", at) and (end := pending.find(b"\n", at)) >= 0:
                    at = end + 1
                pending = pending[at:]
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
