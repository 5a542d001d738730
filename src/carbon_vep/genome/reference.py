"""Reference genomes: a FASTA (plain or bgzipped, through pysam) or a GENERator-style Parquet.

Every implementation offers the same interface: `path`, `lengths`, `contigs`, and
`fetch(contig, start, end)` returning upper-cased bases of a 0-based half-open range clipped to
the contig. `open_reference(path)` picks the implementation from the file name. Contig names
are matched to a panel's by `contigs.resolve_contigs`.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterable
from contextlib import nullcontext
from itertools import pairwise
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pysam

from carbon_vep.atomic import atomic_path
from carbon_vep.errors import InputError
from carbon_vep.genome.htslib import captured_messages

log = logging.getLogger("carbon_vep")

PARQUET_COLUMNS = ("ID", "Sequence")  # GENERator's hg38.parquet: one row per contig


class Reference(ABC):
    """A genome: contig lengths and upper-cased, clipped sequence ranges; a context manager."""

    path: Path
    lengths: dict[str, int]

    @property
    def contigs(self) -> list[str]:
        return list(self.lengths)

    def fetch(self, contig: str, start: int, end: int) -> str:
        """Upper-cased bases of [start, end) (0-based, half-open), clipped to the contig.

        Upper-casing removes soft-masking (lowercase repeats), which a 6-mer tokenizer would
        otherwise turn into out-of-vocabulary tokens.
        """
        length = self.lengths[contig]
        start, end = max(0, start), min(length, end)
        if end <= start:
            return ""
        return self._fetch(contig, start, end).upper()

    @abstractmethod
    def _fetch(self, contig: str, start: int, end: int) -> str:
        """Bases of a range already clipped to the contig, in the file's case."""

    def close(self) -> None:  # noqa: B027 (implementations without a handle need nothing)
        """Release the file handle, if any."""

    def __enter__(self) -> Reference:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_reference(path: str | Path) -> Reference:
    """The reference at `path`: GENERator-style Parquet (`.parquet`) or FASTA (anything else)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "reference genome not found")
    if path.name.lower().endswith(".parquet"):
        return ParquetReference(path)
    return FastaReference(path)


# ---- FASTA -------------------------------------------------------------------------------
def _is_bgzf(path: Path) -> bool | None:
    """True for bgzip, False for plain gzip, None for an uncompressed file."""
    with open(path, "rb") as handle:
        head = handle.read(16)
    if head[:2] != b"\x1f\x8b":
        return None
    return len(head) >= 14 and bool(head[3] & 4) and head[12:14] == b"BC"


def index_paths(path: Path) -> tuple[Path, Path | None]:
    """A FASTA's .fai, and its .gzi when it is bgzip-compressed (None otherwise)."""
    gzi = Path(f"{path}.gzi") if _is_bgzf(path) else None
    return Path(f"{path}.fai"), gzi


def _needs_index(fasta: Path, fai: Path, gzi: Path | None) -> bool:
    """An index is missing, older than the FASTA where it could be rebuilt, or inconsistent
    with the FASTA's bytes.

    An older index in a read-only directory is used as it is (as htslib would), with a warning:
    a checkout or a copy does not keep modification times in order. Modification times do not
    prove an index right either (`cp -p`, `rsync -a` or tar can leave an index made for another
    file newer than it), so the .fai (and a bgzipped FASTA's .gzi) is also checked against the
    file (`_index_problem`): an inconsistent one is rebuilt where it could be (pysam.faidx
    writes the .fai and the .gzi), with a warning, and refused, naming the stale file, where
    it cannot.
    """
    indexes = [i for i in (fai, gzi) if i is not None]
    if not all(i.exists() for i in indexes):
        return True
    writable = os.access(fasta.parent, os.W_OK)
    if not all(i.stat().st_mtime >= fasta.stat().st_mtime for i in indexes):
        if writable:
            return True
        log.warning("%s: the index is older than the FASTA and cannot be rebuilt here", fasta)
    found = _index_problem(fasta, fai, gzi)
    if found is None:
        return False
    stale, problem = found
    if writable:
        log.warning("%s: stale, it does not match %s (%s); rebuilding it", stale, fasta, problem)
        return True
    raise InputError(
        stale,
        f"stale, it does not match {fasta} ({problem}), and it cannot be rebuilt here (the "
        f"directory is not writable): run `samtools faidx {fasta}` where you can write, or "
        "copy the FASTA to a writable directory",
    )


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


def _index_problem(fasta: Path, fai: Path, gzi: Path | None = None) -> tuple[Path, str] | None:
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


def _fasta_problem(path: Path, htslib_errors: str) -> str:
    """What is wrong with a FASTA that htslib cannot index, and how to fix it."""
    if path.stat().st_size == 0:
        return "the file is empty"
    compression = _is_bgzf(path)
    if compression is False:
        return (
            "compressed with plain gzip, which cannot be indexed; recompress it with bgzip "
            f"(`gzip -dc {path} | bgzip -c > {path}.bgz`) and point `reference` at the new file"
        )
    detail = htslib_errors or "htslib could not index it"
    if compression and ("truncated" in detail.lower() or "BGZF" in detail):
        return f"the bgzip file looks truncated or corrupt ({detail}); download it again"
    return (
        f"not a well-formed FASTA ({detail}); every record needs a `>name` line and, within a "
        "record, sequence lines of equal length (`samtools faidx` checks the same)"
    )


