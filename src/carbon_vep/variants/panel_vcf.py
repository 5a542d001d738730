"""Read a VCF or BCF panel through pysam, `_BATCH_RECORDS` records at a time.

Each ALT of a record is one row citing its file line (`file:line N`; `file:record N` for BCF);
the requested INFO fields are decoded as the header declares them (Number=A to its ALT's row,
Number=R as REF's and this ALT's value, other lists as their comma-joined text) or, when a
value turns out not to decode so, carried as the record's raw text (`ReadAgain`). Malformed
records, space-separated fields, blank lines and headers htslib refuses get an error naming the
file and line; a sites-only VCF whose #CHROM line ends in an empty FORMAT column is read.

The reader builds columns, not row dicts: a batch of records goes into Python lists, then into
a polars frame that is handed out, so a ClinVar-size VCF is never in memory whole.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl
import pysam

from carbon_vep.config.run import setting_name
from carbon_vep.errors import InputError
from carbon_vep.genome.htslib import Messages, captured_messages
from carbon_vep.variants.panel_columns import INPUT_COLUMNS, ReadAgain, carry_name, open_binary
from carbon_vep.variants.panel_vcf_info import (
    InfoSpec,
    RecordText,
    Undecodable,
    decode_info,
    info_specs,
)
from carbon_vep.variants.panel_vcf_lines import (
    TextHeader,
    blank_from,
    first_at,
    header_line_number,
    refuse_space_separated,
    text_header,
    text_line,
    vcf_error,
)


class PanelReaderState(Protocol):
    """What `vcf_batches` reads of the panel reader (path, requested INFO fields, fields read
    as raw text and why) and sets on it (declared contig lengths, notes, null columns)."""

    path: Path
    info_fields: list[str]
    raw_info: dict[str, str]
    declared_lengths: dict[str, int]
    notes: list[str]
    null_columns: list[str]


_BATCH_RECORDS = 50_000
_VCF_COLUMNS = {
    "chrom": pl.Utf8,
    "pos": pl.Int64,
    "ref": pl.Utf8,
    "alt": pl.Utf8,
    "id": pl.Utf8,
    "qual": pl.Float64,
    "filter": pl.Utf8,
    "n_alts_in_record": pl.Int64,
    "alt_index": pl.Int64,
}


class _VcfBatches:
    """Columns of VCF rows, turned into a polars frame every `_BATCH_RECORDS` records."""

    def __init__(self, path: Path, header: TextHeader | None, specs: list[InfoSpec]) -> None:
        self.specs = specs
        self.where = (
            (f"{path}:line ", header.n_lines) if header is not None else (f"{path}:record ", 0)
        )
        self.n_rows = 0  # rows added
        self.n_flushed = 0  # rows handed out
        self.filled: set[str] = set()  # INFO fields with a value in some row
        self._reset()

    def _reset(self) -> None:
        self.record: list[int] = []
        self.columns: dict[str, list] = {name: [] for name in _VCF_COLUMNS}
        self.fixed = [self.columns[k] for k in ("chrom", "pos", "ref", "id", "qual", "filter")]
        self.alt = self.columns["alt"]
        self.n_alts = self.columns["n_alts_in_record"]
        self.alt_index = self.columns["alt_index"]
        self.info: list[list] = [[] for _ in self.specs]

    def add(self, number: int, record: Any, alts: tuple | None, info: list[Any]) -> None:
        filters = record.filter.keys()
        fixed = (
            record.chrom,
            record.pos,
            record.ref,
            record.id,
            record.qual,
            ";".join(filters) if filters else None,
        )
        if alts is None or len(alts) == 1:
            self.record.append(number)
            for values, value in zip(self.fixed, fixed):  # noqa: B905 (same length)
                values.append(value)
            self.alt.append(alts[0] if alts else ".")
            self.n_alts.append(1)
            self.alt_index.append(1)
            for values, value in zip(self.info, info):  # noqa: B905
                values.append(value[0] if type(value) is list else value)
            self.n_rows += 1
        else:
            n = len(alts)
            self.record.extend([number] * n)
            for values, value in zip(self.fixed, fixed):  # noqa: B905
                values.extend([value] * n)
            self.alt.extend(alts)
            self.n_alts.extend([n] * n)
            self.alt_index.extend(range(1, n + 1))
            for values, value in zip(self.info, info):  # noqa: B905
                values.extend(value if type(value) is list else [value] * n)
            self.n_rows += n

    def full(self) -> bool:
        return len(self.record) >= _BATCH_RECORDS

    def flush(self) -> pl.DataFrame | None:
        """The rows added since the last flush, as a frame (None when there are none)."""
        if not self.record:
            return None
        prefix, offset = self.where
        record = pl.Series("_record", self.record, dtype=pl.Int64)
        frame = pl.DataFrame(
            [record]
            + [pl.Series(k, v, dtype=_VCF_COLUMNS[k]) for k, v in self.columns.items()]
            + [
                pl.Series(s.name, v, dtype=s.dtype)
                for s, v in zip(self.specs, self.info, strict=True)
            ]
        )
        self._reset()
        self.n_flushed += frame.height
        for spec in self.specs:
            if frame[spec.name].null_count() < frame.height:
                self.filled.add(spec.name)
        return frame.select(
            "_record",
            (pl.lit(prefix) + (pl.col("_record") + offset).cast(pl.Utf8)).alias("source"),
            "chrom",
            "pos",
            "ref",
            "alt",
            pl.col("pos").cast(pl.Utf8).alias("input_pos"),
            pl.col("ref").alias("input_ref"),
            pl.col("alt").alias("input_alt"),
            "id",
            "qual",
            "filter",
            "n_alts_in_record",
            "alt_index",
            *[pl.col(s.name) for s in self.specs],
        )


@contextmanager
def _vcf_stream(path: Path, header: TextHeader | None) -> Iterator[Any]:
    """The file for pysam; a sites-only VCF whose #CHROM line ends in an empty FORMAT column
    is passed through a pipe with that column name dropped (htslib refuses such a header; the
    lines, and so their numbers, are otherwise unchanged)."""
    if header is None or not header.empty_format:
        with open(path, "rb") as handle:
            yield handle
        return
    fixed = header.chrom_line.rstrip("\r\n\t ").removesuffix("\tFORMAT").encode() + b"\n"
    read_end, write_end = os.pipe()
    failures: list[BaseException] = []

    def feed() -> None:
        try:
            with os.fdopen(write_end, "wb") as out, open_binary(path) as source:
                for _ in range(header.n_lines):
                    line = source.readline()
                    out.write(fixed if line.startswith(b"#CHROM") else line)
                shutil.copyfileobj(source, out, 1 << 20)
        except BrokenPipeError:
            pass  # the reader stopped first (it reports why)
        except (OSError, EOFError) as err:
            failures.append(err)

    thread = threading.Thread(target=feed, name=f"sites-only {path.name}", daemon=True)
    thread.start()
    try:
        with os.fdopen(read_end, "rb") as handle:
            yield handle
    finally:
        thread.join()
    if failures:
        raise InputError(path, f"cannot read the file: {failures[0]}") from failures[0]


def _open_vcf(handle: Any, path: Path) -> Any:
    """pysam's reader over an open file (so that plain-gzip VCFs work too), samples skipped."""
    with captured_messages() as messages:
        try:
            vcf = pysam.VariantFile(handle)
            vcf.subset_samples([])  # genotypes are not needed; skip parsing them
            failure = None
        except (OSError, ValueError) as err:
            failure = err
    if failure is not None:
        cause = messages.errors() or str(failure)
        if "BufferedReader" in cause:  # pysam names the handle, not the file
            cause = "not recognised as VCF or BCF"
        first = text_line(path, 1)
        if first is not None and first.startswith("\ufeff"):
            cause += "; the file starts with a byte-order mark (BOM): save it as UTF-8 without one"
        elif first is not None and not first.startswith("##fileformat=VCF"):
            cause += f"; a VCF starts with ##fileformat=VCF, this file with {first[:60]!r}"
        quoted = [m.detail for m in messages.parsed("E") if m.detail]
        line = header_line_number(path, quoted[0].split("\n")[0]) if quoted else None
        raise InputError(path, f"cannot open as VCF/BCF: {cause}", line) from failure
    return vcf


