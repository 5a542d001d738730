"""Each sub-package's docstring says what it may import ("May import: ..."): the statement is
kept true against the package's real imports (import-linter checks the layer order; this keeps
the prose a newcomer reads from drifting from it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src/carbon_vep"
SHARED = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
SUB_PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def declared(package: str) -> set[str] | None:
    """The packages the docstring allows (None: every stage), from the first sentence after
    "May import:"."""
    doc = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text())) or ""
    match = re.search(r"May import:(.*?)(?:\.\s|\.$|$)", doc, re.S)
    assert match, f"carbon_vep.{package}: its docstring does not say what it may import"
    if "every stage" in match.group(1):
        return None
    return {name.split(".")[0] for name in re.findall(r"`([\w.]+)`", match.group(1))}


def imported(package: str) -> set[str]:
    """The carbon_vep sub-packages the package's modules import (at any depth of the code)."""
    found = set()
    for path in (PACKAGE / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found |= {n.split(".")[1] for n in names if n.startswith("carbon_vep.")}
    return found - SHARED - {package}


@pytest.mark.parametrize("package", SUB_PACKAGES)
def test_a_package_imports_only_what_its_docstring_allows(package):
    allowed = declared(package)
    if allowed is None:
        assert "benchmark" not in imported(package) or package == "benchmark"
        return
    assert imported(package) <= allowed, (package, sorted(imported(package) - allowed))


def test_the_check_sees_a_real_import():
    """Not vacuous: the parser finds what suite imports, and a package's own name is no
    declaration."""
    assert {"model", "scan", "evaluate"} <= imported("suite")
    assert declared("genome") == set() and declared("cli") is None
