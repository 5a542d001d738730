"""The documentation holds together: every relative link of the pages points at a file of the
repository (and at a heading of it, for `#anchors`), every `docs/<page>.md#<anchor>` the code
and configs cite exists, and nothing in the repository points at a file outside it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from carbon_vep.report.doc_tables import doc_pages

ROOT = Path(__file__).resolve().parents[1]
PAGES = doc_pages(ROOT)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
# outputs, caches and the virtualenv are not part of the repository
SKIP_DIRS = {".git", ".venv", ".venv-vllm", "results", "logs", ".snakemake", "__pycache__"}
SKIP_DIRS |= {"demo_model"}
SKIP_DIRS |= {".pytest_cache", ".ruff_cache"}
TEXT = {".py", ".md", ".yaml", ".yml", ".smk", ".toml", ".sh", ".rst", ".txt", ".cfg", ".json"}


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {anchor(m[1]) for m in re.finditer(r"^#{1,6} +(.+)$", text, re.MULTILINE)}


def repository_text_files() -> list[Path]:
    files = []
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in names:
            path = Path(folder) / name
            if path.suffix in TEXT or name in ("Snakefile", "Makefile", "run"):
                files.append(path)
    return files


def test_anchor_follows_github():
    assert anchor("Deterministic reruns, and what varies on GPU") == (
        "deterministic-reruns-and-what-varies-on-gpu"
    )
    assert anchor("Whole-genome scan: `make bench-scan`") == "whole-genome-scan-make-bench-scan"
    assert anchor("hub_files") == "hub_files"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = FENCE.sub("", page.read_text())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or not resolved.is_relative_to(ROOT):
            broken.append(f"{target} (no such file)")
        elif fragment and fragment not in anchors(resolved):
            broken.append(f"{target} (no heading #{fragment} in {resolved.name})")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_page_is_linked_from_the_readme():
    readme = ROOT / "README.md"
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in LINK.findall(readme.read_text())}
    assert [str(p.relative_to(ROOT)) for p in PAGES if p != readme and p not in linked] == []


def test_cited_pages_and_sections_exist():
    """`docs/<page>.md#<anchor>` (or `config/README.md#<anchor>`) cited anywhere in the
    repository, in code, configs and tests as well as in the pages, names a page and a heading
    that exist."""
    cited = re.compile(r"\b((?:docs|config)/[\w./-]+\.md)(?:#([\w-]+))?")
    broken = []
    for path in repository_text_files():
        for page, fragment in cited.findall(path.read_text(errors="replace")):
            target = ROOT / page
            if not target.is_file():
                broken.append(f"{path.relative_to(ROOT)}: {page}")
            elif fragment and fragment not in anchors(target):
                broken.append(f"{path.relative_to(ROOT)}: {page}#{fragment}")
    assert not broken


def test_nothing_points_outside_the_repository():
    """Facts the code relies on are stated in docs/ with their public sources; no file may cite
    a document that lives outside the repository (a sibling checkout's notes, say)."""
    # spelled in pieces so that this file does not match itself
    shared = "shared" + "/"
    names = ("zero-shot-suite", "performance-targets", "workflow-conventions", "input-pitfalls")
    forbidden = [f"../{shared}", f"{shared}docs/", f"{shared}seeds/", *(f"{n}.md" for n in names)]
    outside = re.compile("|".join(map(re.escape, forbidden)))
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in repository_text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits
