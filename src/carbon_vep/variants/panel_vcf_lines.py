"""A text VCF as lines: the header's layout (record N is on line header + N), lines looked up by
number for messages, and the errors that name the file, the line and what is wrong with it
(malformed records, space-separated fields, blank lines, text that is not UTF-8). Blank lines
inside the header are lines like any other: htslib skips them, and they count."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep.errors import InputError
from carbon_vep.variants.panel_columns import not_utf8, open_binary, open_text

_NO_WHITESPACE = {"id": "ID", "ref": "REF", "alt": "ALT", "filter": "FILTER"}  # VCF forbids it
_UNDEFINED_TAG = re.compile(r"^(INFO|FILTER) '(.*)' at (\S+):(\d+) is not defined")


@dataclass(frozen=True)
class TextHeader:
    """What a text VCF's header says about its layout (None is used for BCF)."""

    n_lines: int  # lines up to the #CHROM line (blank ones too): record N is on line n_lines + N
    chrom_line: str  # the #CHROM line as written

    @property
    def empty_format(self) -> bool:
        """`#CHROM ... INFO FORMAT` without a sample: other tools read it, htslib refuses it."""
        columns = self.chrom_line.rstrip("\r\n\t ").split("\t")
        return len(columns) == 9 and columns[-1] == "FORMAT"


def text_header(path: Path) -> TextHeader | None:
    """The header layout of a text VCF (plain or gzipped), so rows can cite their file line;
    None for BCF or a file that cannot be read (pysam reports the real error)."""
    try:
        with open_binary(path) as handle:
            if handle.read(3) == b"BCF":
                return None  # binary: rows cite their record number instead
            handle.seek(0)
            count, chrom_line = 0, ""
            for line in handle:
                # htslib skips a blank line before #CHROM; one after it is a (blank) record
                blank_in_header = not chrom_line and not line.strip()
                if not line.startswith(b"#") and not blank_in_header:
                    break
                count += 1
                if line.startswith(b"#CHROM"):
                    chrom_line = line.decode(errors="replace")
            return TextHeader(count, chrom_line)
    except (OSError, EOFError):
        return None


def text_line(path: Path, number: int) -> str | None:
    """Line `number` (1-based) of a text VCF, for error messages."""
    try:
        with open_text(path) as handle:
            for current, line in enumerate(handle, start=1):
                if current == number:
                    return line.rstrip("\r\n")
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    return None


def header_line_number(path: Path, text: str) -> int | None:
    """The number of the header line that reads `text` (htslib quotes the line it refuses)."""
    wanted = text.rstrip("\r\n")
    try:
        with open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                if line.rstrip("\r\n") == wanted:
                    return number
                if not line.startswith("#") and line.strip():  # blank header lines count
                    return None
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    return None


class LineCursor:
    """Lines of a text VCF by number, read forward once (the numbers asked never decrease):
    the record's own text, for INFO values htslib cannot decode."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle: Any = None
        self.number = 0
        self.text = ""

    def line(self, number: int) -> str:
        if self.handle is None:
            self.handle = open_text(self.path)
        while self.number < number:
            self.text = self.handle.readline()
            self.number += 1
        return self.text.rstrip("\r\n")

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def first_at(header: TextHeader | None, record_number: int) -> str:
    if header is None:
        return f"first at record {record_number}"
    return f"first at line {header.n_lines + record_number}"


def blank_from(path: Path, number: int) -> bool:
    """Whether line `number` exists and it and every line after it are blank (a harmless end
    of file). A failure past the last line is not a blank line: it is reported."""
    try:
        with open_text(path) as handle:
            rest = [line for n, line in enumerate(handle, 1) if n >= number]
    except (OSError, EOFError, UnicodeDecodeError):
        return False
    return bool(rest) and all(not line.strip() for line in rest)


def refuse_space_separated(
    path: Path, header: TextHeader | None, frame: pl.DataFrame, warnings: Sequence[str]
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
    text = text_line(path, line)
    shown = "" if text is None else f": {text[:80]!r}"
    raise InputError(path, f"malformed VCF record ({cause}){shown}", line)


def line_not_utf8(path: Path, number: int) -> str | None:
    """What is wrong with line `number` of a text VCF when it is not UTF-8 (None if it is)."""
    try:
        with open_binary(path) as handle:
            for current, line in enumerate(handle, start=1):
                if current == number:
                    return not_utf8(line)
    except (OSError, EOFError):
        return None
    return None


def vcf_error(
    path: Path, err: Exception, htslib_says: str, line: int | None, n_read: int
) -> InputError:
    """An error naming the file, the failing line, what htslib found wrong and the line."""
    cause = htslib_says or str(err)
    if line is None:
        return InputError(path, f"cannot read record {n_read + 1} ({cause})")
    encoding = line_not_utf8(path, line)
    if encoding is not None:  # text_line cannot decode it either: say so, not "file ends"
        return InputError(path, encoding, line)
    text = text_line(path, line)
    if text is not None and not text.strip():
        cause = "blank line between records"
    elif text is not None and "\t" not in text:
        cause = f"{cause}; the fields are not tab-separated"
    elif text is None:
        cause = f"{cause}; the file ends before line {line}"
    shown = "" if text is None else f": {text[:80]!r}"
    return InputError(path, f"malformed VCF record ({cause}){shown}", line)
