"""Read a panel table: Parquet through polars, TSV/CSV (plain or gzipped) through polars with
the key columns as text, each row citing its file line (`file:line N`, or `file:row N` for
Parquet and for text whose quoted fields span lines). Key columns are found by their usual
spellings (`KEY_ALIASES`) or the config's `columns` map; blank lines are noted and skipped. A row
with more or fewer fields than the header, or a file that is not UTF-8, stops the read with the
line. An ALT list (`T,G`) is split into one row per ALT, as a VCF record is, each citing the
row's line, with `alt_index` and `n_alts_in_record` (added only to tables that hold a list)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep.columns import PANEL_KEY as KEY
from carbon_vep.columns import VCF_RECORD
from carbon_vep.config.run import setting_name
from carbon_vep.errors import InputError
from carbon_vep.variants.panel_columns import (
    carried_names,
    first_non_utf8_line,
    open_text,
    parse_positions,
    utf16_problem,
)

# Header spellings accepted for the key columns of a table (compared case-insensitively,
# without a leading '#'); anything else is mapped with `columns` in the config.
KEY_ALIASES = {
    "chrom": ("chrom", "chr", "chromosome", "contig"),
    "pos": ("pos", "position"),
    "ref": ("ref",),
    "alt": ("alt",),
}
# the columns a table split by ALT gets, as a VCF record's rows have them (columns.VCF_RECORD)
_ALT_COLUMNS = ("n_alts_in_record", "alt_index")
# table file names -> format (panels and suite task files alike); gzip is read transparently
TABLE_SUFFIXES = {
    ".parquet": "parquet",
    ".tsv": "tsv",
    ".tsv.gz": "tsv",
    ".txt": "tsv",
    ".txt.gz": "tsv",
    ".csv": "csv",
    ".csv.gz": "csv",
}


def table_format(path: str | Path) -> str | None:
    """parquet, tsv or csv, from a table file's name (None when the name says none of them)."""
    name = str(path).lower()
    return next((fmt for suffix, fmt in TABLE_SUFFIXES.items() if name.endswith(suffix)), None)


@dataclass(frozen=True)
class TextDialect:
    """How a text table's fields split: at `sep`; with `quoted`, a `"`-quoted field may hold the
    separator, a line end or a doubled `""` (CSV's rule), else a quote is a character."""

    sep: str
    quoted: bool


def text_dialect(path: str | Path, fmt: str) -> TextDialect:
    """A CSV's fields may be quoted. A TSV's quotes are characters (a text column may hold a
    lone `"`), unless every name of its header is quoted: R's `write.table` (quote = TRUE, its
    default) writes text that way, and its `"chr1"` means chr1, as a CSV's does."""
    if fmt == "csv":
        return TextDialect(",", quoted=True)
    return TextDialect("\t", quoted=_header_quoted(Path(path)))


