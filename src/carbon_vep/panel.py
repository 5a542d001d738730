"""Read a variant panel (VCF/BCF through pysam, Parquet/TSV/CSV through polars) into one table.

Every input variant becomes one row with a stable `row_id` and a `source` (`file:line N` for
text files, `file:row N` for Parquet, `file:record N` for BCF) so that later stages and error
messages can point at it; a multi-allelic VCF record is split into one row per ALT. The values
as read are kept in `input_pos` / `input_ref` / `input_alt`; `pos` is the 1-based position as an
integer (null when the file holds something else). Every other column of a table, and the
requested INFO fields of a VCF, is carried through; a user column whose name the pipeline uses
itself (`score`, `status`, ...) is carried as `panel_<name>`.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pysam

from .columns import PANEL_KEY as KEY
from .columns import RESERVED as RESERVED_COLUMNS
from .errors import InputError
from .htslib import captured_messages

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
_VCF_SUFFIXES = (".vcf", ".vcf.gz", ".vcf.bgz", ".bcf")
_TABLE_SEPARATORS = {".tsv": "\t", ".tsv.gz": "\t", ".txt": "\t", ".csv": ",", ".csv.gz": ","}


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
    """The panel's rows: row_id, source, chrom, pos, ref, alt, input_* and the carried columns."""
    return load_panel(path, fmt, columns, info_fields).frame