def vcf_batches(reader: PanelReaderState) -> Iterator[pl.DataFrame]:
    """The VCF's rows, `_BATCH_RECORDS` records at a time (see `PanelReader`)."""
    path = reader.path
    header = text_header(path)
    with _vcf_stream(path, header) as handle:
        vcf = _open_vcf(handle, path)
        reader.declared_lengths = {
            c: vcf.header.contigs[c].length
            for c in vcf.header.contigs
            if vcf.header.contigs[c].length
        }
        specs = info_specs(vcf.header, reader.info_fields, reader.raw_info)
        declared_info = sorted(vcf.header.info)
        records = _VcfRecords(path, header, specs, reader.raw_info)
        renames = _carried_renames(specs)
        with captured_messages() as messages:
            try:
                for batch in records.batches(iter(vcf)):
                    yield _checked_batch(path, header, batch, messages, renames)
            finally:
                records.text.close()
                vcf.close()
    _end_of_vcf(reader, records, messages, declared_info, renames)


@dataclass(frozen=True)
class CarriedInfo:
    """A requested INFO field as the panel's header declares it, and the column it is in."""

    column: str
    spec: InfoSpec
    description: str


@dataclass(frozen=True)
class VcfDeclarations:
    """What a VCF panel's header says about what the reader carries: the requested INFO fields
    (in request order; `*` = every declared field) and every declared FILTER."""

    info: tuple[CarriedInfo, ...]
    filters: dict[str, str]  # FILTER id -> description


