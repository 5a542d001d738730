"""Whether a FASTA's .fai (and a bgzipped FASTA's .gzi) still describe the file.

Modification times do not prove an index right (`cp -p`, `rsync -a` or tar can leave an index
made for another file newer than it), so each record's .fai entry is checked against the
file's bytes: its header line, line width, last base and the end of the file. A bgzipped
FASTA is read through its .gzi the way htslib reads it (`_BgzfText`), every block read checked
against the file. A few bytes (or blocks) a record, never the whole genome.
"""

from __future__ import annotations

import struct
import zlib
from bisect import bisect_right
from itertools import pairwise
from pathlib import Path

_NEWLINES = b"\r\n"
_HEADER_SEARCH_BYTES = 1 << 16  # a header line (name and description) longer than this: unchecked
_HEADER_FIRST_BYTES = 256


def _fai_records(fai: Path) -> list[tuple[bytes, int, int, int, int]] | str:
    """(name, length, offset, bases per line, bytes per line) of each .fai line, or what is
    wrong with the file."""
    records = []
    for number, line in enumerate(fai.read_bytes().splitlines(), start=1):
        fields = line.split(b"\t")
        try:
            name, length, offset, bases, width = fields[0], *map(int, fields[1:5])
        except ValueError:
            return f"line {number} is not a FASTA index line (name, length, offset, ...)"
        if len(fields) != 5 or min(length, offset, bases, width) < 0 or width < bases:
            return f"line {number} is not a FASTA index line (name, length, offset, ...)"
        records.append((name, length, offset, bases, width))
    return records if records else "it lists no sequence"


def _header_line(handle, offset: int) -> tuple[int, bytes] | None:
    """(start, text) of the line that ends just before `offset` (its newline excluded; None
    when that line is longer than `_HEADER_SEARCH_BYTES`); (offset, b"") when no newline
    ends there.

    A few hundred bytes are read first, the full search span only for a longer line: a genome
    of many small scaffolds reads little per record.
    """
    for span in (_HEADER_FIRST_BYTES, _HEADER_SEARCH_BYTES):
        start = max(0, offset - span)
        handle.seek(start)
        data = handle.read(offset - start)
        if not data.endswith(b"\n"):
            return offset, b""
        cut = data.rfind(b"\n", 0, len(data) - 1)
        if cut >= 0 or start == 0:
            return start + cut + 1, data[cut + 1 : -1].rstrip(b"\r")
    return None


def index_problem(fasta: Path, fai: Path, gzi: Path | None = None) -> tuple[Path, str] | None:
    """(the index file, how it disagrees with the FASTA), or None when both agree.

    A bgzipped FASTA's .fai counts uncompressed bytes: it is checked through the .gzi
    (`_BgzfText`), whose blocks are checked against the file wherever they are read, and whose
    last block must end the file (a .gzi made for another file rarely survives that: a change
    anywhere moves every later block). Then per .fai record (`_records_problem`). A few blocks
    are decompressed per record, never the genome: O(contigs), not O(genome).
    """
    records = _fai_records(fai)
    if isinstance(records, str):
        return fai, records
    size = fasta.stat().st_size
    with open(fasta, "rb") as handle:
        if gzi is None:
            problem = _records_problem(handle, size, records)
        else:
            entries = _gzi_entries(gzi)
            if isinstance(entries, str):
                return gzi, entries
            try:
                text = _BgzfText(handle, size, entries)
                problem = _records_problem(text, text.length, records)
            except _GziMismatch as err:
                return gzi, str(err)
    return None if problem is None else (fai, problem)


