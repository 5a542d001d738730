"""A results VCF's records as text, a batch at a time, as htslib writes them.

pysam's writer took ~30 µs a record (a record built, its INFO keys looked up in the header,
formatted by htslib): ~90% of export-vcf at ClinVar's size. `RecordLines` formats a batch's
columns with polars instead, each field as htslib's `vcf_format` writes it (checked against
pysam's own text, record by record, in tests/report/test_vcf_lines.py):
- a Float (QUAL, an INFO value) stored as a 32-bit float and written `%g` (htslib's `kputd`);
- an Integer as its digits; a Flag as its key alone; a String as the text;
- INFO fields in the declared order, unset ones left out, none: `.`;
- FILTER as htslib keeps a record's filters (a later `PASS` replaces the others, a name given
  twice is kept once): each distinct text of the batch put through a pysam record once.
A row whose record follows rules of htslib the columns do not cover is formatted by htslib
itself, `str()` of the pysam record built as before (`pysam_line`): a symbolic ALT or a
carried END (htslib writes the record's END), an Integer outside what BCF stores (pysam
refuses it, or htslib writes a reserved value), an INFO value of another type than its
declaration (`info_value`, a value at a time).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

_INFO_UNSAFE = str.maketrans({" ": "_", ";": "|", "=": ":", "\t": "_", ",": "|"})
_INFO_LIST_UNSAFE = str.maketrans({" ": "_", ";": "|", "=": ":", "\t": "_"})  # commas separate
_ID_UNSAFE = str.maketrans({" ": "_", "\t": "_", ",": "_"})
_FILTER_UNSAFE = str.maketrans({" ": "_", "\t": "_", ",": "_", ";": "_"})
# what BCF stores of an Integer: int32 less the 8 values it reserves (missing, end of vector...)
_INT_MIN, _INT_MAX = -(2**31) + 8, 2**31 - 1
FILTER_CACHE = 10_000  # distinct FILTER texts kept formatted (a panel has a few)


def info_value(value: object, info: Mapping[str, str]) -> object:
    """A value as its INFO declaration takes it (None: not written)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if info["Type"] == "Flag":
        return bool(value)
    if info["Type"] in ("String", "Character"):
        unsafe = _INFO_LIST_UNSAFE if info["Number"] == "." else _INFO_UNSAFE
        return str(value).translate(unsafe) or None
    return value


def info_expr(column: str, dtype: pl.DataType, info: Mapping[str, str]) -> pl.Expr | None:
    """`info_value` of a whole column, where polars computes it the same (None: per value)."""
    col = pl.col(column)
    if info["Type"] == "Flag" and dtype == pl.Boolean:
        return pl.when(col).then(True)  # False and null: not written
    if info["Type"] in ("String", "Character") and dtype == pl.Utf8:
        unsafe = _INFO_LIST_UNSAFE if info["Number"] == "." else _INFO_UNSAFE
        text = col.str.replace_many([chr(k) for k in unsafe], list(unsafe.values()))
        return pl.when(text != "").then(text)
    if info["Type"] == "Float" and dtype.is_float():
        return col.fill_nan(None)
    if info["Type"] == "Integer" and dtype.is_integer():
        return col
    return None


def row_filters(value: object) -> list[str]:
    """A row's FILTER values (`;`-joined in scores.parquet; null or `.`: none)."""
    if value is None or str(value) in ("", "."):
        return []
    return [f.strip().translate(_FILTER_UNSAFE) for f in str(value).split(";") if f.strip()]


