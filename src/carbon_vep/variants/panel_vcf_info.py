"""A VCF record's INFO fields as the header declares them: one value for every ALT row
(Number=A to its ALT, Number=R as REF's and this ALT's value, other lists as comma-joined
text, flags as true/false), or, when htslib cannot decode a value as declared, `Undecodable`
so that the reader carries the field as the record's raw text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from carbon_vep.variants.panel_columns import ALL_INFO
from carbon_vep.variants.panel_vcf_lines import LineCursor, TextHeader

_NUMERIC = ("Integer", "Float")


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
class InfoSpec:
    name: str
    number: str  # the header's Number ('1', 'A', 'R', 'G', '.', '2', ...)
    kind: str  # the header's Type (Flag, Integer, Float, String, Character)
    declared: bool
    raw: bool = False  # carried as the record's text (htslib cannot decode it as declared)

    @cached_property
    def text_list(self) -> bool:
        """A declared list of strings, carried as its comma-joined text."""
        return (
            self.declared
            and not self.raw
            and self.kind in ("String", "Character")
            and self.number not in ("0", "1", "A", "R")
        )

    @property
    def dtype(self) -> Any:
        if self.raw or not self.declared:
            return pl.Utf8
        if self.kind == "Flag":
            return pl.Boolean
        if self.number in ("1", "A"):
            return {"Integer": pl.Int64, "Float": pl.Float64}.get(self.kind, pl.Utf8)
        return pl.Utf8  # other lists: their comma-joined text


def info_specs(header: Any, info_fields: Sequence[str], raw: Mapping[str, str]) -> list[InfoSpec]:
    """The requested INFO fields as the header declares them; undeclared ones read as String."""
    fields = list(header.info) if ALL_INFO in info_fields else list(dict.fromkeys(info_fields))
    specs = []
    for name in fields:
        meta = header.info.get(name)
        if meta is None:
            specs.append(InfoSpec(name, ".", "String", declared=False))
        else:
            number = str(meta.number)
            specs.append(InfoSpec(name, number, meta.type, True, name in raw or number == "G"))
    return specs


class Undecodable(Exception):  # noqa: N818 (a signal inside the reader, never user-facing)
    """An INFO field's value cannot be decoded as its header declares it."""

    def __init__(self, spec: InfoSpec, why: str) -> None:
        super().__init__(why)
        self.spec = spec
        self.why = why


def _as_written(value: Any) -> Any:
    """A Float value as the panel wrote it: htslib holds floats as float32, and widening 0.1
    gives 0.10000000149011612 (which `AF = 0.1` in SQL misses); the shortest decimal that
    is the same float32 is what a panel writing up to 7 significant digits wrote."""
    if type(value) is tuple:
        return tuple(None if v is None else float(str(np.float32(v))) for v in value)
    return None if value is None else float(str(np.float32(value)))


def _joined(values: tuple) -> str:
    return ",".join("." if v is None else str(v) for v in values)


class RecordText:
    """The current record's own text, fetched only when a raw INFO value is needed."""

    def __init__(self, path: Path, header: TextHeader | None) -> None:
        self.cursor = LineCursor(path) if header is not None else None
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


def _check_missing(spec: InfoSpec, value: Any, text: RecordText) -> None:
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
        raise Undecodable(spec, f"{raw!r} does not read as {spec.kind}")


def _panel_end(text: RecordText) -> Any:
    """The record's own INFO END: htslib takes it as the record's end (`record.stop`) and hides
    it from `record.info`. A record whose end is the default one (POS + len(REF) - 1) holds END
    only if its text says so (looked up only then: an SNV without END is the common case)."""
    record = text.record
    stop = record.stop
    if stop == record.start + len(record.ref) and text.info("END") is None:
        return None
    return stop


def decode_info(info: Any, spec: InfoSpec, alts: tuple | None, text: RecordText) -> Any:
    """One INFO field of a record: one value for every ALT row, or a list with one per ALT.

    Number=A values go to their ALT's row, Number=R ones keep REF's and this ALT's value;
    other multi-valued fields are carried as their comma-joined text, flags as true/false.
    """
    name = spec.name
    if name == "END" and spec.number == "1" and spec.dtype == pl.Int64:  # decodable Integer
        return _panel_end(text)
    if spec.text_list:  # the common case (ClinVar's fields): a list of strings, joined
        try:
            value = info.get(name)
        except (ValueError, TypeError, KeyError) as err:
            raise Undecodable(spec, str(err)) from err
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
        if name == "END":  # hidden from record.info (htslib's record end): its text
            return text.info(name)
        value = info[name] if name in info else None  # noqa: SIM401
        return _joined(value) if isinstance(value, tuple) else value
    try:
        value = info.get(name)
    except (ValueError, TypeError, KeyError) as err:
        raise Undecodable(spec, str(err)) from err
    numeric = spec.kind in _NUMERIC
    if spec.kind == "Float":
        value = _as_written(value)
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
            raise Undecodable(
                spec, f"{len(value)} value(s) where Number={spec.number} means {expected}"
            )
        if spec.number == "A":
            return list(value) if alts else value[0]
        if alts:
            return [_joined((value[0], v)) for v in value[1:]]
    elif spec.number == "1" and numeric:
        raise Undecodable(spec, f"{len(value)} value(s) where Number=1")
    return _joined(value)
