"""The documentation's tables, generated from their one definition (columns, recipes, settings).

A table sits in a documentation page (README.md, docs/*.md, config/README.md) between
`<!-- generated: NAME -->` and `<!-- end: NAME -->`. `carbon-vep doc-tables` rewrites every such
block of every page and a test fails when one is stale, so the pages cannot drift from the code:
the status and column tables come from `columns`, the recipe and normalisation tables from the
recipe registry, and the configuration reference (config/README.md) from the settings'
definitions, through the same JSON-schema properties the workflow validates a config with.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from carbon_vep import atomic, columns, markdown
from carbon_vep.config.entries import SECTIONS
from carbon_vep.config.fields import ENTRY_SCOPES, is_required, schema_property
from carbon_vep.config.recipes import NORMALIZATIONS, RECIPES
from carbon_vep.config.run import run_fields
from carbon_vep.config.schema import entry_sweeps, json_schema
from carbon_vep.errors import InputError

log = logging.getLogger("carbon_vep")

# the pages that may hold generated tables, relative to the repository root
PAGE_PATTERNS = ("README.md", "docs/*.md", "config/README.md")


def _normalizations() -> str:
    published, computed = {}, {}
    for recipe in RECIPES.values():
        published.setdefault(recipe.published_normalization, []).append(recipe.name)
        for name in recipe.normalizations:
            computed.setdefault(name, []).append(recipe.name)
    rows = [
        [
            f"`{name}`",
            text,
            ", ".join(published.get(name, [])) or "—",
            ", ".join(computed.get(name, [])) or "—",
        ]
        for name, text in NORMALIZATIONS.items()
    ]
    return markdown.table(["option", "meaning", "published for", "computed by"], rows)


def _recipes() -> str:
    rows = [
        [
            f"`{r.name}`",
            r.summary,
            r.window_meaning + (f" ({r.default_window_bp:,})" if r.default_window_bp else ""),
        ]
        for r in RECIPES.values()
    ]
    return markdown.table(["recipe", "what it scores", "`window_bp` (default)"], rows)


# ---- the configuration reference ------------------------------------------------------------
def _value(value: Any) -> str:
    """A default as it would be written in YAML (flow style)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, str) and _plain_yaml(value):
        return value  # plain YAML reads it back as this string
    return json.dumps(value)  # null, true/false, numbers, and strings YAML would read otherwise


def _plain_yaml(text: str) -> bool:
    """Whether YAML reads `text`, unquoted, back as this string (`{config}/x` it cannot read)."""
    try:
        return yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


_KIND = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}


def _type(prop: Mapping[str, Any]) -> str:
    """A schema property's type in words: `list of string`, `integer ≥ 1`, `one of a, b`."""
    if "anyOf" in prop:  # a list that also takes one bare item (`regions: all`), or a sweep
        first, second = prop["anyOf"]
        if second["type"] == "array":  # a setting a list sweeps
            return f"{_type(first)}, or a list of them"
        return f"{_type(first)}, or one {_type(second)}"
    kinds = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
    nullable = "null" in kinds
    kind = next(k for k in kinds if k != "null")
    if "enum" in prop:
        text = "one of " + ", ".join(f"`{_value(v)}`" for v in prop["enum"] if v is not None)
    elif kind == "array":
        text = f"list of {_type(prop['items'])}"
    elif kind == "object":
        values = prop["additionalProperties"]
        text = f"map of string to {_type(values)}"
    else:
        text = _KIND[kind]
        low, high = prop.get("minimum"), prop.get("maximum")
        if low is not None and high is not None:
            text += f", {low:,} to {high:,}"
        elif low is not None:
            text += f" ≥ {low:,}"
    return text + (" or null" if nullable else "")


def _default(f: dataclasses.Field, prop: Mapping[str, Any]) -> str:
    return "**required**" if is_required(f) else f"`{_value(prop['default'])}`"


