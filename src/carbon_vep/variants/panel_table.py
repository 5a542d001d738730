"""Read a panel table a batch of rows at a time: Parquet through pyarrow, TSV/CSV (plain or
gzipped) as records handed to polars with the key columns as text (`text_table`). Each row
cites where it was read: `file:line N` (the line its record starts on; a quoted field may span
lines), `file:row N` for Parquet. Key columns are found by their usual spellings
(`KEY_ALIASES`) or the config's `columns` map; blank lines are noted and skipped. A record
with more or fewer fields than the header, or a line that is not UTF-8, stops the read with the
line. An ALT list (`T,G`) is split into one row per ALT, as a VCF record is, each citing the
row's line, with `alt_index` and `n_alts_in_record` (added only to tables that hold a list).

What every row gets depends on the whole table (an ALT list anywhere adds the split's columns;
a `qual` holding text stays text): learned batch by batch in `TableChoices`, and a choice
learned after a batch was handed out makes the caller start over (`ReadAgain`), as a VCF's
INFO field read as text does. So a table of any length is read in bounded memory."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from carbon_vep.columns import PANEL_KEY as KEY
from carbon_vep.columns import VCF_RECORD
from carbon_vep.config.run import setting_name
from carbon_vep.errors import InputError
from carbon_vep.variants.panel_columns import (
    ReadAgain,
    carried_names,
    first_non_utf8_line,
    not_utf8,
    parse_positions,
    utf16_problem,
)
from carbon_vep.variants.text_table import (
    TextDialect,
    field_count,
    ragged_problem,
    read_text_table,
    text_dialect,
    text_records,
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
_INFERRED_ROWS = 100  # the rows a text table's column dtypes are inferred from, as polars does


@dataclass
class TableChoices:
    """What the rows of a table need, learned from every row: `alt_lists`, some ALT is a list
    (every row gets `alt_index` / `n_alts_in_record`); `qual_text`, some `qual` is text that is
    not a number (the column stays text). Kept by the reader across a start over."""

    alt_lists: bool = False
    qual_text: bool = False


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


def table_batches(
    path: Path,
    fmt: str,
    columns: Mapping[str, str],
    choices: TableChoices,
    notes: list[str],
    batch_rows: int,
) -> Iterator[pl.DataFrame]:
    """A table panel's rows (source, key, input_*, carried columns), `batch_rows` rows of the
    file at a time; how it was read is added to `notes` once the last batch is out. Raises
    `ReadAgain` when a batch teaches `choices` something the batches handed out lack."""
    utf16 = None if fmt == "parquet" else utf16_problem(path)
    if utf16 is not None:  # polars would read it as a one-column header of NUL-laced text
        raise InputError(path, utf16)
    try:
        if fmt == "parquet":
            names = list(pl.read_parquet_schema(path))
        else:
            names = read_text_table(path, fmt, n_rows=0).columns
    except (pl.exceptions.PolarsError, OSError) as err:
        raise _read_error(path, fmt, err) from err
    sources = _key_sources(names, columns, path)
    if fmt == "parquet":
        raw: Iterator[tuple[pl.DataFrame, pl.Series, int]] = _parquet_rows(path, batch_rows)
    else:
        raw = _text_rows(path, fmt, names, _text_overrides(names, sources), batch_rows)
    qual = next((old for old, new in carried_names(names, sources).items() if new == "qual"), "")
    n_blank, handed_out = 0, False
    for frame, where, blank in raw:
        n_blank += blank
        learned = _learn(frame, sources["alt"], qual, choices)
        if learned and handed_out:
            raise ReadAgain(learned)
        yield _standardize(frame, where, sources, choices)
        handed_out = True
    notes.extend(_notes(names, sources, choices, n_blank))


def _text_overrides(names: Sequence[str], sources: Mapping[str, str]) -> dict[str, pl.DataType]:
    """The columns a text table reads as text: the key (`007` stays `007`) and the text
    columns of the standard ones."""
    overrides = {src: pl.Utf8 for std, src in sources.items() if std in KEY}
    texts = [std for std, dtype in _STANDARD.items() if dtype == pl.Utf8]
    mapped = {sources.get(std, std) for std in texts}
    overrides.update({name: pl.Utf8 for name in names if name in mapped})
    return overrides


def _parquet_rows(path: Path, batch_rows: int) -> Iterator[tuple[pl.DataFrame, pl.Series, int]]:
    """A Parquet table's rows, `batch_rows` at a time, each batch with its `file:row N` (and
    no blank line)."""
    first = 1
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows):
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            rows = pl.int_range(first, first + frame.height, eager=True)
            yield frame, _cited(path, "row", rows), 0
            first += frame.height
    except (OSError, pa.ArrowException) as err:
        raise InputError(path, f"cannot read the parquet panel: {err}") from err


def _text_rows(
    path: Path,
    fmt: str,
    names: Sequence[str],
    overrides: Mapping[str, pl.DataType],
    batch_rows: int,
) -> Iterator[tuple[pl.DataFrame, pl.Series, int]]:
    """A text table's rows, `batch_rows` records at a time, each batch with its `file:line N`
    and how many blank lines it dropped (polars reads one as a row of nulls). The dtypes are
    inferred once, from the first rows, as polars infers them from a whole file; a record that
    is not UTF-8, or has more or fewer fields than the header, stops the read naming its
    line."""
    dialect = text_dialect(path, fmt)
    records = _readable(path, text_records(path, dialect.quoted))
    header = next(records)[1]
    checked = (  # (line, record, whether blank)
        (number, record, _blank_or_refused(path, number, record, dialect, len(names)))
        for number, record in records
    )
    first = list(islice(checked, _INFERRED_ROWS))
    schema = _parsed(path, fmt, header, first, dialect, overrides=overrides).schema
    rest = chain(first, checked)
    for batch in iter(lambda: list(islice(rest, batch_rows)), []):
        frame = _parsed(path, fmt, header, batch, dialect, schema=schema)
        if frame.height != len(batch):  # the records split as polars splits them: never seen
            raise InputError(
                path,
                f"{frame.height} rows read from the {len(batch)} records of lines "
                f"{batch[0][0]}-{batch[-1][0]}: a quote left open?",
                batch[0][0],
            )
        kept = ~pl.Series([blank for *_, blank in batch])  # blank lines are not variants
        lines = pl.Series([number for number, *_ in batch]).filter(kept)
        yield frame.filter(kept), _cited(path, "line", lines), len(batch) - len(lines)


def _readable(path: Path, records: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
    """`records`, a file that cannot be read to its end (a gzip cut short) named."""
    try:
        yield from records
    except (OSError, EOFError) as err:
        raise InputError(path, f"cannot read the table to its end: {err}") from err


def _parsed(
    path: Path,
    fmt: str,
    header: bytes,
    records: Sequence[tuple[int, bytes, bool]],
    dialect: TextDialect,
    **dtypes: object,
) -> pl.DataFrame:
    """Records (after the header; each with its line) as polars reads them."""
    text = header + b"".join(record for _, record, _ in records)
    try:
        return read_text_table(text, fmt, dialect=dialect, **dtypes)  # type: ignore[arg-type]
    except pl.exceptions.PolarsError as err:
        where = f" (the rows from line {records[0][0]})" if records else ""
        raise InputError(path, f"cannot read the {fmt} panel{where}: {err}") from err


def _blank_or_refused(
    path: Path, number: int, record: bytes, dialect: TextDialect, n_columns: int
) -> bool:
    """Whether a record is a blank line; a record polars would misread stops the read: not
    UTF-8, or more or fewer fields than the header (polars fills a short one with nulls,
    which would read as a missing ALT instead of the broken row it is)."""
    try:
        text = record.decode("utf-8")
    except UnicodeDecodeError:
        lines = record.split(b"\n")
        line = next(i for i, raw in enumerate(lines) if not_utf8(raw))
        raise InputError(path, not_utf8(lines[line]) or "", number + line) from None
    if not text.strip():
        return True
    n_fields = field_count(text, dialect)
    if n_fields != n_columns:
        raise InputError(path, ragged_problem(n_fields, n_columns, dialect), number)
    return False


def _cited(path: Path, unit: str, numbers: pl.Series) -> pl.Series:
    """`file:line N` (or `file:row N`) for each number."""
    cited = pl.format("{}:{} {}", pl.lit(str(path)), pl.lit(unit), pl.lit(numbers))
    return pl.select(cited.alias("source")).to_series()


def _read_error(path: Path, fmt: str, err: Exception) -> InputError:
    """Why polars could not read a table's header: a line that is not UTF-8, named; else
    polars' own words."""
    if fmt != "parquet" and isinstance(err, pl.exceptions.ComputeError):
        encoding = _encoding_error(path)
        if encoding is not None:
            return encoding
    return InputError(path, f"cannot read the {fmt} panel: {err}")


