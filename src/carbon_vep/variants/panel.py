"""Read a variant panel (VCF/BCF through pysam, Parquet/TSV/CSV through polars) into one table.

Every input variant becomes one row with a stable `row_id` and a `source` (`file:line N` for
text files, `file:row N` for Parquet, `file:record N` for BCF) so that later stages and error
messages can point at it; a multi-allelic VCF record is split into one row per ALT. A panel is
read in batches of rows (`PanelReader`); `load_panel` gathers them into one table. The values
as read are kept in `input_pos` / `input_ref` / `input_alt`; `pos` is the 1-based position as an
integer (null when the file holds something else). Every other column of a table, and the
requested INFO fields of a VCF, is carried through; a user column whose name the pipeline uses
itself (`score`, `status`, ...) is carried as `panel_<name>`.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl
import pysam

from carbon_vep.columns import PANEL_KEY as KEY
from carbon_vep.columns import RESERVED as RESERVED_COLUMNS
from carbon_vep.config.run import setting_name
from carbon_vep.errors import InputError
from carbon_vep.genome.htslib import Messages, captured_messages

INPUT_COLUMNS = ("input_pos", "input_ref", "input_alt")
# Header spellings accepted for the key columns of a table (compared case-insensitively,
# without a leading '#'); anything else is mapped with `columns` in the config.
KEY_ALIASES = {
    "chrom": ("chrom", "chr", "chromosome", "contig"),
    "pos": ("pos", "position"),
    "ref": ("ref",),
    "alt": ("alt",),
}
ALL_INFO = "*"
_BATCH_ROWS = 100_000  # rows of a table checked at a time (a table is read whole by polars)
_VCF_SUFFIXES = (".vcf", ".vcf.gz", ".vcf.bgz", ".bcf")
# table file names -> format (panels and suite task files alike); gzip is read transparently
TABLE_SUFFIXES = {
    ".parquet": "parquet",
    ".tsv": "tsv", ".tsv.gz": "tsv", ".txt": "tsv", ".txt.gz": "tsv",
    ".csv": "csv", ".csv.gz": "csv",
}  # fmt: skip


@dataclass
class Panel:
    """A panel as read: one row per variant, plus what the file says about itself."""

    frame: pl.DataFrame
    path: Path
    # contig -> length from a VCF header's ##contig lines (a build fingerprint)
    declared_lengths: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # renamed columns, ignored blank lines, ...


def detect_format(path: str | Path) -> str:
    name = str(path).lower()
    if name.endswith(_VCF_SUFFIXES):
        return "vcf"
    fmt = table_format(path)
    if fmt is not None:
        return fmt
    raise InputError(
        path,
        "cannot tell the panel format from the name (.vcf, .vcf.gz, .bcf, .parquet, .tsv, "
        f".csv, .gz too); set {setting_name('format')}",
    )


def table_format(path: str | Path) -> str | None:
    """parquet, tsv or csv, from a table file's name (None when the name says none of them)."""
    name = str(path).lower()
    return next((fmt for suffix, fmt in TABLE_SUFFIXES.items() if name.endswith(suffix)), None)


def read_panel(
    path: str | Path,
    fmt: str = "auto",
    columns: Mapping[str, str] | None = None,
    info_fields: Sequence[str] = (),
) -> pl.DataFrame:
    """The panel's rows: row_id, source, chrom, pos, ref, alt, input_* and the carried columns."""
    return load_panel(path, fmt, columns, info_fields).frame


def load_panel(
    path: str | Path,
    fmt: str = "auto",
    columns: Mapping[str, str] | None = None,
    info_fields: Sequence[str] = (),
) -> Panel:
    """Read a panel file of any supported format (see the module docstring)."""
    reader = PanelReader(path, fmt, columns, info_fields)
    while True:
        try:
            frames = list(reader.batches())
            break
        except ReadAgain:
            continue
    frame = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
    return Panel(reader.finish(frame), reader.path, reader.declared_lengths, reader.notes)


class ReadAgain(Exception):  # noqa: N818 (a signal to the caller, not a failure)
    """An INFO field turned out part-way through not to be decodable as its header declares:
    the reader now carries it as its raw text, and the caller starts over from the first batch
    (whatever it did with the earlier ones is void)."""


class PanelReader:
    """A panel file read in batches of consecutive rows, so that a ClinVar-size VCF never has
    to be in memory as a whole.

    `batches()` yields frames with `row_id`, `source`, the key, `input_*` and the carried
    columns; `declared_lengths` is known once the first batch is out, `notes` and
    `null_columns` once the last is. `finish(frame)` gives a frame of all rows the final
    schema (a carried column that no row fills is a Null column, as polars infers it).
    """

    def __init__(
        self,
        path: str | Path,
        fmt: str = "auto",
        columns: Mapping[str, str] | None = None,
        info_fields: Sequence[str] = (),
    ) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InputError(self.path, "panel file not found")
        if self.path.stat().st_size == 0:
            raise InputError(self.path, "the panel file is empty")
        self.fmt = detect_format(self.path) if fmt == "auto" else fmt
        if self.fmt not in ("vcf", "parquet", "tsv", "csv"):
            raise InputError(
                self.path, f"unknown panel format {self.fmt!r} in {setting_name('format')} "
                "(vcf, parquet, tsv, csv or auto)"
            )  # fmt: skip
        self.columns = dict(columns or {})
        self.info_fields = list(info_fields)
        self.declared_lengths: dict[str, int] = {}
        self.notes: list[str] = []
        self.null_columns: list[str] = []
        self._raw: dict[str, str] = {}  # VCF INFO fields read as text, and why

    def batches(self) -> Iterator[pl.DataFrame]:
        """The panel's rows in order, a batch at a time (`_BATCH_ROWS` rows of a table,
        `_BATCH_RECORDS` records of a VCF). Raises `ReadAgain` when the caller must start
        over."""
        self.notes, self.null_columns = [], []
        if self.fmt == "vcf":
            source: Iterator[pl.DataFrame] = _vcf_batches(self)
        else:
            panel = _read_table(self.path, self.fmt, self.columns)
            self.notes = panel.notes
            source = (
                panel.frame.slice(start, _BATCH_ROWS)
                for start in range(0, panel.frame.height, _BATCH_ROWS)
            )
        fixed = ("row_id", "source", *KEY, *INPUT_COLUMNS)
        n_rows = 0
        for batch in source:
            if batch.height:
                yield batch.with_columns(
                    (pl.int_range(pl.len(), dtype=pl.Int64) + n_rows).alias("row_id")
                ).select(*fixed, pl.exclude(*fixed))
                n_rows += batch.height
        if n_rows == 0:
            raise InputError(self.path, "the panel holds no variants")

    def finish(self, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame` (rows of this panel) with the final schema: columns no row fills are Null."""
        empty = [c for c in self.null_columns if c in frame.columns]
        return frame.with_columns(pl.col(empty).cast(pl.Null)) if empty else frame


def _carried_names(names: Sequence[str], sources: Mapping[str, str]) -> dict[str, str]:
    """Old -> new name of every column: mapped sources get their standard name first, then the
    others keep theirs unless the pipeline or a mapped column already uses it."""
    renames = {src: std for std, src in sources.items()}
    taken = set(renames.values())
    for name in names:
        if name not in renames:
            renames[name] = carry_name(name, taken)
            taken.add(renames[name])
    return renames


def carry_name(name: str, taken: set[str]) -> str:
    """The name a carried column gets: itself, or `panel_<name>` when the pipeline uses it."""
    if name not in RESERVED_COLUMNS and name not in taken:
        return name
    renamed = f"panel_{name}"
    while renamed in taken or renamed in RESERVED_COLUMNS:
        renamed = f"panel_{renamed}"
    return renamed


def parse_positions(raw: pl.Expr) -> pl.Expr:
    """Whole-number positions as Int64; anything else (text, 12.5, empty) becomes null."""
    as_float = raw.cast(pl.Utf8).str.strip_chars().cast(pl.Float64, strict=False)
    whole = as_float.is_finite() & (as_float == as_float.round(0)) & (as_float.abs() < 2**53)
    return pl.when(whole).then(as_float.cast(pl.Int64, strict=False)).otherwise(None)


# ---- tables ------------------------------------------------------------------------------
def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    raw = gzip.open(path, "rt", newline="") if compressed else open(path, newline="")  # noqa: SIM115
    return raw  # type: ignore[return-value]


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each data line of a text table: after the header, no `##`."""
    with _open_text(path) as handle:
        header_seen = False
        for number, line in enumerate(handle, start=1):
            if line.startswith("##"):
                continue
            if header_seen:
                yield number, line
            header_seen = True


def _ragged_line(path: Path, sep: str, n_columns: int) -> tuple[int, int] | None:
    """(line number, field count) of the first data line with more fields than the header."""
    quoting = csv.QUOTE_MINIMAL if sep == "," else csv.QUOTE_NONE
    for number, line in _data_lines(path):
        fields = next(csv.reader([line], delimiter=sep, quoting=quoting), [])
        if len(fields) > n_columns:
            return number, len(fields)
    return None


def _key_sources(found: Sequence[str], columns: Mapping[str, str], path: Path) -> dict[str, str]:
    """Standard name -> column in the file, for the key columns and any extra `columns` map."""
    sources = dict(columns)
    missing = [src for src in sources.values() if src not in found]
    if missing:
        raise InputError(
            path,
            f"column(s) {missing} named in {setting_name('columns')} are not in the file; "
            f"found {list(found)}",
        )
    for std in KEY:
        if std in sources:
            continue
        hits = [c for c in found if c.lower().lstrip("#") in KEY_ALIASES[std]]
        exact = [c for c in hits if c == std]
        if len(hits) == 1 or exact:
            sources[std] = exact[0] if exact else hits[0]
        elif hits:
            raise InputError(path, f"several columns could be {std!r}: {hits}; pick one with "
                             f"{setting_name('columns', f'{std}={hits[0]}')}")  # fmt: skip
    absent = [std for std in KEY if std not in sources]
    if absent:
        example = setting_name("columns", f"{absent[0]}=YOUR_COLUMN")
        raise InputError(
            path, f"missing column(s) {absent}; found {list(found)} (map them with {example})"
        )
    return sources


def read_text_table(
    path: str | Path,
    fmt: str,
    overrides: Mapping[str, Any] | None = None,
    n_rows: int | None = None,
    all_text: bool = False,
) -> pl.DataFrame:
    """A TSV or CSV (plain or gzipped) as polars reads it: `##` lines are comments, a quote in a
    TSV is a character; `all_text` reads every column as a string."""
    sep = "," if fmt == "csv" else "\t"
    return pl.read_csv(
        path,
        separator=sep,
        comment_prefix="##",
        quote_char='"' if sep == "," else None,  # a quote in a TSV is a character
        infer_schema_length=0 if all_text else None,
        schema_overrides=overrides,
        n_rows=n_rows,
    )


def _read_table(path: Path, fmt: str, columns: Mapping[str, str]) -> Panel:
    sep = "," if fmt == "csv" else "\t"
    try:
        if fmt == "parquet":
            found = pl.read_parquet_schema(path)
        else:
            found = read_text_table(path, fmt, n_rows=0).columns
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot read the {fmt} panel: {err}") from err
    names = list(found)
    sources = _key_sources(names, columns, path)
    try:
        if fmt == "parquet":
            frame = pl.read_parquet(path)
        else:
            overrides = {src: pl.Utf8 for std, src in sources.items() if std in KEY}
            frame = read_text_table(path, fmt, overrides)
    except pl.exceptions.ComputeError as err:
        ragged = None if fmt == "parquet" else _ragged_line(path, sep, len(names))
        if ragged:
            line, n_fields = ragged
            raise InputError(
                path, f"{n_fields} fields where the header has {len(names)}", line
            ) from err
        raise InputError(path, f"cannot read the {fmt} panel: {err}") from err
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot read the {fmt} panel: {err}") from err
    return _standardize_table(frame, path, fmt, sources)


def _standardize_table(frame: pl.DataFrame, path: Path, fmt: str, sources: dict[str, str]) -> Panel:
    notes: list[str] = []
    if fmt == "parquet":
        where = [f"{path}:row {n}" for n in range(1, frame.height + 1)]
    else:
        lines = list(_data_lines(path))
        if len(lines) != frame.height:  # quoted fields spanning lines: cite rows instead
            lines = [(n, "?") for n in range(1, frame.height + 1)]
            where = [f"{path}:row {n}" for n, _ in lines]
        else:
            where = [f"{path}:line {n}" for n, _ in lines]
        blank = [not text.strip() for _, text in lines]  # blank lines are not variants
        if any(blank):
            notes.append(f"{sum(blank)} blank line(s) ignored")
            frame = frame.filter(~pl.Series(blank))
            where = [w for w, is_blank in zip(where, blank, strict=True) if not is_blank]
    renames = _carried_names(frame.columns, sources)
    moved = {k: v for k, v in renames.items() if k != v and v not in sources}
    if moved:
        notes.append(f"columns renamed so the pipeline's own do not overwrite them: {moved}")
    frame = frame.rename(renames)
    return Panel(
        frame.with_columns(
            pl.Series("source", where, dtype=pl.Utf8),
            pl.col("chrom").cast(pl.Utf8).str.strip_chars(),
            parse_positions(pl.col("pos")).alias("pos"),
            pl.col("ref").cast(pl.Utf8),
            pl.col("alt").cast(pl.Utf8),
            pl.col("pos").cast(pl.Utf8).alias("input_pos"),
            pl.col("ref").cast(pl.Utf8).alias("input_ref"),
            pl.col("alt").cast(pl.Utf8).alias("input_alt"),
        ),
        path,
        notes=notes,
    )


# ---- VCF / BCF ---------------------------------------------------------------------------
# The reader builds columns, not row dicts: a batch of records goes into Python lists, then
# into a polars frame that is handed out (`PanelReader.batches`), so a ClinVar-size VCF is
# never in memory whole.
_BATCH_RECORDS = 50_000
_MISSING_ALT = (".",)
_NUMERIC = ("Integer", "Float")
_VCF_COLUMNS = {
    "chrom": pl.Utf8, "pos": pl.Int64, "ref": pl.Utf8, "alt": pl.Utf8, "id": pl.Utf8,
    "qual": pl.Float64, "filter": pl.Utf8, "n_alts_in_record": pl.Int64, "alt_index": pl.Int64,
}  # fmt: skip
_NO_WHITESPACE = {"id": "ID", "ref": "REF", "alt": "ALT", "filter": "FILTER"}  # VCF forbids it
_UNDEFINED_TAG = re.compile(r"^(INFO|FILTER) '(.*)' at (\S+):(\d+) is not defined")


@dataclass(frozen=True)
class _TextHeader:
    """What a text VCF's header says about its layout (None is used for BCF)."""

    n_lines: int  # `##` lines and the #CHROM line: record N is on line n_lines + N
    chrom_line: str  # the #CHROM line as written

    @property
    def empty_format(self) -> bool:
        """`#CHROM ... INFO FORMAT` without a sample: other tools read it, htslib refuses it."""
        columns = self.chrom_line.rstrip("\r\n\t ").split("\t")
        return len(columns) == 9 and columns[-1] == "FORMAT"


def _open_binary(path: Path) -> Any:
    with open(path, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if compressed else open(path, "rb")  # noqa: SIM115


def _text_header(path: Path) -> _TextHeader | None:
    """The header layout of a text VCF (plain or gzipped), so rows can cite their file line;
    None for BCF or a file that cannot be read (pysam reports the real error)."""
    try:
        with _open_binary(path) as handle:
            if handle.read(3) == b"BCF":
                return None  # binary: rows cite their record number instead
            handle.seek(0)
            count, chrom_line = 0, ""
            for line in handle:
                if not line.startswith(b"#"):
                    break
                count += 1
                if line.startswith(b"#CHROM"):
                    chrom_line = line.decode(errors="replace")
            return _TextHeader(count, chrom_line)
    except (OSError, EOFError):
        return None


def _text_line(path: Path, number: int) -> str | None:
    """Line `number` (1-based) of a text VCF, for error messages."""
    try:
        with _open_text(path) as handle:
            for current, line in enumerate(handle, start=1):
                if current == number:
                    return line.rstrip("\r\n")
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    return None


def _header_line_number(path: Path, text: str) -> int | None:
    """The number of the header line that reads `text` (htslib quotes the line it refuses)."""
    wanted = text.rstrip("\r\n")
    try:
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                if line.rstrip("\r\n") == wanted:
                    return number
                if not line.startswith("#"):
                    return None
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    return None


class _LineCursor:
    """Lines of a text VCF by number, read forward once (the numbers asked never decrease):
    the record's own text, for INFO values htslib cannot decode."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: Any = None
        self.number = 0
        self.text = ""

    def line(self, number: int) -> str:
        if self.handle is None:
            self.handle = _open_text(self.path)
        while self.number < number:
            self.text = self.handle.readline()
            self.number += 1
        return self.text.rstrip("\r\n")

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def _raw_info(record_text: str, name: str) -> str | None:
    """The text of INFO field `name` in a record line ('' for a key without a value)."""
    fields = record_text.split("\t", 8)
    if len(fields) < 8:
        return None
    for item in fields[7].split(";"):
        key, equals, value = item.partition("=")
        if key == name:
            return value if equals else ""
    return None


@dataclass(frozen=True)
class _InfoSpec:
    name: str
    number: str  # the header's Number ('1', 'A', 'R', 'G', '.', '2', ...)
    kind: str  # the header's Type (Flag, Integer, Float, String, Character)
    declared: bool
    raw: bool = False  # carried as the record's text (htslib cannot decode it as declared)

    @cached_property
    def text_list(self) -> bool:
        """A declared list of strings, carried as its comma-joined text."""
        return (
            self.declared and not self.raw and self.kind in ("String", "Character")
            and self.number not in ("0", "1", "A", "R")
        )  # fmt: skip

    @property
    def dtype(self) -> Any:
        if self.raw or not self.declared:
            return pl.Utf8
        if self.kind == "Flag":
            return pl.Boolean
        if self.number in ("1", "A"):
            return {"Integer": pl.Int64, "Float": pl.Float64}.get(self.kind, pl.Utf8)
        return pl.Utf8  # other lists: their comma-joined text


def _info_specs(header: Any, info_fields: Sequence[str], raw: Mapping[str, str]) -> list[_InfoSpec]:
    """The requested INFO fields as the header declares them; undeclared ones read as String."""
    fields = list(header.info) if ALL_INFO in info_fields else list(dict.fromkeys(info_fields))
    specs = []
    for name in fields:
        meta = header.info.get(name)
        if meta is None:
            specs.append(_InfoSpec(name, ".", "String", declared=False))
        else:
            number = str(meta.number)
            specs.append(_InfoSpec(name, number, meta.type, True, name in raw or number == "G"))
    return specs


class _Undecodable(Exception):  # noqa: N818 (a signal inside the reader, never user-facing)
    """An INFO field's value cannot be decoded as its header declares it."""

    def __init__(self, spec: _InfoSpec, why: str) -> None:
        super().__init__(why)
        self.spec = spec
        self.why = why


def _joined(values: tuple) -> str:
    return ",".join("." if v is None else str(v) for v in values)


class _RecordText:
    """The current record's own text, fetched only when a raw INFO value is needed."""

    def __init__(self, path: Path, header: _TextHeader | None) -> None:
        self.cursor = _LineCursor(path) if header is not None else None
        self.n_header = header.n_lines if header is not None else 0
        self.record: Any = None
        self.number = 0

    def info(self, name: str) -> str | None:
        if self.cursor is None:  # BCF: htslib's rendering of the typed values
            return _raw_info(str(self.record), name)
        return _raw_info(self.cursor.line(self.n_header + self.number), name)

    def close(self) -> None:
        if self.cursor is not None:
            self.cursor.close()


def _check_missing(spec: _InfoSpec, value: Any, text: _RecordText) -> None:
    """A numeric value htslib decoded as missing must be missing ('.') in the text too: htslib
    turns a value it cannot parse ('abc', 1e99 for an Integer) into a missing one."""
    if text.cursor is None:
        return  # BCF values are typed: missing is missing
    raw = text.info(spec.name)
    if raw is None:
        return
    decoded = value if isinstance(value, tuple) else (value,)
    written = raw.split(",")
    n_missing = sum(v.strip() in ("", ".") for v in written)
    if sum(v is None for v in decoded) > n_missing:
        raise _Undecodable(spec, f"{raw!r} does not read as {spec.kind}")


def _decode_info(info: Any, spec: _InfoSpec, alts: tuple | None, text: _RecordText) -> Any:
    """One INFO field of a record: one value for every ALT row, or a list with one per ALT.

    Number=A values go to their ALT's row, Number=R ones keep REF's and this ALT's value;
    other multi-valued fields are carried as their comma-joined text, flags as true/false.
    """
    name = spec.name
    if spec.text_list:  # the common case (ClinVar's fields): a list of strings, joined
        try:
            value = info.get(name)
        except (ValueError, TypeError, KeyError) as err:
            raise _Undecodable(spec, str(err)) from err
        if type(value) is tuple:
            try:
                return ",".join(value)
            except TypeError:  # a missing value inside
                return _joined(value)
        return value
    if spec.raw:
        return text.info(name)
    if spec.kind == "Flag":
        return name in info
    if not spec.declared:  # htslib reads it as String (info.get() raises for such names)
        value = info[name] if name in info else None  # noqa: SIM401
        return _joined(value) if isinstance(value, tuple) else value
    try:
        value = info.get(name)
    except (ValueError, TypeError, KeyError) as err:
        raise _Undecodable(spec, str(err)) from err
    numeric = spec.kind in _NUMERIC
    if value is None:
        if numeric and name in info:
            _check_missing(spec, value, text)
        return None
    if not isinstance(value, tuple):
        return value
    if numeric and None in value:
        _check_missing(spec, value, text)
    if spec.number in ("A", "R"):
        expected = len(alts) + (spec.number == "R") if alts else None
        if expected is not None and len(value) != expected:
            raise _Undecodable(
                spec, f"{len(value)} value(s) where Number={spec.number} means {expected}"
            )
        if spec.number == "A":
            return list(value) if alts else value[0]
        if alts:
            return [_joined((value[0], v)) for v in value[1:]]
    elif spec.number == "1" and numeric:
        raise _Undecodable(spec, f"{len(value)} value(s) where Number=1")
    return _joined(value)


class _VcfBatches:
    """Columns of VCF rows, turned into a polars frame every `_BATCH_RECORDS` records."""

    def __init__(self, path: Path, header: _TextHeader | None, specs: list[_InfoSpec]) -> None:
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
            record.chrom, record.pos, record.ref, record.id, record.qual,
            ";".join(filters) if filters else None,
        )  # fmt: skip
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
            "chrom", "pos", "ref", "alt",
            pl.col("pos").cast(pl.Utf8).alias("input_pos"),
            pl.col("ref").alias("input_ref"),
            pl.col("alt").alias("input_alt"),
            "id", "qual", "filter", "n_alts_in_record", "alt_index",
            *[pl.col(s.name) for s in self.specs],
        )  # fmt: skip