def _records_problem(
    handle, size: int, records: list[tuple[bytes, int, int, int, int]]
) -> str | None:
    """How a FASTA's bytes (`handle`: seek and read, `size` bytes) disagree with its .fai
    records (None when they do not).

    Per record: its `>name` line ends where the index says the sequence starts; its first line
    ends after the bases per line the index says; its last base sits where the index puts it,
    followed only by line ends up to the next record (or the end of the file). A few bytes are
    read per record, never the sequence.
    """

    def read(start: int, length: int) -> bytes:
        handle.seek(start)
        return handle.read(max(0, length))

    next_starts: list[int | None] = []
    for name, _, offset, _, _ in records:
        header = _header_line(handle, offset) if offset <= size else (offset, b"")
        if header is not None:
            text = header[1]
            if not text.startswith(b">" + name) or text[len(name) + 1 :][:1] not in _NAME_ENDS:
                label = name.decode(errors="replace")
                return f"record {label!r} does not start at byte {offset:,} as it says"
        next_starts.append(None if header is None else header[0])
    next_starts = [*next_starts[1:], size]
    for (name, length, offset, bases, width), end in zip(records, next_starts, strict=True):
        label = name.decode(errors="replace")
        if length == 0:
            continue
        if length > bases:
            first = read(offset + bases - 1, width - bases + 1)
            if not (_is_base(first[:1]) and first[1:] and _only_newlines(first[1:])):
                return (
                    f"record {label!r}: its lines do not hold the {bases} bases per line "
                    "the index says (the FASTA was rewrapped or rewritten after indexing?)"
                )
        last = offset + (length - 1) // bases * width + (length - 1) % bases
        if end is None:
            continue  # the next record's header line is too long to find: unchecked
        tail = read(last, min(end - last, _HEADER_SEARCH_BYTES + 1))
        if end - last > _HEADER_SEARCH_BYTES or not (
            _is_base(tail[:1]) and _only_newlines(tail[1:])
        ):
            return (
                f"record {label!r}: its {length:,} bases do not end where the index puts "
                "them (the FASTA was changed after it was indexed?)"
            )
    return None


_NAME_ENDS = (b"", b" ", b"\t")


def _is_base(byte: bytes) -> bool:
    """A sequence byte: present, and neither a line end nor the start of a header."""
    return len(byte) == 1 and byte not in (b"\r", b"\n", b">")


def _only_newlines(data: bytes) -> bool:
    return not data.strip(_NEWLINES)


# ---- bgzip: the .gzi checked where it is read ----------------------------------------------
class _GziMismatch(Exception):
    """A .gzi disagrees with the bgzip file's blocks (the message says where)."""


def _gzi_entries(gzi: Path) -> list[tuple[int, int]] | str:
    """(compressed offset, uncompressed offset) of every block a .gzi lists, the first block's
    (0, 0) included (the file leaves it out), or what is wrong with the file.

    The format: a little-endian uint64 count, then that many pairs of uint64.
    """
    data = gzi.read_bytes()
    if len(data) < 8:
        return "it is not a .gzi file (shorter than its 8-byte count)"
    (count,) = struct.unpack_from("<Q", data)
    if len(data) != 8 + 16 * count:
        return f"it is not a .gzi file (it says {count:,} blocks in {len(data):,} bytes)"
    entries = [(0, 0), *struct.iter_unpack("<QQ", data[8:])]
    if any(c1 <= c0 or u1 <= u0 for (c0, u0), (c1, u1) in pairwise(entries)):
        return "its block offsets do not increase"
    return entries


