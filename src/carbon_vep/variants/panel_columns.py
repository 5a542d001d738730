"""What every panel reader gives beside the key: the `input_*` copies of the values as read,
user columns carried through (renamed `panel_<name>` where the pipeline uses the name), whole
positions as integers, the opener of plain or gzipped text files both text readers use, the
finder of the first line that is not UTF-8 (for the errors of both), and `ReadAgain`, a
reader's signal that the caller must start over."""

from __future__ import annotations

import gzip
import io
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep.columns import RESERVED as RESERVED_COLUMNS

INPUT_COLUMNS = ("input_pos", "input_ref", "input_alt")
ALL_INFO = "*"


class ReadAgain(Exception):  # noqa: N818 (a signal to the caller, not a failure)
    """A batch showed that the rows already handed out must be read another way (a VCF's INFO
    field that does not decode as its header declares, now carried as its raw text; a table's
    ALT list or `qual` text): the caller starts over from the first batch (whatever it did
    with the earlier ones is void)."""


def carried_names(
    names: Sequence[str], sources: Mapping[str, str], added: Sequence[str] = ()
) -> dict[str, str]:
    """Old -> new name of every column: mapped sources get their standard name first, then the
    others keep theirs unless the pipeline, a mapped column or a column the reader `added`
    already uses it."""
    renames = {src: std for std, src in sources.items()}
    taken = set(renames.values()) | set(added)
    for name in names:
        if name not in renames:
            renames[name] = carry_name(name, taken)
            taken.add(renames[name])
    return renames


def carry_name(
    name: str, taken: Collection[str], reserved: Collection[str] = RESERVED_COLUMNS
) -> str:
    """The name a carried column gets: itself, or `panel_<name>` when the pipeline uses it
    (`reserved`: the pipeline's column names; results.vcf.gz passes its own INFO keys)."""
    if name not in reserved and name not in taken:
        return name
    renamed = f"panel_{name}"
    while renamed in taken or renamed in reserved:
        renamed = f"panel_{renamed}"
    return renamed


# An integer as written: digits, optionally a sign and a decimal point followed only by zeros
# (`238.0`, as pandas writes an integer column that held a missing value).
_WHOLE_NUMBER = r"^[+-]?[0-9]+(\.0*)?$"


def parse_positions(raw: pl.Expr) -> pl.Expr:
    """Positions as Int64: a whole number written in decimal (`238`, `+238`, `238.0`); anything
    else becomes null (and the row invalid): text, `12.5`, empty, and exponent notation
    (`1.234e+04`, `1e3`), which spreadsheets write after rounding to a few digits, so the
    number read may not be the position meant (never rounded here)."""
    text = raw.cast(pl.Utf8).str.strip_chars()
    digits = text.str.replace(r"\.0*$", "")  # `238.0` -> `238`; sign kept
    whole = text.str.contains(_WHOLE_NUMBER).fill_null(False)
    return pl.when(whole).then(digits.cast(pl.Int64, strict=False)).otherwise(None)


def _gzipped(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


def open_text(path: Path) -> io.TextIOBase:
    """A text file, plain or gzipped, read as text (line ends as written)."""
    raw = gzip.open(path, "rt", newline="") if _gzipped(path) else open(path, newline="")  # noqa: SIM115
    return raw  # type: ignore[return-value]


def open_binary(path: Path) -> Any:
    """A text file, plain or gzipped, read as bytes."""
    return gzip.open(path, "rb") if _gzipped(path) else open(path, "rb")  # noqa: SIM115


def not_utf8(raw: bytes) -> str | None:
    """What is wrong with a line of bytes that is not UTF-8 (None when it is)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        byte = raw[err.start]
        return (
            f"not UTF-8 text (byte 0x{byte:02x} at column {err.start + 1}, e.g. Latin-1 or "
            "Windows-1252); save the file as UTF-8"
        )
    return None


def first_non_utf8_line(path: Path) -> tuple[int, str] | None:
    """(line number, what is wrong) of the first line of a text file that is not UTF-8."""
    with open_binary(path) as handle:
        for number, line in enumerate(handle, start=1):
            problem = not_utf8(line)
            if problem is not None:
                return number, problem
    return None


def utf16_problem(path: Path) -> str | None:
    """Why a text file that starts as UTF-16 text (a UTF-16 byte-order mark, or NUL bytes
    between the characters of its first line) cannot be read; None for other files."""
    with open_binary(path) as handle:
        start = handle.read(64)
    if start[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in start:
        return "the file is UTF-16 text (as Excel's 'Unicode Text' writes); save it as UTF-8"
    return None