def _header_quoted(path: Path) -> bool:
    try:
        with open_text(path) as handle:
            header = next((x for x in handle if x.strip("\r\n") and not x.startswith("##")), "")
    except (OSError, UnicodeDecodeError, EOFError):  # the read proper says what is wrong
        return False
    names = header.rstrip("\r\n").split("\t")
    return bool(header) and all(len(n) >= 2 and n[0] == n[-1] == '"' for n in names)


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each data line of a text table: after the header (the first line
    that is neither `##` nor empty, as polars finds it), no `##`."""
    with open_text(path) as handle:
        header_seen = False
        for number, line in enumerate(handle, start=1):
            if line.startswith("##"):
                continue
            if header_seen:
                yield number, line
            elif line.strip("\r\n"):  # polars skips empty lines before the header
                header_seen = True


def _listed_data_lines(path: Path) -> list[tuple[int, str]]:
    """`_data_lines` as a list; a line that is not UTF-8 is an error naming it."""
    try:
        return list(_data_lines(path))
    except UnicodeDecodeError as err:
        raise _encoding_error(path) or InputError(path, str(err)) from err


def _encoding_error(path: Path) -> InputError | None:
    """An error naming the first line of a text table that is not UTF-8 (None if none is)."""
    found = first_non_utf8_line(path)
    return None if found is None else InputError(path, found[1], found[0])


def _field_count(line: str, dialect: TextDialect) -> int:
    """Fields in one line as polars splits it."""
    if not dialect.quoted or '"' not in line:
        return line.count(dialect.sep) + 1
    return len(next(csv.reader([line], delimiter=dialect.sep), []))


def _ragged_line(
    lines: Iterable[tuple[int, str]], dialect: TextDialect, n_columns: int
) -> tuple[int, int] | None:
    """(line number, field count) of the first data line with more or fewer fields than the
    header (blank lines aside): polars refuses a long row but fills a short one with nulls,
    which would read as a missing ALT (or REF) instead of the broken row it is."""
    for number, line in lines:
        if line.strip():
            n_fields = _field_count(line, dialect)
            if n_fields != n_columns:
                return number, n_fields
    return None


def _ragged_error(
    path: Path, ragged: tuple[int, int], n_columns: int, dialect: TextDialect
) -> InputError:
    line, n_fields = ragged
    problem = f"{n_fields} fields where the header has {n_columns}"
    if dialect.quoted and dialect.sep == "\t" and n_fields == n_columns + 1:
        # R's write.table writes its row names first, with no name in the header
        problem += " (R's write.table adds the row names: write it with row.names = FALSE)"
    return InputError(path, problem, line)


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
            raise InputError(
                path,
                f"several columns could be {std!r}: {hits}; pick one with "
                f"{setting_name('columns', f'{std}={hits[0]}')}",
            )
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
    """A TSV or CSV (plain or gzipped) as polars reads it: `##` lines are comments, quotes as
    `text_dialect` says; `all_text` reads every column as a string."""
    dialect = text_dialect(path, fmt)
    return pl.read_csv(
        path,
        separator=dialect.sep,
        comment_prefix="##",
        quote_char='"' if dialect.quoted else None,
        infer_schema_length=0 if all_text else None,
        schema_overrides=overrides,
        n_rows=n_rows,
    )


def read_table(path: Path, fmt: str, columns: Mapping[str, str]) -> tuple[pl.DataFrame, list[str]]:
    """A table panel's rows (source, key, input_*, carried columns) and notes on how it was read."""
    utf16 = None if fmt == "parquet" else utf16_problem(path)
    if utf16 is not None:  # polars would read it as a one-column header of NUL-laced text
        raise InputError(path, utf16)
    try:
        if fmt == "parquet":
            found = pl.read_parquet_schema(path)
        else:
            found = read_text_table(path, fmt, n_rows=0).columns
    except (pl.exceptions.PolarsError, OSError) as err:
        raise _read_error(path, fmt, err) from err
    names = list(found)
    sources = _key_sources(names, columns, path)
    try:
        if fmt == "parquet":
            frame = pl.read_parquet(path)
        else:
            overrides = {src: pl.Utf8 for std, src in sources.items() if std in KEY}
            # the text columns of the standard ones read as text (`007` stays `007`)
            texts = [std for std, dtype in _STANDARD.items() if dtype == pl.Utf8]
            mapped = {sources.get(std, std) for std in texts}
            overrides.update({name: pl.Utf8 for name in names if name in mapped})
            frame = read_text_table(path, fmt, overrides)
    except (pl.exceptions.PolarsError, OSError) as err:
        raise _read_error(path, fmt, err, len(names)) from err
    return _standardize_table(frame, path, fmt, sources)


def _read_error(path: Path, fmt: str, err: Exception, n_columns: int | None = None) -> InputError:
    """Why polars could not read a table: a line that is not UTF-8 or (once the header is
    known) has too many fields, named; else polars' own words."""
    if fmt != "parquet" and isinstance(err, pl.exceptions.ComputeError):
        encoding = _encoding_error(path)
        if encoding is not None:
            return encoding
        dialect = text_dialect(path, fmt)
        ragged = None if n_columns is None else _ragged_line(_data_lines(path), dialect, n_columns)
        if ragged:
            return _ragged_error(path, ragged, n_columns or 0, dialect)
    return InputError(path, f"cannot read the {fmt} panel: {err}")


