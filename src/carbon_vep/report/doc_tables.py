"""The README's tables, generated from their one definition (columns.py, recipes.py).

Each table sits in README.md between `<!-- generated: NAME -->` and `<!-- end: NAME -->`;
`carbon-vep readme-tables --readme README.md` rewrites them and a test fails when they are
stale, so the README cannot drift from the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from carbon_vep import columns
from carbon_vep.config.recipes import NORMALIZATIONS, RECIPES


def _normalizations() -> str:
    published = {}
    for recipe in RECIPES.values():
        published.setdefault(recipe.published_normalization, []).append(recipe.name)
    lines = ["| option | meaning | published for |", "|---|---|---|"]
    lines += [
        f"| `{name}` | {text} | {', '.join(published.get(name, [])) or '—'} |"
        for name, text in NORMALIZATIONS.items()
    ]
    return "\n".join(lines)


def _recipes() -> str:
    lines = ["| recipe | what it scores | `window_bp` (default) |", "|---|---|---|"]
    lines += [
        f"| `{r.name}` | {r.summary} | {r.window_meaning}"
        + (f" ({r.default_window_bp:,}) |" if r.default_window_bp else " |")
        for r in RECIPES.values()
    ]
    return "\n".join(lines)


TABLES: dict[str, Callable[[], str]] = {
    "statuses": columns.status_table,
    "recipes": _recipes,
    "normalizations": _normalizations,
    "checked-columns": lambda: columns.markdown_table(
        (*columns.PANEL, *columns.VCF_RECORD, *columns.LABEL, *columns.CHECK)
    ),
    "score-columns": lambda: columns.markdown_table(
        c for c in columns.SCORE if c.name not in ("score_status", "score_reason")
    ),
    "scan-position-columns": lambda: columns.markdown_table(columns.SCAN_POSITION),
    "scan-snv-columns": lambda: columns.markdown_table(columns.SCAN_SNV),
    "scan-base-columns": lambda: columns.markdown_table(columns.SCAN_BASE),
    "scan-tsv-columns": lambda: columns.markdown_table(columns.SCAN_TSV),
}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} -->\n)(?:.*?\n)?(<!-- end: {re.escape(name)} -->)",
        re.DOTALL,
    )


def render_readme(text: str) -> str:
    """`text` with every generated table replaced by its current content."""
    for name, table in TABLES.items():
        pattern = _block(name)
        if not pattern.search(text):
            raise ValueError(f"README has no block `<!-- generated: {name} -->`")
        text = pattern.sub(lambda m, t=table: m[1] + t() + "\n" + m[2], text)
    return text