def _build_fasta_index(path: Path, fai: Path, gzi: Path | None) -> None:
    """Write .fai (and .gzi) next to the FASTA under temporary names, then rename them in (the
    .gzi first: a reader looks for the .fai).

    Two jobs indexing the same FASTA at once each write their own temporary files, so a reader
    never sees a half-written index.
    """
    with atomic_path(fai) as tmp_fai, atomic_path(gzi) if gzi else nullcontext() as tmp_gzi:
        args = [str(path), "--fai-idx", str(tmp_fai)]
        if tmp_gzi:
            args += ["--gzi-idx", str(tmp_gzi)]
        failure: Exception | None = None
        with captured_messages() as messages:
            try:
                pysam.faidx(*args)
            except (pysam.SamtoolsError, OSError) as err:
                failure = err
        if failure is None and not tmp_fai.exists():
            failure = OSError("no index written")
        duplicates = [m for m in messages.lines("W") if "duplicate sequence" in m]
        if failure is None and duplicates:  # htslib keeps the first record of a name only
            raise InputError(path, f"two records share a name ({duplicates[0]}); rename one")
        if failure is not None:
            if not os.access(path.parent, os.W_OK):
                raise InputError(
                    path,
                    f"no index next to the FASTA and its directory is not writable; run "
                    f"`samtools faidx {path}` where you can write, or copy the FASTA "
                    "to a writable directory",
                ) from failure
            raise InputError(path, _fasta_problem(path, messages.errors())) from failure


class FastaReference(Reference):
    """A FASTA (plain or bgzipped) opened with pysam.

    A missing, outdated or stale .fai (and .gzi for bgzip) is built next to the file
    (`_needs_index`); a plain-gzip FASTA, which cannot be indexed, is refused with the
    command that fixes it.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InputError(self.path, "reference FASTA not found")
        if self.path.stat().st_size == 0:
            raise InputError(self.path, _fasta_problem(self.path, ""))
        fai, gzi = index_paths(self.path)
        if _needs_index(self.path, fai, gzi):
            _build_fasta_index(self.path, fai, gzi)
        with captured_messages() as messages:
            try:
                self._fasta = pysam.FastaFile(
                    str(self.path),
                    filepath_index=str(fai),
                    filepath_index_compressed=str(gzi) if gzi else None,
                )
                failure = None
            except (OSError, ValueError) as err:
                failure = err
        if failure is not None:
            raise InputError(self.path, _fasta_problem(self.path, messages.errors())) from failure
        self.lengths = dict(zip(self._fasta.references, self._fasta.lengths, strict=True))
        if not self.lengths:
            raise InputError(self.path, "the FASTA holds no sequences")

    def _fetch(self, contig: str, start: int, end: int) -> str:
        return self._fasta.fetch(contig, start, end)

    def close(self) -> None:
        self._fasta.close()


# ---- Parquet -----------------------------------------------------------------------------
class ParquetReference(Reference):
    """A genome stored as a Parquet table of (ID, Sequence), one row per contig (GENERator's
    `hg38.parquet`).

    Rows are streamed one at a time: opening reads each contig once to learn its length, and
    `fetch` keeps one contig in memory (a shard's variants are sorted by contig).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._file = pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError) as err:
            raise InputError(self.path, f"cannot read the Parquet reference: {err}") from err
        missing = [c for c in PARQUET_COLUMNS if c not in self._file.schema_arrow.names]
        if missing:
            raise InputError(
                self.path,
                f"a Parquet reference needs the columns {list(PARQUET_COLUMNS)} (one row per "
                f"contig); missing {missing}, found {self._file.schema_arrow.names}",
            )
        self.lengths = {}
        for row, (contig, length) in enumerate(self._contig_lengths()):
            if contig is None or contig in self.lengths:
                problem = "an empty" if contig is None else f"a second {contig!r}"
                raise InputError(self.path, f"row {row + 1} has {problem} contig ID")
            self.lengths[contig] = length
        if not self.lengths:
            raise InputError(self.path, "the Parquet reference holds no sequences")
        self._row_of = {contig: row for row, contig in enumerate(self.lengths)}
        self._cached: tuple[str, str] | None = None

    def _rows(self, columns: list[str]) -> Iterable[pa.RecordBatch]:
        return self._file.iter_batches(batch_size=1, columns=columns)

    def _contig_lengths(self) -> Iterable[tuple[str | None, int]]:
        for batch in self._rows(list(PARQUET_COLUMNS)):
            contig = batch.column(0)[0].as_py()
            length = pc.binary_length(batch.column(1).cast(pa.large_binary()))[0].as_py()
            yield (None if contig is None else str(contig)), int(length or 0)

    def _sequence(self, contig: str) -> str:
        if self._cached is None or self._cached[0] != contig:
            target = self._row_of[contig]
            for row, batch in enumerate(self._rows([PARQUET_COLUMNS[1]])):
                if row == target:
                    sequence = batch.column(0)[0].as_py() or ""
                    if isinstance(sequence, bytes):
                        sequence = sequence.decode("ascii", errors="replace")
                    self._cached = (contig, sequence)
                    break
        assert self._cached is not None
        return self._cached[1]

    def _fetch(self, contig: str, start: int, end: int) -> str:
        return self._sequence(contig)[start:end]

    def close(self) -> None:
        self._cached = None