def vcf_declarations(path: Path, info_fields: Sequence[str]) -> VcfDeclarations:
    """The header declarations of the INFO fields and FILTERs a VCF/BCF panel's rows carry
    (for writers that put them back in a VCF: results.vcf.gz). Only the header is read."""
    header = text_header(path)
    with _vcf_stream(path, header) as handle:
        vcf = _open_vcf(handle, path)
        try:
            specs = info_specs(vcf.header, info_fields, {})
            renames = _carried_renames(specs)
            info = tuple(
                CarriedInfo(
                    renames.get(spec.name, spec.name),
                    spec,
                    (vcf.header.info[spec.name].description or "") if spec.declared else "",
                )
                for spec in specs
            )
            filters = {name: f.description or "" for name, f in vcf.header.filters.items()}
        finally:
            vcf.close()
    return VcfDeclarations(info, filters)


def _carried_renames(specs: list[InfoSpec]) -> dict[str, str]:
    """INFO field -> its output column, where the name is taken by a column of ours."""
    renames, taken = {}, {"source", *_VCF_COLUMNS, *INPUT_COLUMNS}
    for spec in specs:
        renames[spec.name] = carry_name(spec.name, taken)
        taken.add(renames[spec.name])
    return {k: v for k, v in renames.items() if k != v}


