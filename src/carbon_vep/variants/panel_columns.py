"""What every panel reader gives beside the key: the `input_*` copies of the values as read,
user columns carried through (renamed `panel_<name>` where the pipeline uses the name), whole
positions as integers, and the opener of plain or gzipped text files both text readers use."""

from __future__ import annotations

import gzip
import io
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from carbon_vep.columns import RESERVED as RESERVED_COLUMNS

INPUT_COLUMNS = ("input_pos", "input_ref", "input_alt")
ALL_INFO = "*"


def carried_names(names: Sequence[str], sources: Mapping[str, str]) -> dict[str, str]:
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


def open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    raw = gzip.open(path, "rt", newline="") if compressed else open(path, newline="")  # noqa: SIM115
    return raw  # type: ignore[return-value]