@contextmanager
def _vcf_stream(path: Path, header: _TextHeader | None) -> Iterator[Any]:
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
            with os.fdopen(write_end, "wb") as out, _open_binary(path) as source:
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
        first = _text_line(path, 1)
        if first is not None and not first.startswith("##fileformat=VCF"):
            cause += f"; a VCF starts with ##fileformat=VCF, this file with {first[:60]!r}"
        quoted = [m.detail for m in messages.parsed("E") if m.detail]
        line = _header_line_number(path, quoted[0].split("\n")[0]) if quoted else None
        raise InputError(path, f"cannot open as VCF/BCF: {cause}", line) from failure
    return vcf


def _vcf_batches(reader: PanelReader) -> Iterator[pl.DataFrame]:
    """The VCF's rows, `_BATCH_RECORDS` records at a time (see `PanelReader`)."""
    path = reader.path
    header = _text_header(path)
    with _vcf_stream(path, header) as handle:
        vcf = _open_vcf(handle, path)
        reader.declared_lengths = {
            c: vcf.header.contigs[c].length for c in vcf.header.contigs
            if vcf.header.contigs[c].length
        }  # fmt: skip
        specs = _info_specs(vcf.header, reader.info_fields, reader._raw)
        declared_info = sorted(vcf.header.info)
        records = _VcfRecords(path, header, specs, reader._raw)
        renames = _carried_renames(specs)
        with captured_messages() as messages:
            try:
                for batch in records.batches(iter(vcf)):
                    yield _checked_batch(path, header, batch, messages, renames)
            finally:
                records.text.close()
                vcf.close()
    _end_of_vcf(reader, records, messages, declared_info, renames)


def _carried_renames(specs: list[_InfoSpec]) -> dict[str, str]:
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
        self, path: Path, header: _TextHeader | None, specs: list[_InfoSpec], raw: dict[str, str]
    ) -> None:
        self.path, self.header, self.specs, self.raw = path, header, specs, raw
        self.rows = _VcfBatches(path, header, specs)
        self.text = _RecordText(path, header)
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
            values = [_decode_info(info, spec, alts, self.text) for spec in self.specs]
            self.rows.add(number, record, alts, values)
        except _Undecodable as found:
            self.raw[found.spec.name] = f"{found.why}, {_where(self.header, number)}"
            raise ReadAgain(found.spec.name) from None
        except (OSError, ValueError, TypeError) as err:  # this record, not the next
            line = None if self.header is None else self.header.n_lines + number
            raise _vcf_error(self.path, err, str(err), line, number - 1) from err
        if self.undeclared:
            self.seen_info.update(name for name in self.undeclared if name in info)


def _end_of_vcf(
    reader: PanelReader,
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
        if line is not None and _blank_from(path, line):
            warnings = ["blank line(s) at the end of the file ignored"]  # htslib's complaint
        else:
            htslib_says = messages.errors() or "; ".join(messages.lines("W")[-2:])
            raise _vcf_error(path, records.failure, htslib_says, line, records.record_number)
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
    reader.notes = _vcf_notes(header, records.specs, reader._raw) + [
        f"htslib: {m}" for m in warnings
    ]


def _where(header: _TextHeader | None, record_number: int) -> str:
    if header is None:
        return f"first at record {record_number}"
    return f"first at line {header.n_lines + record_number}"


def _vcf_notes(
    header: _TextHeader | None, specs: Sequence[_InfoSpec], raw: Mapping[str, str]
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
    header: _TextHeader | None,
    batch: pl.DataFrame,
    messages: Messages,
    renames: Mapping[str, str],
) -> pl.DataFrame:
    """A batch of rows, once no record in it turns out to be space-separated."""
    _refuse_space_separated(path, header, batch, messages.new_lines("W"))
    return batch.drop("_record").rename(dict(renames))


def _blank_from(path: Path, number: int) -> bool:
    """Whether line `number` exists and it and every line after it are blank (a harmless end
    of file). A failure past the last line is not a blank line: it is reported."""
    try:
        with _open_text(path) as handle:
            rest = [line for n, line in enumerate(handle, 1) if n >= number]
    except (OSError, EOFError, UnicodeDecodeError):
        return False
    return bool(rest) and all(not line.strip() for line in rest)


def _refuse_space_separated(
    path: Path, header: _TextHeader | None, frame: pl.DataFrame, warnings: Sequence[str]
) -> None:
    """Stop at the first record whose fields are separated by spaces: htslib splits on tabs
    only, so such a record reads with whitespace inside ID, REF, ALT, FILTER or an INFO key."""
    found: list[tuple[int, str]] = []  # (record number, what holds the space)
    checks = [pl.col(c).str.contains(r"\s").fill_null(False) for c in _NO_WHITESPACE]
    hits = frame.select("_record", *_NO_WHITESPACE).filter(pl.any_horizontal(checks)).head(1)
    if hits.height:
        row = hits.row(0, named=True)
        column = next(c for c in _NO_WHITESPACE if row[c] and re.search(r"\s", row[c]))
        found.append((row["_record"], f"{_NO_WHITESPACE[column]} {row[column]!r}"))
    for message in warnings:
        match = _UNDEFINED_TAG.match(message)
        if match and re.search(r"\s", match[2]):
            at = frame.filter((pl.col("chrom") == match[3]) & (pl.col("pos") == int(match[4])))
            if at.height:
                found.append((at["_record"][0], f"{match[1]} key {match[2]!r}"))
    if not found:
        return
    number, what = min(found)
    cause = f"the fields are not tab-separated: {what} holds a space"
    if header is None:
        raise InputError(path, f"malformed VCF record {number} ({cause})")
    line = header.n_lines + number
    text = _text_line(path, line)
    shown = "" if text is None else f": {text[:80]!r}"
    raise InputError(path, f"malformed VCF record ({cause}){shown}", line)


def _vcf_error(
    path: Path, err: Exception, htslib_says: str, line: int | None, n_read: int
) -> InputError:
    """An error naming the file, the failing line, what htslib found wrong and the line."""
    cause = htslib_says or str(err)
    if line is None:
        return InputError(path, f"cannot read record {n_read + 1} ({cause})")
    text = _text_line(path, line)
    if text is not None and not text.strip():
        cause = "blank line between records"
    elif text is not None and "\t" not in text:
        cause = f"{cause}; the fields are not tab-separated"
    elif text is None:
        cause = f"{cause}; the file ends before line {line}"
    shown = "" if text is None else f": {text[:80]!r}"
    return InputError(path, f"malformed VCF record ({cause}){shown}", line)
