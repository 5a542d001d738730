"""Read a variant panel (VCF/BCF through pysam, Parquet/TSV/CSV through polars) into one table.

Every input variant becomes one row with a stable `row_id` and a `source` (file:line or
file:row) so that later stages can report on it; multi-allelic VCF records are split into one
row per ALT. Columns other than the key are carried through untouched.
"""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pysam

from .errors import InputError

KEY = ("chrom", "pos", "ref", "alt")
_VCF_SUFFIXES = (".vcf", ".vcf.gz", ".vcf.bgz", ".bcf")
_TABLE_SEPARATORS = {".tsv": "\t", ".tsv.gz": "\t", ".txt": "\t", ".csv": ",", ".csv.gz": ","}


def detect_format(path: str | Path) -> str:
    name = str(path).lower()
    if name.endswith(_VCF_SUFFIXES):
        return "vcf"
    if name.endswith(".parquet"):
        return "parquet"
    for suffix, sep in _TABLE_SEPARATORS.items():
        if name.endswith(suffix):
            return "csv" if sep == "," else "tsv"
    raise InputError(path, "cannot tell the panel format from the name; set `format` in config")


def read_panel(
    path: str | Path,
    fmt: str = "auto",
    columns: Mapping[str, str] | None = None,
    info_fields: Sequence[str] = (),
) -> pl.DataFrame:
    """Return the panel with columns row_id, source, chrom, pos, ref, alt and the carried ones."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "panel file not found")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "vcf":
        frame = _read_vcf(path, info_fields)
    elif fmt in ("parquet", "tsv", "csv"):
        frame = _read_table(path, fmt, columns or {})
    else:
        raise InputError(path, f"unknown panel format {fmt!r}")
    if frame.height == 0:
        raise InputError(path, "the panel holds no variants")
    return frame.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id")).select(
        "row_id", "source", *KEY, pl.exclude("row_id", "source", *KEY)
    )


def _read_table(path: Path, fmt: str, columns: Mapping[str, str]) -> pl.DataFrame:
    try:
        if fmt == "parquet":
            frame = pl.read_parquet(path)
        else:
            sep = "," if fmt == "csv" else "\t"
            frame = pl.read_csv(path, separator=sep, infer_schema_length=0, comment_prefix="##")
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot read {fmt} panel: {err}") from err
    rename = {src: dst for dst, src in columns.items() if src != dst}
    missing = [src for src in rename if src not in frame.columns]
    missing += [k for k in KEY if k not in rename.values() and k not in frame.columns]
    if missing:
        raise InputError(
            path, f"missing column(s) {missing}; found {frame.columns} (map them under `columns`)"
        )
    frame = frame.rename(rename)
    first_data_line = 1 if fmt == "parquet" else 2  # header occupies line 1 of a text table
    unit = "row" if fmt == "parquet" else "line"
    return frame.with_columns(
        pl.col("chrom").cast(pl.Utf8),
        pl.col("pos").cast(pl.Int64, strict=False),
        pl.col("ref").cast(pl.Utf8),
        pl.col("alt").cast(pl.Utf8),
        pl.format(
            "{}:{} {}", pl.lit(str(path)), pl.lit(unit), pl.int_range(pl.len()) + first_data_line
        ).alias("source"),
    )


def _info_value(value: Any, allele_index: int, n_alts: int) -> Any:
    """Per-ALT INFO values (Number=A) go to their own row; anything else is carried whole."""
    if isinstance(value, tuple):
        if len(value) == n_alts:
            return value[allele_index]
        return ",".join(str(v) for v in value)
    return value


def _count_header_lines(path: Path) -> int | None:
    """Header lines of a text VCF (plain or bgzipped), so rows can cite their file line."""
    with open(path, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as handle:  # type: ignore[operator]
            if handle.read(3) == b"BCF":
                return None  # binary: rows cite their record number instead
            handle.seek(0)
            return sum(1 for _ in itertools.takewhile(lambda line: line.startswith(b"#"), handle))
    except (OSError, EOFError):
        return None  # unreadable: pysam reports the real error


def _read_vcf(path: Path, info_fields: Sequence[str]) -> pl.DataFrame:
    try:
        vcf = pysam.VariantFile(str(path))
    except (OSError, ValueError) as err:
        raise InputError(path, f"cannot open VCF/BCF: {err}") from err
    header_lines = _count_header_lines(path)
    rows: list[dict[str, Any]] = []
    record_number = 0
    try:
        for record_number, record in enumerate(vcf, start=1):  # noqa: B007 (used in except)
            alts = record.alts or (".",)
            for index, alt in enumerate(alts):
                row: dict[str, Any] = {
                    "source": f"{path}:line {header_lines + record_number}"
                    if header_lines is not None
                    else f"{path}:record {record_number}",
                    "chrom": record.chrom,
                    "pos": record.pos,
                    "ref": record.ref,
                    "alt": alt,
                    "id": record.id,
                    "n_alts_in_record": len(alts),
                }
                for field in info_fields:
                    value = record.info.get(field) if field in record.info else None
                    row[field] = _info_value(value, index, len(alts))
                rows.append(row)
    except (OSError, ValueError) as err:
        line = None if header_lines is None else header_lines + record_number + 1
        raise InputError(path, f"malformed VCF record near data line ({err})", line) from err
    finally:
        vcf.close()
    schema = {"source": pl.Utf8, "chrom": pl.Utf8, "pos": pl.Int64, "ref": pl.Utf8, "alt": pl.Utf8}
    return pl.from_dicts(rows, schema_overrides=schema, infer_schema_length=None)
