"""Read a panel table: Parquet through polars, TSV/CSV (plain or gzipped) through polars with
the key columns as text, each row citing its file line (`file:line N`, or `file:row N` for
Parquet and for text whose quoted fields span lines). Key columns are found by their usual
spellings (`KEY_ALIASES`) or the config's `columns` map; blank lines are noted and skipped."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep.columns import PANEL_KEY as KEY
from carbon_vep.config.run import setting_name
from carbon_vep.errors import InputError
from carbon_vep.variants.panel_columns import carried_names, open_text, parse_positions

# Header spellings accepted for the key columns of a table (compared case-insensitively,
# without a leading '#'); anything else is mapped with `columns` in the config.
KEY_ALIASES = {
    "chrom": ("chrom", "chr", "chromosome", "contig"),
    "pos": ("pos", "position"),
    "ref": ("ref",),
    "alt": ("alt",),
}
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


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each data line of a text table: after the header, no `##`."""
    with open_text(path) as handle:
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


def read_table(path: Path, fmt: str, columns: Mapping[str, str]) -> tuple[pl.DataFrame, list[str]]:
    """A table panel's rows (source, key, input_*, carried columns) and notes on how it was read."""
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


def _standardize_table(
    frame: pl.DataFrame, path: Path, fmt: str, sources: dict[str, str]
) -> tuple[pl.DataFrame, list[str]]:
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
    renames = carried_names(frame.columns, sources)
    moved = {k: v for k, v in renames.items() if k != v and v not in sources}
    if moved:
        notes.append(f"columns renamed so the pipeline's own do not overwrite them: {moved}")
    frame = frame.rename(renames)
    return frame.with_columns(
        pl.Series("source", where, dtype=pl.Utf8),
        pl.col("chrom").cast(pl.Utf8).str.strip_chars(),
        parse_positions(pl.col("pos")).alias("pos"),
        pl.col("ref").cast(pl.Utf8),
        pl.col("alt").cast(pl.Utf8),
        pl.col("pos").cast(pl.Utf8).alias("input_pos"),
        pl.col("ref").cast(pl.Utf8).alias("input_ref"),
        pl.col("alt").cast(pl.Utf8).alias("input_alt"),
    ), notes
