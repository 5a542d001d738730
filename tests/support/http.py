"""A folder served over HTTP on 127.0.0.1, as a web server publishes a tracks folder: byte-range
requests answered (206), which genome browsers use to read bigWig and indexed FASTA files."""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """The standard library's static handler, plus `Range: bytes=a-b` (one range)."""

    def log_message(self, *args) -> None:  # the test's output stays quiet
        pass

    def send_head(self):
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if match is None or not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        first, last = match.groups()
        start = int(first) if first else max(0, size - int(last))
        end = min(int(last), size - 1) if first and last else size - 1
        if start >= size:
            self.send_error(416)
            return None
        handle = path.open("rb")
        handle.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.range_left = end - start + 1
        return handle

    def copyfile(self, source, outputfile) -> None:
        left = getattr(self, "range_left", None)
        if left is None:
            return super().copyfile(source, outputfile)
        while left > 0:
            block = source.read(min(left, 1 << 16))
            if not block:
                break
            outputfile.write(block)
            left -= len(block)


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """`folder` served at the returned base URL while the block runs."""
    handler = functools.partial(RangeHandler, directory=os.fspath(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