class _BgzfText:
    """The uncompressed bytes of a bgzip file, read through its .gzi as htslib reads them (a
    block found by its uncompressed offset, decompressed from the compressed offset the .gzi
    gives), with `seek` and `read` over uncompressed offsets.

    Every block read is checked against the .gzi: a BGZF block starts where it says, holds the
    bytes it says (length and CRC), and ends where the next listed block starts, or the file
    ends for the last one (with only empty blocks between: the EOF marker or a concatenation's,
    which htslib does not list). A `_GziMismatch` says where they disagree. The last block is
    read on opening, which gives `length`, the uncompressed size.
    """

    _CACHED_BLOCKS = 16

    def __init__(self, handle, size: int, entries: list[tuple[int, int]]) -> None:
        self._handle, self._size, self._entries = handle, size, entries
        self._starts = [u for _, u in entries]
        self._cache: dict[int, bytes] = {}
        if entries[-1][0] >= size:
            raise _GziMismatch(
                f"its last block starts at byte {entries[-1][0]:,}, past the end of the "
                f"{size:,}-byte file"
            )
        self.length = entries[-1][1] + len(self._block(len(entries) - 1))
        self._pos = 0

    def _raw_block(self, offset: int) -> tuple[bytes, int]:
        """The uncompressed bytes of the BGZF block at `offset`, and the offset after it."""
        handle = self._handle
        handle.seek(offset)
        head = handle.read(12)
        if len(head) < 12 or head[:4] != b"\x1f\x8b\x08\x04":
            raise _GziMismatch(f"no BGZF block starts at byte {offset:,}")
        (xlen,) = struct.unpack_from("<H", head, 10)
        extra = handle.read(xlen)
        bsize, at = None, 0
        while at + 4 <= len(extra):
            slen = struct.unpack_from("<H", extra, at + 2)[0]
            if extra[at : at + 2] == b"BC" and slen == 2 and at + 6 <= len(extra):
                bsize = struct.unpack_from("<H", extra, at + 4)[0]
            at += 4 + slen
        if bsize is None or bsize + 1 < 12 + xlen + 8:
            raise _GziMismatch(f"no BGZF block starts at byte {offset:,}")
        rest = handle.read(bsize + 1 - 12 - xlen)
        if len(rest) != bsize + 1 - 12 - xlen:
            raise _GziMismatch(f"the BGZF block at byte {offset:,} runs past the end of the file")
        crc, isize = struct.unpack_from("<II", rest, len(rest) - 8)
        try:
            data = zlib.decompress(rest[:-8], wbits=-15)
        except zlib.error as err:
            raise _GziMismatch(f"the BGZF block at byte {offset:,} does not inflate") from err
        if len(data) != isize or zlib.crc32(data) != crc:
            raise _GziMismatch(f"the BGZF block at byte {offset:,} fails its length or CRC")
        return data, offset + bsize + 1

    def _block(self, index: int) -> bytes:
        """The bytes of the `index`-th block the .gzi lists, checked against the listing."""
        if index in self._cache:
            return self._cache[index]
        (start, ustart), entries = self._entries[index], self._entries
        data, end = self._raw_block(start)
        bound = entries[index + 1][0] if index + 1 < len(entries) else self._size
        while end < bound:  # empty blocks (EOF markers) are not listed
            skipped, after = self._raw_block(end)
            if skipped:
                raise _GziMismatch(f"it does not list the block at byte {end:,}")
            end = after
        if end != bound:
            where = "the end of the file" if index + 1 == len(entries) else "the next it lists"
            raise _GziMismatch(
                f"its block at byte {start:,} ends at byte {end:,}, not at {where} ({bound:,})"
            )
        if index + 1 < len(entries) and ustart + len(data) != entries[index + 1][1]:
            raise _GziMismatch(
                f"its block at byte {start:,} holds {len(data):,} bytes, not the "
                f"{entries[index + 1][1] - ustart:,} it says"
            )
        if len(self._cache) >= self._CACHED_BLOCKS:
            self._cache.clear()
        self._cache[index] = data
        return data

    def seek(self, offset: int) -> None:
        self._pos = offset

    def read(self, count: int) -> bytes:
        pieces, pos, stop = [], self._pos, min(self.length, self._pos + count)
        while pos < stop:
            index = bisect_right(self._starts, pos) - 1
            piece = self._block(index)[pos - self._starts[index] : stop - self._starts[index]]
            pieces.append(piece)
            pos += len(piece)
        self._pos = pos
        return b"".join(pieces)
