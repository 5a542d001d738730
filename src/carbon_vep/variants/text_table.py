"""Text tables (TSV / CSV, plain or gzipped) as polars reads them, and as records: a table's
file name -> format, how its fields split (`text_dialect`), the whole file through polars
(`read_text_table`), and its records one at a time with the line each starts on
(`text_records`), which the panel reader hands to polars a batch at a time. Records follow
polars' rules: `##` lines are comments, blank lines before the header are skipped, a blank
line after it is a record (of nulls), and a quoted field may span lines."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep.variants.panel_columns import open_binary, open_text

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


def read_text_table(
    path: str | Path | bytes,
    fmt: str,
    overrides: Mapping[str, Any] | None = None,
    n_rows: int | None = None,
    all_text: bool = False,
    dialect: TextDialect | None = None,
    schema: pl.Schema | None = None,
) -> pl.DataFrame:
    """A TSV or CSV (plain or gzipped; or its bytes, with their `dialect`) as polars reads it:
    `##` lines are comments, quotes as `text_dialect` says; `all_text` reads every column as a
    string, `schema` gives every column's dtype."""
    if dialect is None:
        dialect = text_dialect(path, fmt)  # type: ignore[arg-type]
    return pl.read_csv(
        path,
        separator=dialect.sep,
        comment_prefix="##",
        quote_char='"' if dialect.quoted else None,
        infer_schema_length=0 if all_text else 100,
        schema_overrides=overrides,
        schema=schema,
        n_rows=n_rows,
    )


def text_records(path: Path, quoted: bool) -> Iterator[tuple[int, bytes]]:
    """(first line number, bytes) of each record of a text table, the header first, one record
    in memory at a time: lines end at `\\n` (kept); `##` lines and blank lines before the
    header are skipped, a line starting `##` outside a quoted field is a comment, a blank line
    after the header is a record; with `quoted` (CSV, a quoted TSV), a record goes on until
    its quotes are closed (a `""` inside a quoted field leaves them open)."""
    header_seen, record, first = False, b"", 0
    with open_binary(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not record:  # the line starts a record (or the header, or a comment)
                if line.startswith(b"##") or not (header_seen or line.strip(b"\r\n")):
                    continue
                header_seen, first = True, number
            record += line
            if not quoted or record.count(b'"') % 2 == 0:
                yield first, record
                record = b""
    if record:  # a quote never closed: the record runs to the end, as polars reads it
        yield first, record


def field_count(record: str, dialect: TextDialect) -> int:
    """Fields in one record as polars splits it."""
    if not dialect.quoted or '"' not in record:
        return record.count(dialect.sep) + 1
    rows = csv.reader(record.splitlines(keepends=True), delimiter=dialect.sep)
    return len(next(rows, []))


def ragged_problem(n_fields: int, n_columns: int, dialect: TextDialect) -> str:
    """What is wrong with a record of `n_fields` under a header of `n_columns`: polars refuses
    a long one but fills a short one with nulls, which would read as a missing ALT (or REF)
    instead of the broken row it is."""
    problem = f"{n_fields} fields where the header has {n_columns}"
    if dialect.quoted and dialect.sep == "\t" and n_fields == n_columns + 1:
        # R's write.table writes its row names first, with no name in the header
        problem += " (R's write.table adds the row names: write it with row.names = FALSE)"
    return problem