def _encoding_error(path: Path) -> InputError | None:
    """An error naming the first line of a text table that is not UTF-8 (None if none is)."""
    found = first_non_utf8_line(path)
    return None if found is None else InputError(path, found[1], found[0])


def _learn(frame: pl.DataFrame, alt: str, qual: str, choices: TableChoices) -> str:
    """What this batch (columns as in the file; `alt` and `qual` name those that become the
    panel's) teaches `choices`: what it learned, "" for nothing."""
    learned = ""
    if not choices.alt_lists and _has_alt_lists(frame[alt]):
        choices.alt_lists, learned = True, "an ALT list"
    if not choices.qual_text and qual and _text_not_number(frame[qual]):
        choices.qual_text, learned = True, "a qual that is text"
    return learned


def _text_not_number(values: pl.Series) -> bool:
    """Whether a text column holds a value other than a number, `.` or empty."""
    if values.dtype != pl.Utf8:
        return False
    text = values.str.strip_chars()
    given = text.is_not_null() & ~text.is_in(["", "."])
    return bool((given & text.cast(pl.Float64, strict=False).is_null()).any())


def _standardize(
    frame: pl.DataFrame, where: pl.Series, sources: dict[str, str], choices: TableChoices
) -> pl.DataFrame:
    added = _ALT_COLUMNS if choices.alt_lists else ()
    frame = frame.rename(carried_names(frame.columns, sources, added))
    frame = frame.with_columns(
        where.alias("source"),
        pl.col("chrom").cast(pl.Utf8).str.strip_chars(),
        pl.col("ref").cast(pl.Utf8),
        pl.col("alt").cast(pl.Utf8),
        pl.col("pos").cast(pl.Utf8).alias("input_pos"),
        pl.col("ref").cast(pl.Utf8).alias("input_ref"),
        pl.col("alt").cast(pl.Utf8).alias("input_alt"),
        parse_positions(pl.col("pos")).alias("pos"),
    )
    frame = _standard_dtypes(frame, choices)
    return _split_alts(frame) if choices.alt_lists else frame


