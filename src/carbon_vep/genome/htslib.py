"""htslib's own diagnostics, captured so that errors can quote them next to the file name.

htslib (under pysam) prints the precise cause of a failure ("Could not parse the position
'abc'", "Cannot index files compressed with gzip, please use bgzip") on the C-level stderr and
raises only a generic Python error; this captures that text so our error can carry it. Some
messages continue on the next lines with the offending text (`Could not parse the "#CHROM.."
line, ... instead of tabs:` and then the line itself): those lines belong to the message.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

_MESSAGE = re.compile(r"^\[([EW])::([A-Za-z0-9_]+)\] (.*)$")
_SHOWN_CHARS = 300  # of the offending text quoted in a message


class Message(NamedTuple):
    level: str  # E or W
    text: str  # the first line, without the `[E::func]` tag
    detail: str  # the lines that continue it (the offending text), '' when none

    def render(self) -> str:
        """The whole message: its text and, quoted, the offending text."""
        if not self.detail:
            return self.text
        shown = repr(self.detail[:_SHOWN_CHARS]) + (
            "..." if len(self.detail) > _SHOWN_CHARS else ""
        )
        return f"{self.text} {shown}" if self.text.endswith(":") else f"{self.text}: {shown}"


class Messages:
    """What htslib printed inside a `captured_messages()` block."""

    def __init__(self) -> None:
        self.text = ""
        self._sink: int | None = None  # the file descriptor written to, inside the block
        self._handed_out = 0

    def new_lines(self, level: str = "EW") -> list[str]:
        """Inside the block: the whole messages printed since the last call (so that a reader
        can tie a warning to the records it has just read)."""
        if self._sink is not None:
            sys.stderr.flush()
            self.text = os.pread(self._sink, os.fstat(self._sink).st_size, 0).decode(
                errors="replace"
            )
        messages = self.lines(level)
        fresh, self._handed_out = messages[self._handed_out :], len(messages)
        return fresh

    def parsed(self, level: str = "EW") -> list[Message]:
        """The messages at the given levels, in order, unique, each with the lines that
        continue it."""
        groups: list[list[str]] = []  # [level, text, *continuation lines]
        for line in self.text.splitlines():
            match = _MESSAGE.match(line.strip())
            if match is not None:
                groups.append([match[1], match[3]])
            elif groups and line.strip():
                groups[-1].append(line.removeprefix("\t"))
        found = dict.fromkeys(  # unique, in order: a dict, as htslib may print thousands
            Message(group_level, text, "\n".join(detail))
            for group_level, text, *detail in groups
            if group_level in level
        )
        return list(found)

    def lines(self, level: str = "EW") -> list[str]:
        """Whole message texts (without the `[E::func]` tag) at the given levels, in order,
        unique; a message's continuation lines are quoted after its first line."""
        return list(dict.fromkeys(message.render() for message in self.parsed(level)))

    def errors(self) -> str:
        """The error messages joined, or '' when htslib printed none."""
        return "; ".join(self.lines("E"))


@contextmanager
def captured_messages() -> Iterator[Messages]:
    """Redirect file descriptor 2 (where htslib writes) to a temporary file for the block."""
    messages = Messages()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        messages._sink = sink.fileno()
        try:
            yield messages
        finally:
            messages._sink = None
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            messages.text = sink.read().decode(errors="replace")
