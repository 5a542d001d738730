"""htslib's own diagnostics, captured so that errors can quote them next to the file name.

htslib (under pysam) prints the precise cause of a failure ("Could not parse the position
'abc'", "Cannot index files compressed with gzip, please use bgzip") on the C-level stderr and
raises only a generic Python error; this captures that text so our error can carry it.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

_MESSAGE = re.compile(r"^\[([EW])::([A-Za-z0-9_]+)\] (.*)$")


class Messages:
    """What htslib printed inside a `captured_messages()` block."""

    def __init__(self) -> None:
        self.text = ""

    def lines(self, level: str = "EW") -> list[str]:
        """Message texts (without the `[E::func]` tag) at the given levels, in order, unique."""
        found: list[str] = []
        for line in self.text.splitlines():
            match = _MESSAGE.match(line.strip())
            if match and match[1] in level and match[3] not in found:
                found.append(match[3])
        return found

    def errors(self) -> str:
        """The error lines joined, or '' when htslib printed none."""
        return "; ".join(self.lines("E"))


@contextmanager
def captured_messages() -> Iterator[Messages]:
    """Redirect file descriptor 2 (where htslib writes) to a temporary file for the block."""
    messages = Messages()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield messages
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            messages.text = sink.read().decode(errors="replace")
