"""Reference genome access through pysam, with contig aliasing and upper-casing."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pysam

from .errors import InputError

_MITO_NAMES = ("chrM", "MT", "M", "chrMT")


def _alias_candidates(name: str) -> list[str]:
    """Spellings of one contig across UCSC / Ensembl / NCBI conventions, most likely first."""
    if name in _MITO_NAMES:
        return [n for n in _MITO_NAMES if n != name]
    if name.startswith("chr"):
        return [name[3:]]
    return [f"chr{name}"]


def resolve_contigs(
    panel_contigs: Iterable[str], reference_contigs: Iterable[str]
) -> dict[str, str]:
    """Map each panel contig to a reference contig: exact name first, then one unambiguous alias.

    Contigs with no (or an ambiguous) match are left out of the mapping; callers decide whether
    that is a per-row status or a fatal error.
    """
    known = set(reference_contigs)
    mapping: dict[str, str] = {}
    for contig in panel_contigs:
        if contig in known:
            mapping[contig] = contig
            continue
        hits = [alias for alias in _alias_candidates(contig) if alias in known]
        if len(hits) == 1:
            mapping[contig] = hits[0]
    return mapping


class Reference:
    """A FASTA (plain or bgzipped) opened with pysam; sequences come back upper-cased."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InputError(self.path, "reference FASTA not found")
        try:
            # pysam builds a missing .fai (and .gzi for bgzip) next to the file.
            self._fasta = pysam.FastaFile(str(self.path))
        except (OSError, ValueError) as err:
            hint = (
                "if it is gzip-compressed, recompress with `bgzip` (plain gzip cannot be indexed), "
                f"or index it with `samtools faidx {self.path}` in a writable directory"
            )
            raise InputError(self.path, f"cannot open or index FASTA ({err}); {hint}") from err
        self.lengths: dict[str, int] = dict(
            zip(self._fasta.references, self._fasta.lengths, strict=True)
        )

    @property
    def contigs(self) -> list[str]:
        return list(self.lengths)

    def fetch(self, contig: str, start: int, end: int) -> str:
        """Upper-cased bases of [start, end) (0-based, half-open), clipped to the contig."""
        length = self.lengths[contig]
        start, end = max(0, start), min(length, end)
        if end <= start:
            return ""
        return self._fasta.fetch(contig, start, end).upper()

    def close(self) -> None:
        self._fasta.close()

    def __enter__(self) -> Reference:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
