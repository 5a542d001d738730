"""Reference genomes: a FASTA (plain or bgzipped, through pysam) or a GENERator-style Parquet.

Every implementation offers the same interface: `path`, `lengths`, `contigs`, and
`fetch(contig, start, end)` returning upper-cased bases of a 0-based half-open range clipped to
the contig. `open_reference(path)` picks the implementation from the file name. Contig names
are matched to a panel's by `contigs.resolve_contigs`.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable
from contextlib import nullcontext
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
    """An index is missing, older than the FASTA where it could be rebuilt, or (plain FASTA)
    inconsistent with the FASTA's bytes.

    An older index in a read-only directory is used as it is (as htslib would), with a warning:
    a checkout or a copy does not keep modification times in order. Modification times do not
    prove an index right either (`cp -p`, `rsync -a` or tar can leave an index made for another
    layout of the file newer than it), so a plain FASTA's .fai is also checked against the file
    (`_index_problem`): an inconsistent one is rebuilt where it could be, with a warning, and
    refused, naming the .fai, where it cannot. (A bgzipped FASTA's .fai counts uncompressed
    bytes, which cannot be checked without decompressing: it is trusted.)
    """
    indexes = [i for i in (fai, gzi) if i is not None]
    if not all(i.exists() for i in indexes):
        return True
    writable = os.access(fasta.parent, os.W_OK)
    if not all(i.stat().st_mtime >= fasta.stat().st_mtime for i in indexes):
        if writable:
            return True
        log.warning("%s: the index is older than the FASTA and cannot be rebuilt here", fasta)
    problem = None if gzi is not None else _index_problem(fasta, fai)
    if problem is None:
        return False
    if writable:
        log.warning("%s: stale, it does not match %s (%s); rebuilding it", fai, fasta, problem)
        return True
    raise InputError(
        fai,
        f"stale, it does not match {fasta} ({problem}), and it cannot be rebuilt here (the "
        f"directory is not writable): run `samtools faidx {fasta}` where you can write, or "
        "copy the FASTA to a writable directory",
    )


_NEWLINES = b"\r\n"
_HEADER_SEARCH_BYTES = 1 << 16  # a header line (name and description) longer than this: unchecked


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
    ends there."""
    start = max(0, offset - _HEADER_SEARCH_BYTES)
    handle.seek(start)
    data = handle.read(offset - start)
    if not data.endswith(b"\n"):
        return offset, b""
    cut = data.rfind(b"\n", 0, len(data) - 1)
    if cut < 0 and start > 0:
        return None
    return start + cut + 1, data[cut + 1 : -1].rstrip(b"\r")


def _index_problem(fasta: Path, fai: Path) -> str | None:
    """How a plain FASTA's .fai disagrees with the file (None when it does not).

    Per record: its `>name` line ends where the index says the sequence starts; its first line
    ends after the bases per line the index says; its last base sits where the index puts it,
    followed only by line ends up to the next record (or the end of the file). A few bytes are
    read per record, never the sequence: O(contigs), not O(genome).
    """
    records = _fai_records(fai)
    if isinstance(records, str):
        return records
    size = fasta.stat().st_size
    with open(fasta, "rb") as handle:

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

    A missing, outdated or (plain FASTA) stale .fai (and .gzi for bgzip) is built next to the
    file (`_needs_index`); a plain-gzip FASTA, which cannot be indexed, is refused with the
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