def _entry_settings(cls: type, group: str = "—") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """Every setting of a config entry with the settings group it belongs to (the name of the
    group field nesting it; `—` for the entry's own settings)."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("group"):
            yield from _entry_settings(hints[f.name], f.name)
        else:
            yield group, f, hints[f.name]


def _config_top_level() -> str:
    """The config's top-level keys: the run's own, the run-level settings (one value for every
    entry of the sections that have them) and the sections."""
    properties = json_schema()["properties"]
    rows = []
    for name in ("outdir", "baseline", "sha256"):
        prop = properties[name]
        default = f"`{_value(prop['default'])}`"
        rows.append([f"`{name}`", _type(prop), default, "the run", prop["description"]])
    for name, (f, _) in run_fields().items():
        prop = properties[name]
        users = [f"`{s}`" for s, (cls, _, _) in SECTIONS.items() if _has_setting(cls, name)]
        applies = "every entry of " + ", ".join(users)
        rows.append([f"`{name}`", _type(prop), _default(f, prop), applies, prop["description"]])
    for name, (_, required, description) in SECTIONS.items():
        default = "**required** (at least one entry)" if required else "`{}`"
        rows.append([f"`{name}`", "map of entry key to entry", default, "the run", description])
    return markdown.table(["key", "type", "default", "applies to", "meaning"], rows)


def _has_setting(cls: type, name: str) -> bool:
    return any(f.name == name for _, f, _ in _entry_settings(cls))


def _config_section(section: str) -> Callable[[], str]:
    def table() -> str:
        cls = SECTIONS[section][0]
        swept = entry_sweeps(cls)
        rows = []
        for group, f, hint in _entry_settings(cls):
            if f.metadata["scope"] not in ENTRY_SCOPES:  # run keys: the top-level table
                continue
            prop = schema_property(f, hint, f.name in swept)
            rows.append(
                [
                    f"`{f.name}`",
                    _type(prop),
                    _default(f, prop),
                    group if group == "—" else f"`{group}`",
                    prop["description"],
                ]
            )
        return markdown.table(["key", "type", "default", "group", "meaning"], rows)

    return table


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
    "calibrated-columns": lambda: columns.markdown_table(columns.CALIBRATED),
    "config-top-level": _config_top_level,
    **{f"config-{name.replace('_', '-')}": _config_section(name) for name in SECTIONS},
}


# ---- the pages --------------------------------------------------------------------------
_START = re.compile(r"<!-- generated: ([A-Za-z0-9_-]+) -->\n")


def _end(name: str) -> str:
    return f"<!-- end: {name} -->"


def generated_blocks(text: str) -> list[str]:
    """The names of the generated blocks of a page, in order."""
    return _START.findall(text)


def render_page(text: str, where: str = "page") -> str:
    """`text` with every generated block replaced by its table's current content.

    A block naming no known table, or without its end marker, is an error naming the page
    (`where`) and the line.
    """
    out, position = [], 0
    for start in _START.finditer(text):
        name, line = start[1], text.count("\n", 0, start.start()) + 1
        if name not in TABLES:
            known = ", ".join(TABLES)
            raise InputError(where, f"no generated table named {name!r} (known: {known})", line)
        if start.start() < position:
            raise InputError(where, f"generated block {name!r} starts inside another block", line)
        end = text.find(_end(name), start.end())
        if end < 0:
            raise InputError(where, f"`<!-- generated: {name} -->` has no `{_end(name)}`", line)
        out += [text[position : start.end()], TABLES[name](), "\n"]
        position = end
    return "".join(out) + text[position:]


def find_root(start: Path) -> Path:
    """The repository root at or above `start`: the folder holding the Snakefile and docs/."""
    for folder in (start, *start.parents):
        if (folder / "Snakefile").is_file() and (folder / "docs").is_dir():
            return folder
    raise InputError(
        start,
        "no repository root (a folder with Snakefile and docs/) here or above: run "
        "`carbon-vep doc-tables` in the repository, or name the pages",
    )


def doc_pages(root: Path) -> list[Path]:
    """Every documentation page of the repository that may hold generated tables."""
    pages: list[Path] = []
    for pattern in PAGE_PATTERNS:
        pages += sorted(root.glob(pattern))
    return pages


def missing_tables(pages: Mapping[Path, str]) -> list[str]:
    """Tables that no page holds (each table belongs in some page)."""
    present = {name for text in pages.values() for name in generated_blocks(text)}
    return [name for name in TABLES if name not in present]


def rewrite_pages(pages: Sequence[Path], check: bool) -> list[Path]:
    """Rewrite the generated tables of `pages` (default: every page of the repository around the
    current folder, which together must hold every table); with `check`, rewrite nothing. The
    pages whose tables were stale."""
    paths = list(pages) or doc_pages(find_root(Path.cwd().resolve()))
    texts = {path: path.read_text() for path in paths}
    if not pages and (missing := missing_tables(texts)):
        raise InputError(paths[0].parent, f"no page holds the generated table(s) {missing}")
    stale = []
    for path, text in texts.items():
        current = render_page(text, str(path))
        if current != text:
            stale.append(path)
            if not check:
                atomic.write_text(current, path)
    verb = "stale" if check else "rewritten"
    log.info("%d page(s) checked; %s: %s", len(texts), verb, ", ".join(map(str, stale)) or "none")
    return stale
