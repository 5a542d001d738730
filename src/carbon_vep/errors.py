"""Errors that carry the file (and line) they are about, for messages users can act on."""

from __future__ import annotations

import os

# The interface a message is for: the workflow's rules set CARBON_VEP_INTERFACE=workflow for
# the commands they run; anything else (unset) is someone running `carbon-vep` directly.
INTERFACE_VARIABLE = "CARBON_VEP_INTERFACE"
_FLAGS = {"columns": "--column", "info_fields": "--info-field", "clnsig_labels": "--clnsig-label"}
_MAPPINGS = frozenset({"columns", "clnsig_labels"})  # config maps, one `--flag K=V` per entry
_LISTS = frozenset({"info_fields"})  # config lists, one `--flag V` per entry


def setting_name(key: str, value: str | None = None) -> str:
    """How a user names the setting `key` (a dataset's config key) in the interface in use:
    "`--format`" on the command line, "the dataset's `format` key" under the workflow.

    With `value` (written `K=V` for a mapping) the setting is shown set to it: "`--column
    pos=POS_hg38`" / "the dataset's `columns` key (`columns: {pos: POS_hg38}`)".
    """
    if os.environ.get(INTERFACE_VARIABLE) == "workflow":
        name = f"the dataset's `{key}` key"
        if value is None:
            return name
        if key in _MAPPINGS:
            entry, _, mapped = value.partition("=")
            value = f"{{{entry}: {mapped}}}"
        elif key in _LISTS:
            value = f"[{value}]"
        return f"{name} (`{key}: {value}`)"
    flag = _FLAGS.get(key, f"--{key.replace('_', '-')}")
    return f"`{flag}`" if value is None else f"`{flag} {value}`"


class InputError(ValueError):
    """A user-supplied file is unusable; the message names the file and what to fix."""

    def __init__(self, path: object, problem: str, line: int | None = None) -> None:
        where = f"{path}" if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.line = line
        self.problem = problem


class PanelUnusableError(InputError):
    """The panel as a whole cannot be scored (wrong build, wrong coordinates, no contigs)."""


class TokenizerMismatchError(RuntimeError):
    """The tokenizer does not behave like a 6-mer DNA tokenizer that we can score with."""