class _VcfRecords:
    """The record loop: every ALT of every record into `_VcfBatches`, INFO decoded as declared
    (or re-read as text, `ReadAgain`), and where the loop stopped (`record_number`, `failure`:
    the record after the last one read is malformed)."""

    def __init__(
        self, path: Path, header: TextHeader | None, specs: list[InfoSpec], raw: dict[str, str]
    ) -> None:
        self.path, self.header, self.specs, self.raw = path, header, specs, raw
        self.rows = _VcfBatches(path, header, specs)
        self.text = RecordText(path, header)
        self.undeclared = {s.name for s in specs if not s.declared}
        self.seen_info: set[str] = set()  # undeclared fields some record has
        self.record_number = 0
        self.failure: Exception | None = None

    def batches(self, records: Iterator[Any]) -> Iterator[pl.DataFrame]:
        while True:
            try:
                record = next(records)
            except StopIteration:
                break
            except (OSError, ValueError) as err:
                self.failure = err
                break
            self.record_number += 1
            self._add(record)
            if self.rows.full():
                yield self.rows.flush()
        batch = self.rows.flush()
        if batch is not None:
            yield batch

    def _add(self, record: Any) -> None:
        number = self.text.number = self.record_number
        self.text.record = record
        try:
            info, alts = record.info, record.alts
            values = [decode_info(info, spec, alts, self.text) for spec in self.specs]
            self.rows.add(number, record, alts, values)
        except Undecodable as found:
            self.raw[found.spec.name] = f"{found.why}, {first_at(self.header, number)}"
            raise ReadAgain(found.spec.name) from None
        except (OSError, ValueError, TypeError) as err:  # this record, not the next
            line = None if self.header is None else self.header.n_lines + number
            raise vcf_error(self.path, err, str(err), line, number - 1) from err
        if self.undeclared:
            self.seen_info.update(name for name in self.undeclared if name in info)


def _end_of_vcf(
    reader: PanelReaderState,
    records: _VcfRecords,
    messages: Messages,
    declared_info: list[str],
    renames: dict[str, str],
) -> None:
    """After the last record: a malformed record stops the read (blank lines at the end are a
    warning); INFO fields asked for but found nowhere stop it; the reader's notes are set."""
    path, header, rows = reader.path, records.header, records.rows
    line = None if header is None else header.n_lines + records.record_number + 1
    warnings = messages.lines("W")
    if records.failure is not None:
        if line is not None and blank_from(path, line):
            warnings = ["blank line(s) at the end of the file ignored"]  # htslib's complaint
        else:
            htslib_says = messages.errors() or "; ".join(messages.lines("W")[-2:])
            raise vcf_error(path, records.failure, htslib_says, line, records.record_number)
    if rows.n_rows != rows.n_flushed:  # cannot happen; guards "no row is ever dropped"
        raise AssertionError(f"{path}: {rows.n_rows} ALTs read, {rows.n_flushed} rows out")
    unknown = [n for n in sorted(records.undeclared) if n not in records.seen_info]
    if unknown:
        raise InputError(
            path,
            f"INFO field(s) {unknown} requested in {setting_name('info_fields')} are neither "
            f"declared in the header nor present in any record; declared: {declared_info}",
        )
    reader.null_columns = [
        renames.get(s.name, s.name) for s in records.specs if s.name not in rows.filled
    ]
    reader.notes = _vcf_notes(header, records.specs, reader.raw_info) + [
        f"htslib: {m}" for m in warnings
    ]


def _vcf_notes(
    header: TextHeader | None, specs: Sequence[InfoSpec], raw: Mapping[str, str]
) -> list[str]:
    notes = []
    if header is not None and header.empty_format:
        notes.append(
            "the #CHROM line ends in a FORMAT column but names no sample; read as a sites-only "
            "VCF (htslib refuses this header: drop the trailing FORMAT from the #CHROM line)"
        )
    for spec in specs:
        if spec.raw:
            why = raw.get(spec.name, "htslib decodes Number=G in FORMAT fields only")
            notes.append(
                f"INFO field {spec.name} cannot be decoded as declared (Number={spec.number}, "
                f"Type={spec.kind}: {why}); carried as its raw text"
            )
    return notes


def _checked_batch(
    path: Path,
    header: TextHeader | None,
    batch: pl.DataFrame,
    messages: Messages,
    renames: Mapping[str, str],
) -> pl.DataFrame:
    """A batch of rows, once no record in it turns out to be space-separated."""
    refuse_space_separated(path, header, batch, messages.new_lines("W"))
    return batch.drop("_record").rename(dict(renames))
