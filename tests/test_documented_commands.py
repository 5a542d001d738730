"""The commands the documentation gives still exist as written: every `carbon-vep <command>
--flag`, `make <target>`, `python -m carbon_vep.<module> --flag` and rule named in a code span or
shell block of the pages (and in the comments of the shipped configs) names a sub-command, flag,
target, module or rule of this checkout. A renamed flag or target fails here, not in a user's
shell. Running the commands is the other tests' job (docs/annotation.md's blocks, the demo)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from carbon_vep.cli import build_parser
from carbon_vep.report.doc_tables import doc_pages

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# where one command ends and the next begins on a shell line
SEPARATOR = re.compile(r"\s(?:\||;|&&|\|\||>|<|2>)\s|[;)]\s*$")


def _sub_commands() -> dict[str, set[str]]:
    parser = build_parser()
    (subs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        name: {o for a in p._actions for o in a.option_strings} for name, p in subs.choices.items()
    }


def _commands(text: str) -> list[tuple[int, str]]:
    """(line, command text) of every code span and every logical line of a fenced block."""
    found = []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        start, logical = first, ""
        for number, physical in enumerate(block[1].splitlines(), first):
            start = start if logical else number
            logical += physical.removesuffix("\\") + " "
            if not physical.endswith("\\"):  # a `\` continues the command on the next line
                found.append((start, logical))
                logical = ""
    outside = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)
    for span in SPAN.finditer(outside):
        found.append((outside.count("\n", 0, span.start()) + 1, " ".join(span[2].split())))
    return found


def _config_comments(path: Path) -> str:
    """A shipped config's comments as one shell block (they hold its commands)."""
    lines = [
        re.sub(r"^\s*# ?", "", ln)
        for ln in path.read_text().splitlines()
        if ln.lstrip().startswith("#")
    ]
    return "```\n" + "\n".join(lines) + "\n```\n"


SOURCES = [(p, p.read_text()) for p in doc_pages(ROOT)]
SOURCES += [(p, _config_comments(p)) for p in sorted((ROOT / "config").glob("*.yaml"))]


def _after(word: str, command: str) -> list[list[str]]:
    """The words after each `word` of a command line, up to the next shell separator."""
    tails = []
    for match in re.finditer(rf"(?<![\w./\"'=-]){re.escape(word)}(?=\s)", command):
        rest = SEPARATOR.split(command[match.end() :])[0]
        try:
            words = shlex.split(rest, comments=True)
        except ValueError:  # an unbalanced quote in prose
            words = rest.split()
        tails.append(words)
    return tails


def _flags(words: list[str]) -> list[str]:
    """`--name` of every word that is a flag (`[--x Y]` and `--x=Y` included)."""
    return [m[1] for w in words if (m := re.match(r"\[?(--[a-z][a-z0-9-]*)", w))]


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, re.MULTILINE))


def _rules() -> set[str]:
    names = set()
    for path in [ROOT / "Snakefile", *sorted((ROOT / "workflow/rules").glob("*.smk"))]:
        text = path.read_text()
        names |= set(re.findall(r"^\s*(?:rule|checkpoint) (\w+):", text, re.MULTILINE))
        names |= {f"{p}<name>" for p in re.findall(r'f"(\w+_)\{\w+\}"', text)}  # one a config entry
    return names


def _problems(path: Path, text: str) -> list[str]:
    subs, targets, rules = _sub_commands(), _make_targets(), _rules()
    where = path.relative_to(ROOT)
    problems = []
    for line, command in _commands(text):
        for words in _after("carbon-vep", command):
            named = re.match(r"[a-z][a-z0-9-]*[a-z]", words[0]) if words else None
            if not named:  # `carbon-vep`, `carbon-vep --help`
                continue
            name = named[0]
            if name not in subs:
                problems.append(f"{where}:{line}: no sub-command `carbon-vep {name}`")
                continue
            for flag in _flags(words[1:]):
                if flag not in subs[name]:
                    problems.append(f"{where}:{line}: `carbon-vep {name}` has no {flag}")
        for words in _after("make", command):
            for word in words:
                if "=" in word or word.startswith(("-", "#")):  # VAR=value, options
                    continue
                if word in targets or "*" in word:  # `make bench-*` names a family
                    continue
                if re.fullmatch(r"[a-z][\w-]*", word):
                    problems.append(f"{where}:{line}: no Makefile target `make {word}`")
                break  # the words after the targets are prose
        for words in _after("-m", command):
            if not words or not words[0].startswith("carbon_vep."):
                continue
            module = words[0]
            if "<" in module:  # a placeholder: carbon_vep.benchmark.<name>
                continue
            base = ROOT / "src" / Path(*module.split("."))
            source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else None
            if source is None and (base / "__main__.py").is_file():
                source = base
            if source is None:
                problems.append(f"{where}:{line}: no module `python -m {module}`")
                continue
            code = "".join(
                p.read_text() for p in ([source] if source.is_file() else source.rglob("*.py"))
            )
            for flag in _flags(words[1:]):
                if f'"{flag}"' not in code:
                    problems.append(f"{where}:{line}: `python -m {module}` has no {flag}")
        if re.search(r"\bpython3? carbon_vep\.", command):
            problems.append(f"{where}:{line}: a module run without -m: {command!r}")
    prose = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)  # blocks blanked, lines kept
    for match in re.finditer(r"\brules? `(\w+)`", prose):
        name = match[1]
        known = name in rules or any(
            r.endswith("<name>") and name.startswith(r[:-6]) for r in rules
        )
        if not known:
            line = prose.count("\n", 0, match.start()) + 1
            problems.append(f"{where}:{line}: no rule `{name}` in the workflow")
    return problems


@pytest.mark.parametrize(
    "path,text", [pytest.param(p, t, id=str(p.relative_to(ROOT))) for p, t in SOURCES]
)
def test_documented_commands_exist(path, text):
    assert _problems(path, text) == []


def test_a_renamed_flag_target_module_or_rule_is_caught():
    """The check fails on each kind of rot it is for (else it could pass on anything)."""
    page = ROOT / "notes/example.md"
    text = (
        "Run `carbon-vep annotate --scan S --panel P --out O` and `make demo`.\n\n"
        "```sh\ncarbon-vep annotate --scan S \\\n  --pannel P --out O\nmake demo-all\n"
        "python -m carbon_vep.benchmark.scan --shapes 1,2\n```\n\n"
        "`carbon-vep annotat --scan S`, `python -m carbon_vep.benchmark.nothing`, "
        "`python carbon_vep.benchmark.scan`; rule `export_tracks` and rule `export_track`.\n"
    )
    assert _problems(page, text) == [
        "notes/example.md:4: `carbon-vep annotate` has no --pannel",
        "notes/example.md:6: no Makefile target `make demo-all`",
        "notes/example.md:7: `python -m carbon_vep.benchmark.scan` has no --shapes",
        "notes/example.md:10: no sub-command `carbon-vep annotat`",
        "notes/example.md:10: no module `python -m carbon_vep.benchmark.nothing`",
        "notes/example.md:10: a module run without -m: 'python carbon_vep.benchmark.scan'",
        "notes/example.md:10: no rule `export_tracks` in the workflow",
    ]