def load_panel(
    path: str | Path,
    fmt: str = "auto",
    columns: Mapping[str, str] | None = None,
    info_fields: Sequence[str] = (),
) -> Panel:
    """Read a panel file of any supported format (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "panel file not found")
    if path.stat().st_size == 0:
        raise InputError(path, "the panel file is empty")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "vcf":
        panel = _read_vcf(path, info_fields)
    elif fmt in ("parquet", "tsv", "csv"):
        panel = _read_table(path, fmt, columns or {})
    else:
        raise InputError(path, f"unknown panel format {fmt!r}")
    if panel.frame.height == 0:
        raise InputError(path, "the panel holds no variants")
    fixed = ("row_id", "source", *KEY, *INPUT_COLUMNS)
    panel.frame = panel.frame.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id")
    ).select(*fixed, pl.exclude(*fixed))
    return panel


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
            path, f"column(s) {missing} named under `columns` are not in the file; found {found}"
        )
    for std in KEY:
        if std in sources:
            continue
        hits = [c for c in found if c.lower().lstrip("#") in KEY_ALIASES[std]]
        exact = [c for c in hits if c == std]
        if len(hits) == 1 or exact:
            sources[std] = exact[0] if exact else hits[0]
        elif hits:
            raise InputError(path, f"several columns could be {std!r}: {hits}; pick one under "
                             f"`columns` (e.g. columns: {{{std}: {hits[0]}}})")  # fmt: skip
    absent = [std for std in KEY if std not in sources]
    if absent:
        raise InputError(
            path, f"missing column(s) {absent}; found {list(found)} (map them under `columns`)"
        )
    return sources


def _read_text_table(
    path: Path, sep: str, overrides: dict[str, Any], n_rows: int | None = None
) -> pl.DataFrame:
    return pl.read_csv(
        path,
        separator=sep,
        comment_prefix="##",
        quote_char='"' if sep == "," else None,  # a quote in a TSV is a character
        infer_schema_length=None,
        schema_overrides=overrides,
        n_rows=n_rows,
    )


def _read_table(path: Path, fmt: str, columns: Mapping[str, str]) -> Panel:
    sep = "," if fmt == "csv" else "\t"
    try:
        if fmt == "parquet":
            found = pl.read_parquet_schema(path)
        else:
            found = _read_text_table(path, sep, {}, n_rows=0).columns
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot read the {fmt} panel: {err}") from err
    names = list(found)
    sources = _key_sources(names, columns, path)
    try:
        if fmt == "parquet":
            frame = pl.read_parquet(path)
        else:
            overrides = {src: pl.Utf8 for std, src in sources.items() if std in KEY}
            frame = _read_text_table(path, sep, overrides)
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
def _count_header_lines(path: Path) -> int | None:
    """Header lines of a text VCF (plain or gzipped), so rows can cite their file line."""
    with open(path, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as handle:  # type: ignore[operator]
            if handle.read(3) == b"BCF":
                return None  # binary: rows cite their record number instead
            handle.seek(0)
            count = 0
            for line in handle:
                if not line.startswith(b"#"):
                    break
                count += 1
            return count
    except (OSError, EOFError):
        return None  # unreadable: pysam reports the real error


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


def _info_value(value: Any, number: str, allele_index: int) -> Any:
    """Number=A values go to their ALT's row, Number=R ones keep REF's and this ALT's value;
    other multi-valued fields are carried as their comma-joined text."""
    if not isinstance(value, tuple):
        return value
    if number == "A" and allele_index < len(value):
        return value[allele_index]
    if number == "R" and allele_index + 1 < len(value):
        value = (value[0], value[allele_index + 1])
    return ",".join("." if v is None else str(v) for v in value)


def _vcf_row(record: Any, where: str, alt: str, index: int, n_alts: int) -> dict[str, Any]:
    filters = list(record.filter.keys())
    return {
        "source": where,
        "chrom": record.chrom,
        "pos": record.pos,
        "ref": record.ref,
        "alt": alt,
        "input_pos": str(record.pos),
        "input_ref": record.ref,
        "input_alt": alt,
        "id": record.id,
        "qual": record.qual,
        "filter": ";".join(filters) if filters else None,
        "n_alts_in_record": n_alts,
        "alt_index": index + 1,
    }


def _record_rows(record: Any, where: str, specs: Mapping[str, tuple[str, str]]) -> list[dict]:
    """One row per ALT of a VCF record, with the requested INFO values for that ALT."""
    alts = record.alts or (".",)
    rows = []
    for index, alt in enumerate(alts):
        row = _vcf_row(record, where, alt, index, len(alts))
        for name, (number, kind) in specs.items():
            present = name in record.info  # record.info.get() raises for undeclared names
            value = present if kind == "Flag" else (record.info[name] if present else None)
            row[name] = _info_value(value, number, index)
        rows.append(row)
    return rows


def _info_specs(header: Any, info_fields: Sequence[str]) -> dict[str, tuple[str, str]]:
    """field -> (Number, Type) from the header; undeclared fields read as String."""
    fields = list(header.info) if ALL_INFO in info_fields else list(info_fields)
    specs = {}
    for name in fields:
        meta = header.info.get(name)
        specs[name] = (str(meta.number), meta.type) if meta is not None else (".", "String")
    return specs


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
        raise InputError(path, f"cannot open as VCF/BCF: {cause}") from failure
    return vcf


def _read_vcf(path: Path, info_fields: Sequence[str]) -> Panel:
    header_lines = _count_header_lines(path)
    rows: list[dict[str, Any]] = []
    failure: Exception | None = None
    record_number = 0
    with open(path, "rb") as handle:
        vcf = _open_vcf(handle, path)
        declared = {c: vcf.header.contigs[c].length for c in vcf.header.contigs}
        specs = _info_specs(vcf.header, info_fields)
        undeclared = {n for n in specs if vcf.header.info.get(n) is None}
        declared_info = sorted(vcf.header.info)
        seen_info: set[str] = set()
        with captured_messages() as messages:
            try:
                for record_number, record in enumerate(vcf, start=1):  # noqa: B007
                    where = (
                        f"{path}:line {header_lines + record_number}"
                        if header_lines is not None
                        else f"{path}:record {record_number}"
                    )
                    rows += _record_rows(record, where, specs)
                    seen_info.update(name for name in undeclared if name in record.info)
            except (OSError, ValueError) as err:
                failure = err
            finally:
                vcf.close()
    notes = [f"htslib: {m}" for m in messages.lines("W")]
    if failure is not None:
        next_line = None if header_lines is None else header_lines + record_number + 1
        if next_line is not None and _blank_from(path, next_line):
            notes = ["blank line(s) at the end of the file ignored"]
        else:
            htslib_says = messages.errors() or "; ".join(messages.lines("W")[-2:])
            raise _vcf_error(path, failure, htslib_says, next_line, record_number)
    unknown = [n for n in specs if n in undeclared and n not in seen_info]
    if unknown:
        raise InputError(
            path,
            f"INFO field(s) {unknown} requested in `info_fields` are neither declared in the "
            f"header nor present in any record; declared: {declared_info}",
        )
    return Panel(
        _vcf_frame(rows, list(specs)), path, {k: v for k, v in declared.items() if v}, notes
    )


def _blank_from(path: Path, number: int) -> bool:
    """Whether line `number` and every line after it are blank (a harmless end of file)."""
    try:
        with _open_text(path) as handle:
            return all(not line.strip() for n, line in enumerate(handle, 1) if n >= number)
    except (OSError, EOFError, UnicodeDecodeError):
        return False


def _vcf_frame(rows: list[dict[str, Any]], info_names: list[str]) -> pl.DataFrame:
    schema = {
        "source": pl.Utf8, "chrom": pl.Utf8, "pos": pl.Int64, "ref": pl.Utf8, "alt": pl.Utf8,
        "input_pos": pl.Utf8, "input_ref": pl.Utf8, "input_alt": pl.Utf8, "id": pl.Utf8,
        "qual": pl.Float64, "filter": pl.Utf8, "n_alts_in_record": pl.Int64,
        "alt_index": pl.Int64,
    }  # fmt: skip
    frame = pl.from_dicts(rows, schema_overrides=schema, infer_schema_length=None)
    taken = set(schema)
    renames = {}
    for name in info_names:
        renames[name] = carry_name(name, taken)
        taken.add(renames[name])
    return frame.rename({k: v for k, v in renames.items() if k != v})


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
    shown = "" if text is None else f": {text[:80]!r}"
    return InputError(path, f"malformed VCF record ({cause}){shown}", line)