class RecordLines:
    """The text of a results VCF's records (`header`: the pysam header written above them;
    `infos`: column -> its INFO declaration, in the order written)."""

    def __init__(self, header: Any, infos: Mapping[str, Mapping[str, str]]) -> None:
        self.header = header
        self.end_column = next((c for c, info in infos.items() if info["ID"] == "END"), None)
        self.written = [(c, info) for c, info in infos.items() if info["ID"] != "END"]
        self._filters: dict[object, str] = {}
        self.rows_by_htslib = 0  # rows formatted by htslib so far (`pysam_line`)

    @property
    def written_columns(self) -> list[str]:
        """The INFO columns written, in order (END aside)."""
        return [column for column, _ in self.written]

    def __call__(self, batch: pl.DataFrame) -> bytes:
        """The batch's records, a line each, in its order (`_contig`, `_pos`, `_ref`, `_alt`,
        the written columns, `id`, `qual`, `filter` where the table has them), as UTF-8."""
        exprs = {c: info_expr(c, batch.schema[c], info) for c, info in self.written}
        values = batch.select(
            "_contig",
            "_pos",
            "_ref",
            "_alt",
            pl.col(self.end_column).alias("_end")
            if self.end_column
            else pl.lit(None).alias("_end"),
            pl.col("id") if "id" in batch.columns else pl.lit(None, pl.Utf8).alias("id"),
            pl.col("qual") if "qual" in batch.columns else pl.lit(None, pl.Float64).alias("qual"),
            pl.col("filter") if "filter" in batch.columns else pl.lit(None).alias("filter"),
            *(
                (pl.col(c) if e is None else e).alias(f"_info{i}")
                for i, (c, e) in enumerate(exprs.items())
            ),
        )
        by_htslib = self._by_htslib(values, list(exprs.values()))
        lines = values.select(self._line(values, list(exprs.values()))).to_series()
        rows = by_htslib.arg_true()
        if rows.len():
            theirs = [pysam_line(self.header, values.row(r), self.written) for r in rows]
            lines = lines.scatter(rows, [line.removesuffix("\n") for line in theirs])
            self.rows_by_htslib += rows.len()
        text = io.BytesIO()  # polars writes the lines as they are: no Python string a line
        lines.to_frame().write_csv(text, include_header=False, quote_style="never")
        return text.getvalue()

    def _by_htslib(self, values: pl.DataFrame, exprs: Sequence[pl.Expr | None]) -> pl.Series:
        """The rows htslib formats itself (`pysam_line`)."""
        rule = pl.col("_alt").str.starts_with("<") | pl.col("_end").is_not_null()
        if not (values.schema["id"].is_integer() or values.schema["id"] in (pl.Utf8, pl.Null)):
            rule |= pl.col("id").is_not_null()  # written as Python's str() writes it
        for i, ((_, info), expr) in enumerate(zip(self.written, exprs, strict=True)):
            value = pl.col(f"_info{i}")
            if expr is None:
                rule |= value.is_not_null()
            elif info["Type"] == "Integer":
                rule |= ~value.is_between(_INT_MIN, _INT_MAX).fill_null(True)
        return values.select(rule.fill_null(False)).to_series()

    def _line(self, values: pl.DataFrame, exprs: Sequence[pl.Expr | None]) -> pl.Expr:
        """Each row's line, without its newline (wrong on the rows htslib formats)."""
        fields = []
        for i, ((_, info), expr) in enumerate(zip(self.written, exprs, strict=True)):
            value = values[f"_info{i}"]
            key = info["ID"]
            if expr is None:  # a value of another type: its rows are htslib's
                continue
            if info["Type"] == "Flag":
                fields.append(pl.when(value.is_not_null()).then(pl.lit(key)))
                continue
            if value.dtype.is_float():
                text = pl.Series(_floats_as_htslib(value), dtype=pl.Utf8)
            else:
                text = value.cast(pl.Utf8)
            fields.append(pl.lit(f"{key}=") + pl.lit(text))
        info_text = (
            pl.concat_str(fields, separator=";", ignore_nulls=True) if fields else pl.lit("")
        )
        identifier = pl.col("id").cast(pl.Utf8)
        qual = pl.Series(_floats_as_htslib(values["qual"].cast(pl.Float64)), dtype=pl.Utf8)
        line = pl.concat_str(
            pl.col("_contig"),
            pl.col("_pos").cast(pl.Utf8),
            pl.when(identifier.is_in([".", ""]) | identifier.is_null())
            .then(pl.lit("."))
            .otherwise(
                identifier.str.replace_many([chr(k) for k in _ID_UNSAFE], list(_ID_UNSAFE.values()))
            ),
            pl.col("_ref"),
            pl.col("_alt"),
            pl.lit(qual).fill_null("."),
            pl.lit(self._filter_texts(values["filter"])),
            pl.when(info_text == "").then(pl.lit(".")).otherwise(info_text),
            separator="\t",
        )
        return line.alias("line")

    def _filter_texts(self, filters: pl.Series) -> pl.Series:
        """Each row's FILTER field: each distinct text of the batch through a pysam record
        (once for the run's first `FILTER_CACHE` texts: a panel has a few)."""
        filters = filters.cast(pl.Utf8)
        texts = {}
        for value in filters.unique().to_list():
            text = self._filters.get(value)
            if text is None:
                text = str(self.header.new_record(filter=row_filters(value))).split("\t")[6]
                if len(self._filters) < FILTER_CACHE:
                    self._filters[value] = text
            texts[value] = text
        unset = texts.pop(None, ".")
        return filters.replace_strict(texts, default=None, return_dtype=pl.Utf8).fill_null(unset)


def _floats_as_htslib(values: pl.Series) -> list[str | None]:
    """Each value as htslib writes a Float (a 32-bit float, `%g`); NaN and null: None."""
    as_float32 = values.cast(pl.Float32).cast(pl.Float64).fill_nan(None)
    return [None if v is None else f"{v:g}" for v in as_float32.to_list()]


def pysam_line(header: Any, row: tuple, written: Sequence[tuple[str, Mapping[str, str]]]) -> str:
    """One record's line as htslib writes it, through a pysam record (`row`: `_contig`, `_pos`,
    `_ref`, `_alt`, `_end`, `id`, `qual`, `filter`, then the written INFO columns' values)."""
    contig, pos, ref, alt, end, id_, qual, filter_, *info = row
    start = pos - 1
    record = header.new_record(
        contig=contig,
        start=start,
        stop=start + len(ref) if end is None else max(end, start + 1),
        alleles=(ref, alt),
        id=None if id_ in (None, ".", "") else str(id_).translate(_ID_UNSAFE),
        qual=None if qual is None or math.isnan(qual) else qual,
        filter=row_filters(filter_),
        info={
            declared["ID"]: v
            for (_, declared), value in zip(written, info, strict=True)
            if (v := info_value(value, declared)) is not None and v is not False
        },
    )
    return str(record)
