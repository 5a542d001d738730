"""Markdown tables, one way for every page the package writes (reports, summaries, generated
documentation, benchmark results): a header row, the separator, a row per record. Cells arrive
formatted; a `|` or a newline inside one is escaped so it cannot break the table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def cell(value: object) -> str:
    """`value` as text safe inside a table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """The table's lines joined (no trailing newline)."""
    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in rows]
    return "\n".join(lines)
