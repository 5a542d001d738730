"""BGZF (the blocked gzip htslib reads, tabix indexes and `bgzip` writes), compressed on worker
threads while the caller goes on formatting the text.

pysam's `BGZFile` compresses each block in the writing thread: once export-vcf's records were
formatted by polars, ~7 s of its 17 s for a million records (cProfile), a like share of
export-tabix's and the scan's TSVs'. zlib gives up the GIL while it deflates, so `BgzfWriter`
hands each block to a thread pool and writes the blocks in order as they complete, at most two
a worker ahead (the memory bounded). The format is the SAM/BAM specification's (section 4.1):
each block a gzip member of at most 65,536 bytes whose `BC` extra field holds its size, at
most 65,280 bytes of text a block as htslib writes them, the file ended by the empty block
htslib writes.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

BLOCK_TEXT = 0xFF00  # text bytes a block holds (htslib's BGZF_BLOCK_SIZE)
_MAX_BLOCK = 0x10000  # a block's size, header to footer
_HEADER = struct.Struct("<4BI2BH2BHH")  # gzip header with the 6-byte `BC` extra field
_FOOTER = struct.Struct("<II")  # CRC32, text size
EOF_BLOCK = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")
LEVEL = 6  # zlib's default, htslib's for `wz` / `bgzip`
MAX_THREADS = 4


def compress_block(text: bytes, level: int = LEVEL) -> bytes:
    """One BGZF block of `text` (at most `BLOCK_TEXT` bytes); stored uncompressed where deflate
    would not fit it in a block (random bytes)."""
    deflate = zlib.compressobj(level, zlib.DEFLATED, -15)
    data = deflate.compress(text) + deflate.flush()
    size = _HEADER.size + len(data) + _FOOTER.size
    if size > _MAX_BLOCK:
        return compress_block(text, level=0)
    header = _HEADER.pack(0x1F, 0x8B, 8, 4, 0, 0, 0xFF, 6, ord("B"), ord("C"), 2, size - 1)
    return header + data + _FOOTER.pack(zlib.crc32(text), len(text))


def default_threads() -> int:
    """Compressing threads: the cores this process may run on, at most `MAX_THREADS`."""
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))


class BgzfWriter:
    """A binary file handle that writes BGZF to `path` (`write`, `close`, a context manager),
    each block compressed on one of `threads` worker threads."""

    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 (closed by close())
        self._threads = threads or default_threads()
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="bgzf")
        self._pending: deque[Future[bytes]] = deque()
        self._text = bytearray()

    def write(self, data: bytes) -> int:
        """Queue `data`: each whole block of text is handed to a worker as it fills, and the
        blocks done are written, in order, once more than `2 × threads` are pending."""
        view = memoryview(data)
        if self._text:  # the block begun by the last write
            take = BLOCK_TEXT - len(self._text)
            self._text += view[:take]
            view = view[take:]
            if len(self._text) < BLOCK_TEXT:
                return len(data)
            self._submit(bytes(self._text))
            self._text.clear()
        while len(view) >= BLOCK_TEXT:
            self._submit(bytes(view[:BLOCK_TEXT]))
            view = view[BLOCK_TEXT:]
        self._text += view
        return len(data)

    def _submit(self, block: bytes) -> None:
        self._pending.append(self._pool.submit(compress_block, block))
        self._write_done(ahead=2 * self._threads)

    def _write_done(self, ahead: int) -> None:
        """Write the blocks in order until at most `ahead` are still pending."""
        while len(self._pending) > ahead:
            self._file.write(self._pending.popleft().result())

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            if self._text:
                self._submit(bytes(self._text))
                self._text.clear()
            self._write_done(ahead=0)
            self._file.write(EOF_BLOCK)
        finally:
            self._pool.shutdown(cancel_futures=True)
            self._file.close()

    def __enter__(self) -> BgzfWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
