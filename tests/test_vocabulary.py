"""One vocabulary for tables: statuses, keys and columns are defined once (columns.py) and
every table, the reserved names and the documentation's generated tables (README.md, docs/,
config/README.md) are derived from those definitions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import polars as pl
import pytest

from carbon_vep import columns
from carbon_vep.cli import main
from carbon_vep.columns import CHECK_STATUSES, OUTPUT_STATUSES, RESERVED, Status
from carbon_vep.config.entries import SECTIONS
from carbon_vep.config.schema import json_schema
from carbon_vep.errors import InputError
from carbon_vep.report.doc_tables import TABLES, doc_pages, missing_tables, render_page
from carbon_vep.scoring.merge import merge_scores
from carbon_vep.variants.panel_columns import carry_name

ROOT = Path(__file__).resolve().parents[1]


def test_every_documentation_page_has_current_generated_tables():
    pages = {path: path.read_text() for path in doc_pages(ROOT)}
    assert {ROOT / "README.md", ROOT / "config/README.md", ROOT / "docs/outputs.md"} <= set(pages)
    stale = [str(p.relative_to(ROOT)) for p, t in pages.items() if render_page(t, str(p)) != t]
    assert not stale, f"generated tables are stale in {stale}: run `carbon-vep doc-tables`"
    assert missing_tables(pages) == [], "every generated table belongs in some page"


def test_render_page_rewrites_each_block_and_refuses_unknown_ones():
    table = columns.status_table()
    stale = "intro\n<!-- generated: statuses -->\nold\n<!-- end: statuses -->\noutro\n"
    current = render_page(stale)
    assert (
        current == f"intro\n<!-- generated: statuses -->\n{table}\n<!-- end: statuses -->\noutro\n"
    )
    assert render_page(current) == current
    empty = "<!-- generated: recipes -->\n<!-- end: recipes -->"
    assert "| `centered` |" in render_page(empty)
    with pytest.raises(InputError, match=r"p\.md:2: no generated table named 'nope'"):
        render_page("x\n<!-- generated: nope -->\n<!-- end: nope -->\n", "p.md")
    with pytest.raises(InputError, match="has no `<!-- end: statuses -->`"):
        render_page("<!-- generated: statuses -->\nold\n", "p.md")


def test_doc_tables_command_finds_the_pages_rewrites_and_checks(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    for page in doc_pages(ROOT):
        copy = repo / page.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(page.read_text())
    (repo / "Snakefile").write_text("")
    outputs = repo / "docs/outputs.md"
    current = outputs.read_text()
    outputs.write_text(current.replace(columns.status_table(), "| stale |"))
    monkeypatch.chdir(repo / "docs")  # the pages are found from the repository root above
    assert main(["doc-tables", "--check"]) == 1
    assert "| stale |" in outputs.read_text()  # --check rewrites nothing
    assert main(["doc-tables"]) == 0
    assert outputs.read_text() == current
    assert main(["doc-tables", "--check"]) == 0
    assert main(["doc-tables", "--check", str(outputs)]) == 0  # or the pages named
    (repo / "config/README.md").unlink()  # its tables are then in no page
    assert main(["doc-tables", "--check"]) == 2


def _table_keys(name: str) -> list[str]:
    rows = TABLES[name]().splitlines()[2:]
    return [row.split("|")[1].strip().strip("`") for row in rows]


def test_config_reference_lists_every_key_of_the_schema_once():
    """config/README.md's tables hold exactly the schema's keys: each section's entry keys
    (nested groups flattened, run-level keys left to the top-level table) and every top-level
    key; the schema is the one the workflow validates configs with."""
    schema = json_schema()["properties"]
    assert sorted(_table_keys("config-top-level")) == sorted(schema)
    for section in SECTIONS:
        keys = _table_keys(f"config-{section.replace('_', '-')}")
        assert sorted(keys) == sorted(schema[section]["additionalProperties"]["properties"])
    # the run-level keys apply to the sections that have them
    top = {row.split("|")[1].strip("` "): row for row in TABLES["config-top-level"]().splitlines()}
    assert "every entry of `datasets`, `tasks`, `niah` |" in top["bootstrap"]
    assert "every entry of `scans` |" in top["chunk_bp"]


def test_config_reference_writes_types_and_defaults_as_yaml_reads_them():
    datasets = TABLES["config-datasets"]()
    assert '| `positive_labels` | list of string | `["1", "1.0", "True", "true"]` |' in datasets
    assert "| `window_bp` | integer ≥ 6 or null | `null` | `scoring` |" in datasets
    assert "| `build` | string | **required** | `checks` |" in datasets
    assert "| `min_context` | integer ≥ 0 | `24000` | `tiles` |" in datasets
    scans = TABLES["config-scans"]()
    assert "| `regions` | list of string, or one string | **required** | — |" in scans
    assert "| `tsv_decimals` | integer, 1 to 6 | `2` | `chunks` |" in scans
    assert "| `clnsig_labels` | map of string to one of `0`, `1` |" in datasets
    assert (
        "| `decoder` | one of `token`, `fns_marginal`, `fns_conditional` | `token` | `recovery` |"
        in TABLES["config-tasks"]()
    )


def test_status_values_are_distinct_and_described():
    values = [s.value for s in Status]
    assert len(values) == len(set(values))
    assert all(s.description for s in Status)
    assert Status.CONTIG_END not in CHECK_STATUSES and Status.OK not in OUTPUT_STATUSES
    assert "`contig_end`" in columns.status_table()


def test_descriptions_are_ascii():
    """They become file header lines (the scan TSV's `##column=`, VCF INFO descriptions) that
    pysam and other tools read as ASCII."""
    groups = [getattr(columns, name) for name in dir(columns) if name.isupper()]
    described = [
        c for g in groups if isinstance(g, tuple) for c in g if isinstance(c, columns.Column)
    ]
    assert len(described) > 50
    for column in described:
        assert column.description.isascii(), (column.name, column.description)
    for status in Status:
        assert status.description.isascii(), status


def test_reserved_names_are_every_pipeline_column_but_the_key():
    for group in (columns.CHECK, columns.WINDOW, columns.SCORE, columns.METRIC):
        for column in group:
            assert column.name in RESERVED or column.name in columns.PANEL_KEY
    assert not RESERVED & set(columns.PANEL_KEY)
    # a panel column named like one of ours is carried under another name, not overwritten
    assert carry_name("score", set()) == "panel_score"
    assert carry_name("n_copies_in_panel", set()) == "panel_n_copies_in_panel"
    assert carry_name("consequence", set()) == "consequence"


def _checked() -> pl.DataFrame:
    rows = [(0, "chr1", 10, "A", "C", Status.OK), (1, "chr1", 20, "T", "G", Status.REF_MISMATCH)]
    frame = pl.DataFrame(
        [(i, c, c, p, r, a, s.value) for i, c, p, r, a, s in rows],
        schema=["row_id", "chrom", "ref_chrom", "pos", "ref", "alt", "status"],
        orient="row",
    )
    return frame.with_columns(pl.lit("").alias("reason"))


def test_merged_scores_have_the_defined_dtypes_and_statuses():
    score = {c: None for c in columns.names(columns.SCORE_SHARD)}
    score.update(ref_chrom="chr1", pos=10, ref="A", alt="C", score=1.5, score_status="scored")
    shard = pl.from_dicts([score], schema=columns.schema(columns.SCORE_SHARD))
    merged = merge_scores(_checked(), [shard])
    defined = columns.by_name(columns.PANEL, columns.CHECK, columns.SCORE)
    for name in merged.columns:
        if name in defined and name not in ("status", "reason"):
            assert merged[name].dtype == defined[name].dtype, name
    assert set(merged["status"]) <= {s.value for s in OUTPUT_STATUSES}
    assert merged["status"].to_list() == ["scored", "ref_mismatch"]


def _torch_free_modules() -> list[str]:
    """The modules the import-linter contract forbids torch (pyproject.toml), and the CLI."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (forbidden,) = [
        c
        for c in contracts["contracts"]
        if c["type"] == "forbidden" and {"torch", "transformers"} <= set(c["forbidden_modules"])
    ]
    return [*forbidden["source_modules"], "carbon_vep.cli"]


