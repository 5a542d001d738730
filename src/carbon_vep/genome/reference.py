"""Reference genomes: a FASTA (plain or bgzipped, through pysam) or a GENERator-style Parquet.

Every implementation offers the same interface: `path`, `lengths`, `contigs`, and
`fetch(contig, start, end)` returning upper-cased bases of a 0-based half-open range clipped to
the contig. `open_reference(path)` picks the implementation from the file name. Contig names
are matched to a panel's by `contigs.resolve_contigs`.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pysam

from carbon_vep.atomic import atomic_path
from carbon_vep.errors import InputError
from carbon_vep.genome.fai_check import index_problem
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
    file (`fai_check.index_problem`): an inconsistent one is rebuilt where it could be (pysam.faidx
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
    found = index_problem(fasta, fai, gzi)
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
    `fetch` keeps one contig in memory (a shard's variants are sorted by contig). The reader
    moves forward: contigs asked for in the file's order (a scan's plan, a panel's shards) are
    each decoded once; one further back starts over at its row group. (Starting over from the
    first row at each contig decoded every contig before it again: quadratic in the rows.)
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
        meta = self._file.metadata
        rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        self._group_starts = list(itertools.accumulate(rows, initial=0))[:-1]  # each's first row
        self._reader: Iterator[pa.RecordBatch] | None = None
        self._next_row = 0  # the row the reader gives next

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
            if self._reader is None or target < self._next_row:
                group = bisect.bisect_right(self._group_starts, target) - 1
                self._reader = self._file.iter_batches(
                    batch_size=1,
                    row_groups=range(group, len(self._group_starts)),
                    columns=[PARQUET_COLUMNS[1]],
                )
                self._next_row = self._group_starts[group]
            for batch in self._reader:
                self._next_row += 1
                if self._next_row - 1 == target:
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
        self._cached = self._reader = None