def _standardize_table(
    frame: pl.DataFrame, path: Path, fmt: str, sources: dict[str, str]
) -> tuple[pl.DataFrame, list[str]]:
    notes: list[str] = []
    if fmt == "parquet":
        where = [f"{path}:row {n}" for n in range(1, frame.height + 1)]
    else:
        frame, where = _cite_lines(frame, path, fmt, notes)
    alt_lists = _has_alt_lists(frame[sources["alt"]])
    added = _ALT_COLUMNS if alt_lists else ()
    renames = carried_names(frame.columns, sources, added)
    moved = {k: v for k, v in renames.items() if k != v and v not in sources}
    if moved:
        notes.append(f"columns renamed so the pipeline's own do not overwrite them: {moved}")
    frame = frame.rename(renames)
    frame = frame.with_columns(
        pl.Series("source", where, dtype=pl.Utf8),
        pl.col("chrom").cast(pl.Utf8).str.strip_chars(),
        pl.col("ref").cast(pl.Utf8),
        pl.col("alt").cast(pl.Utf8),
        pl.col("pos").cast(pl.Utf8).alias("input_pos"),
        pl.col("ref").cast(pl.Utf8).alias("input_ref"),
        pl.col("alt").cast(pl.Utf8).alias("input_alt"),
        parse_positions(pl.col("pos")).alias("pos"),
    )
    frame = _standard_dtypes(frame, notes)
    if alt_lists:
        frame = _split_alts(frame)
        notes.append("ALT lists (`T,G`) split into one row per ALT (alt_index, n_alts_in_record)")
    return frame, notes


_STANDARD = {c.name: c.dtype for c in VCF_RECORD if c.name in ("id", "qual", "filter")}


def _standard_dtypes(frame: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """A table's `id`, `qual` and `filter` columns in the dtypes a VCF panel's have (string,
    float64, string; docs/outputs.md), also when empty (a Null column otherwise) or numeric
    (an id of digits). A `qual` holding text other than a number or `.` stays as read."""
    casts = []
    for name, dtype in _STANDARD.items():
        if name not in frame.columns or frame.schema[name] == dtype:
            continue
        column = pl.col(name)
        if dtype == pl.Float64 and frame.schema[name] == pl.Utf8:
            text = column.str.strip_chars()
            number = pl.when(text.is_in(["", "."])).then(None).otherwise(text)
            parsed = frame.select(number.cast(pl.Float64, strict=False)).to_series()
            if parsed.null_count() != frame.select(number.is_null().sum()).item():
                notes.append(f"column {name!r} holds text that is not a number: kept as text")
                continue
            casts.append(parsed.alias(name))
        else:
            casts.append(column.cast(dtype))
    return frame.with_columns(casts) if casts else frame


def _cite_lines(
    frame: pl.DataFrame, path: Path, fmt: str, notes: list[str]
) -> tuple[pl.DataFrame, list[str]]:
    """The rows of a text table that are not blank lines, and where each was read (its line;
    its row when quoted fields span lines). A row with fewer fields than the header stops."""
    lines = _listed_data_lines(path)
    if len(lines) != frame.height:  # quoted fields spanning lines: cite rows instead
        lines = [(n, "?") for n in range(1, frame.height + 1)]
        where = [f"{path}:row {n}" for n, _ in lines]
    else:
        dialect = text_dialect(path, fmt)
        ragged = _ragged_line(lines, dialect, frame.width)
        if ragged:
            raise _ragged_error(path, ragged, frame.width, dialect)
        where = [f"{path}:line {n}" for n, _ in lines]
    blank = [not text.strip() for _, text in lines]  # blank lines are not variants
    if any(blank):
        notes.append(f"{sum(blank)} blank line(s) ignored")
        frame = frame.filter(~pl.Series(blank))
        where = [w for w, is_blank in zip(where, blank, strict=True) if not is_blank]
    return frame, where


def _has_alt_lists(alt: pl.Series) -> bool:
    """Whether some ALT is a comma-separated list of ALTs."""
    return bool(alt.cast(pl.Utf8).str.contains(",", literal=True).any())


def _split_alts(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per ALT of every ALT list, in order, as the VCF reader splits a record: each
    keeps its row's source and other values, `input_alt` is its own ALT as read, and
    `alt_index` / `n_alts_in_record` say which of how many (1 of 1 for a single ALT). Each ALT
    is scored on its own; none shares another's score."""
    listed = pl.col("alt").str.split(",")
    frame = frame.with_columns(
        listed.alias("alt"),
        pl.col("input_alt").str.split(",").alias("input_alt"),
        listed.list.len().fill_null(1).cast(pl.Int64).alias("n_alts_in_record"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
    ).explode(["alt", "input_alt"])  # both the same text: same lengths, a null stays one row
    alt_index = pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("_row")
    return frame.with_columns(alt_index.alias("alt_index")).drop("_row")
