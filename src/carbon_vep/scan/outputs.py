"""Whole-genome scan outputs, streamed (no torch): chunk files, the per-chromosome merge, the
summary.

A scan job writes its chunk as Parquet row groups as it goes (`BaseWriter`): one row per scored
base (columns.SCAN_BASE). `merge_contig` streams the chunks holding one contig, in plan order
(which is reference order), into

- `positions/chrom=<contig>/part-0.parquet`: the per-base dataset, hive-partitioned by
  chromosome (pyarrow / polars / DuckDB read the folder as one table with a `chrom` column), and
- `snvs/<contig>.tsv.gz` (+ `.tbi`): per-SNV scores, bgzipped and tabix-indexed, 3 rows per base,
  with `##` header lines naming the model, revision, normalisation, sign convention and columns.

Nothing is half-written: every file goes to a temporary name and is renamed when complete, and
the merge reads only completed chunks; the same chunks give byte-identical merged files.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pysam

from carbon_vep import columns
from carbon_vep.atomic import atomic_path
from carbon_vep.columns import SCAN_BASES

BASE_SCHEMA = columns.schema(columns.SCAN_BASE)
LOG_FNS = [f"log_fns_{b}" for b in SCAN_BASES]
LOG_COND = [f"log_cond_{b}" for b in SCAN_BASES]
_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 9,
    "use_dictionary": ["chrom", "ref", "phase"],
    "column_encoding": {"pos": "DELTA_BINARY_PACKED", "context_bp": "DELTA_BINARY_PACKED"},
    "write_statistics": ["pos"],  # row-group min/max of pos: annotate skips row groups
    "store_schema": False,
}
TSV_COLUMNS = columns.names(columns.SCAN_TSV)
ROW_GROUP_ROWS = 1 << 20  # bases per row group of the merged dataset (~12 MB written)


def _arrow(frame: pl.DataFrame, drop: Sequence[str] = ()) -> pa.Table:
    return frame.drop(drop).to_arrow()


class BaseWriter:
    """Per-base rows into one Parquet file, a row group per `write`, under a temporary name
    until `close` renames it into place (a killed job leaves no file at `path`)."""

    def __init__(self, path: str | Path, drop: Sequence[str] = ()) -> None:
        self.path = Path(path)
        self.drop = tuple(drop)
        self.tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for stale in self.path.parent.glob(f".{self.path.name}.tmp-*"):  # of a killed job
            stale.unlink(missing_ok=True)
        names = [c for c in BASE_SCHEMA if c not in self.drop]
        empty = pl.DataFrame(schema={c: BASE_SCHEMA[c] for c in names})
        self.schema = _arrow(empty).schema
        self.writer = pq.ParquetWriter(self.tmp, self.schema, **_WRITE_OPTIONS)
        self.rows = 0

    def write(self, frame: pl.DataFrame) -> None:
        if frame.height:
            self.writer.write_table(_arrow(frame, self.drop).cast(self.schema))
            self.rows += frame.height

    def close(self) -> None:
        self.writer.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.writer.close()
        self.tmp.unlink(missing_ok=True)


def read_chunk_rows(chunks: Sequence[str | Path], contig: str) -> Iterator[pl.DataFrame]:
    """The rows of `contig` in the chunk files, row group by row group, in order."""
    for path in chunks:
        parquet = pq.ParquetFile(path)
        for group in range(parquet.num_row_groups):
            frame = pl.from_arrow(parquet.read_row_group(group))
            part = frame.filter(pl.col("chrom") == contig)
            if part.height:
                yield part


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


def _rounded(score: pl.Expr, decimals: int) -> pl.Expr:
    """Rounded, with -0 written as 0 (a sign that means nothing costs bytes)."""
    value = score.round(decimals)
    return pl.when(value == 0).then(pl.lit(0.0, pl.Float32)).otherwise(value).alias("score")


def snv_rows(bases: pl.DataFrame) -> pl.DataFrame:
    """Three SNVs per base: chrom, pos, ref, alt, score (float32) from the log-marginals."""
    lp = {b: pl.col(f"log_fns_{b}").cast(pl.Float32) for b in SCAN_BASES}
    lp_ref = pl.coalesce([pl.when(pl.col("ref") == b).then(lp[b]) for b in SCAN_BASES])
    parts = [
        bases.filter(pl.col("ref") != alt).select(
            "chrom", "pos", "ref", pl.lit(alt).alias("alt"), (lp_ref - lp[alt]).alias("score")
        )
        for alt in SCAN_BASES
    ]
    return pl.concat(parts).sort("pos", "alt", maintain_order=True)


def tsv_header(contig: str, provenance: Mapping[str, Any]) -> str:
    lines = [
        "##carbon_vep_scan=per-SNV scores of every ACGT base (3 SNVs per base)",
        *(f"##{key}={value}" for key, value in provenance.items()),
        "##normalization=dna_block (softmax over the 4,096 6-mers; FNS marginals per base)",
        "##sign=score = log m(ref) - log m(alt): larger = more damaging",
        *(f"##column={c.name}: {c.description}" for c in columns.SCAN_TSV),
        f"##contig={contig}",
        "#" + "\t".join(TSV_COLUMNS),
    ]
    return "\n".join(lines) + "\n"


def merge_contig(
    chunks: Sequence[str | Path],
    contig: str,
    parquet_out: str | Path,
    tsv_out: str | Path,
    provenance: Mapping[str, Any],
    decimals: int,
) -> dict[str, Any]:
    """Stream the contig's rows of `chunks` into its Parquet partition and its tabix TSV."""
    from pysam.libcbgzf import BGZFile

    tsv_out = Path(tsv_out)
    writer = BaseWriter(parquet_out, drop=("chrom",))
    start, rows, last_pos = time.monotonic(), 0, 0
    with atomic_path(tsv_out) as tmp:
        work = tmp.with_name(f"{tmp.name}.gz")  # pysam indexes by suffix
        try:
            with BGZFile(str(work), "wb") as out:
                out.write(tsv_header(contig, provenance).encode())
                for part in _row_groups(read_chunk_rows(chunks, contig)):
                    if part["pos"][0] <= last_pos or not part["pos"].is_sorted():
                        raise ValueError(f"{contig}: chunk rows out of order at {part['pos'][0]}")
                    last_pos = part["pos"][-1]
                    writer.write(part)
                    snvs = snv_rows(part).with_columns(_rounded(pl.col("score"), decimals))
                    text = snvs.write_csv(
                        None, separator="\t", include_header=False, float_precision=decimals
                    )
                    out.write(text.encode())
                    rows += part.height
            pysam.tabix_index(str(work), force=True, seq_col=0, start_col=1, end_col=1,
                              meta_char="#", zerobased=False)  # fmt: skip
            os.replace(f"{work}.tbi", f"{tsv_out}.tbi")
            os.replace(work, tmp)
        except BaseException:
            writer.abort()
            Path(f"{work}.tbi").unlink(missing_ok=True)
            raise
        finally:
            work.unlink(missing_ok=True)
    writer.close()
    return {
        "contig": contig,
        "bases": rows,
        "snvs": 3 * rows,
        "parquet_bytes": Path(parquet_out).stat().st_size,
        "tsv_bytes": tsv_out.stat().st_size + Path(f"{tsv_out}.tbi").stat().st_size,
        "merge_s": round(time.monotonic() - start, 3),
    }


def summarize(
    plan: Mapping[str, Any],
    chunk_stats: Sequence[Mapping[str, Any]],
    parquet_files: Sequence[str | Path],
    tsv_files: Sequence[str | Path],
) -> dict[str, Any]:
    """The run's final summary: the plan's counts, what was written, wall time, bytes per SNV."""
    totals = dict(plan["totals"])
    written = sum(s["bases"] for s in chunk_stats)
    parquet = sum(Path(p).stat().st_size for p in parquet_files)
    tsv = sum(Path(p).stat().st_size + Path(f"{p}.tbi").stat().st_size for p in tsv_files)
    snvs = max(totals["snvs"], 1)
    if written != totals["scored_bp"]:
        raise ValueError(f"chunks wrote {written} bases; the plan scores {totals['scored_bp']}")
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
    }


def summary_markdown(summary: Mapping[str, Any], plan_text: str) -> str:
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
        ]
    )


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())
