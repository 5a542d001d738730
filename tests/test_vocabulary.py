"""One vocabulary for tables: statuses, keys and columns are defined once (columns.py) and
every table, the reserved names and the README's tables are derived from those definitions."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import polars as pl
import pytest

from carbon_vep import columns
from carbon_vep.columns import CHECK_STATUSES, OUTPUT_STATUSES, RESERVED, Status
from carbon_vep.report.doc_tables import TABLES, render_readme
from carbon_vep.scoring.merge import merge_scores
from carbon_vep.variants.panel import carry_name

ROOT = Path(__file__).resolve().parents[1]


def test_readme_tables_are_generated_from_the_definitions():
    readme = (ROOT / "README.md").read_text()
    assert render_readme(readme) == readme, (
        "README.md's generated tables are stale: run `carbon-vep readme-tables`"
    )
    for name in TABLES:
        assert f"<!-- generated: {name} -->" in readme


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
    described = [c for g in groups if isinstance(g, tuple) for c in g
                 if isinstance(c, columns.Column)]  # fmt: skip
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
    (forbidden,) = [c for c in contracts["contracts"] if c["type"] == "forbidden"]
    assert set(forbidden["forbidden_modules"]) >= {"torch", "transformers"}
    return [*forbidden["source_modules"], "carbon_vep.cli"]


@pytest.mark.parametrize("module", _torch_free_modules())
def test_cpu_stages_never_import_torch(module):
    """A CPU-only job (merge, metrics, report, ...) on a cluster must not load torch: import-linter
    checks the package's own imports statically; this loads each module (every submodule of a
    package) in a fresh interpreter, so a third-party import that pulls torch in is caught too."""
    code = (
        "import importlib, pkgutil, sys\n"
        f"m = importlib.import_module({module!r})\n"
        "for info in pkgutil.walk_packages(getattr(m, '__path__', []), m.__name__ + '.'):\n"
        "    if not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