def _notes(
    names: Sequence[str], sources: dict[str, str], choices: TableChoices, n_blank: int
) -> list[str]:
    """How the table was read, for the summary."""
    notes = [f"{n_blank} blank line(s) ignored"] if n_blank else []
    added = _ALT_COLUMNS if choices.alt_lists else ()
    renames = carried_names(names, sources, added)
    moved = {k: v for k, v in renames.items() if k != v and v not in sources}
    if moved:
        notes.append(f"columns renamed so the pipeline's own do not overwrite them: {moved}")
    if choices.qual_text:
        notes.append("column 'qual' holds text that is not a number: kept as text")
    if choices.alt_lists:
        notes.append("ALT lists (`T,G`) split into one row per ALT (alt_index, n_alts_in_record)")
    return notes


_STANDARD = {c.name: c.dtype for c in VCF_RECORD if c.name in ("id", "qual", "filter")}


def _standard_dtypes(frame: pl.DataFrame, choices: TableChoices) -> pl.DataFrame:
    """A table's `id`, `qual` and `filter` columns in the dtypes a VCF panel's have (string,
    float64, string; docs/outputs.md), also when empty (a Null column otherwise) or numeric
    (an id of digits). A `qual` holding text other than a number or `.` (`choices.qual_text`,
    anywhere in the table) stays as read."""
    casts = []
    for name, dtype in _STANDARD.items():
        if name not in frame.columns or frame.schema[name] == dtype:
            continue
        column = pl.col(name)
        if dtype == pl.Float64 and frame.schema[name] == pl.Utf8:
            if choices.qual_text:
                continue
            text = column.str.strip_chars()
            number = pl.when(text.is_in(["", "."])).then(None).otherwise(text)
            casts.append(number.cast(pl.Float64, strict=False).alias(name))
        else:
            casts.append(column.cast(dtype))
    return frame.with_columns(casts) if casts else frame


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