# One interpreter imports every module in turn and names the first after which torch (or
# transformers) is loaded: that module pulled it in, as every module before it did not. One
# process instead of one a package: 25 interpreters importing polars took 27 s of the suite.
TORCH_FREE_IMPORTS = """
import importlib, json, pkgutil, sys
def offender(name):
    importlib.import_module(name)
    return name if {"torch", "transformers"} & set(sys.modules) else None
def first_offender(modules):
    for module in modules:
        m = importlib.import_module(module)
        subs = pkgutil.walk_packages(getattr(m, "__path__", []), m.__name__ + ".")
        for name in [module, *(i.name for i in subs if not i.name.endswith("__main__"))]:
            if offender(name):
                return name
print(json.dumps(first_offender(json.loads(sys.argv[1]))))
"""


def test_cpu_stages_never_import_torch():
    """A CPU-only job (merge, metrics, report, ...) on a cluster must not load torch: import-linter
    checks the package's own imports statically; this loads each module (every submodule of a
    package) in a fresh interpreter, so a third-party import that pulls torch in is caught too."""
    modules = json.dumps(_torch_free_modules())
    out = subprocess.run(
        [sys.executable, "-c", TORCH_FREE_IMPORTS, modules],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) is None, f"{out.stdout.strip()} loads torch or transformers"


def test_the_torch_check_names_the_module_that_loads_torch(tmp_path):
    """The check above can fail: the first module after which torch is loaded is named (a
    stand-in package whose submodule registers a `torch` module, to spare a real import)."""
    package = tmp_path / "stage"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "clean.py").write_text("import json\n")
    (package / "heavy.py").write_text(
        "import sys, types\nsys.modules['torch'] = types.ModuleType('torch')\n"
    )
    modules = json.dumps(["carbon_vep.report", "stage"])
    out = subprocess.run(
        [sys.executable, "-c", TORCH_FREE_IMPORTS, modules],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert json.loads(out.stdout) == "stage.heavy"
