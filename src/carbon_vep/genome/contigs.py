"""Contig names across conventions: UCSC `chr1`, Ensembl `1`, NCBI `NC_000001.11`.

Panels, references and scan targets spell chromosomes differently; every stage matches them
through `resolve_contigs` here (an exact name first, then one unambiguous alias). No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Human RefSeq chromosome accessions: NC_000001 .. NC_000024 are chr1 .. chr22, X, Y (any
# version: the version encodes the assembly, which the REF check verifies); NC_012920 is the
# rCRS mitochondrion (GRCh37 and GRCh38 MT) and NC_001807 the older one of UCSC hg19's chrM.
# Both are MT here: hg38's chrM is the rCRS, and a name cannot say which a file means (the REF
# check finds a mix). PLINK's 23-26 are not aliased (docs/inputs.md#reference-and-builds).
_REFSEQ_CHROMOSOME = re.compile(r"NC_0000(0[1-9]|1[0-9]|2[0-4])\.\d+")
_REFSEQ_MITO = re.compile(r"NC_(012920|001807)\.\d+")
_SEX_CHROMOSOMES = {23: "X", 24: "Y"}


def canonical_contig(name: str) -> str:
    """One spelling per chromosome across UCSC / Ensembl / NCBI names (`chr1`, `1`, `NC_000001.11`
    → `1`; `chrM`, `MT`, `M` → `MT`); other names are returned without a `chr` prefix."""
    if match := _REFSEQ_CHROMOSOME.fullmatch(name):
        number = int(match[1])
        return _SEX_CHROMOSOMES.get(number, str(number))
    if _REFSEQ_MITO.fullmatch(name):
        return "MT"
    bare = name[3:] if name[:3].lower() == "chr" else name
    return "MT" if bare.upper() in ("M", "MT") else bare


def resolve_contigs(
    panel_contigs: Iterable[str], reference_contigs: Iterable[str]
) -> dict[str, str]:
    """Map each panel contig to a reference contig: exact name first, then one unambiguous alias.

    Contigs with no (or an ambiguous) match are left out of the mapping; callers decide whether
    that is a per-row status or a fatal error (`ContigAliases.candidates` tells which).
    """
    aliases = ContigAliases(reference_contigs)
    mapping: dict[str, str] = {}
    for contig in panel_contigs:
        hits = aliases.matches(contig)
        if len(hits) == 1:
            mapping[contig] = hits[0]
    return mapping


class ContigAliases:
    """A reference's contig names, indexed by canonical spelling on the first alias asked for:
    each name is matched in one lookup, not against every reference contig (a BED's lines, a
    draft assembly's scaffolds: a scan of them all per name multiplied the two counts)."""

    def __init__(self, reference_contigs: Iterable[str]) -> None:
        self.names = list(reference_contigs)
        self.known = set(self.names)
        self._by_canonical: dict[str, list[str]] | None = None

    def candidates(self, contig: str) -> list[str]:
        """Reference contigs that spell the same chromosome as `contig` in another convention."""
        if self._by_canonical is None:
            self._by_canonical = {}
            for name in self.names:
                self._by_canonical.setdefault(canonical_contig(name), []).append(name)
        return list(self._by_canonical.get(canonical_contig(contig), []))

    def matches(self, contig: str) -> list[str]:
        """`contig` itself where the reference has it, else its alias candidates."""
        return [contig] if contig in self.known else self.candidates(contig)


# ---- contig names in file names ------------------------------------------------------------
# Kept as they are: ASCII letters, digits and `._-` (POSIX's portable file-name characters), but
# not `._-` as the first character (a hidden file; pyarrow's dataset discovery skips names that
# start with `.` or `_`; a leading `-` reads as a command-line option). Every other byte of the
# name's UTF-8 is written @XX, upper-case hex: percent-encoding with `@` for `%`. Not `%`
# itself: file names become Snakemake wildcards, which the SLURM executor puts into each job's
# `--output` path, where SLURM expands `%` sequences (`%2A` is the job ID, `%7C` loses its `%`;
# expand_stdio_fields in SLURM's src/common/print_fields.c) and the job's log folder is missed.
_NAME_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
ESCAPE = "@"


def encode_name(name: str) -> str:
    """A contig name as a shell-safe file-name part that decodes back to exactly `name`
    (`HLA-A*01:01:01:01` -> `HLA-A@2A01@3A01@3A01@3A01`; `chr1` stays `chr1`)."""
    out = []
    for index, char in enumerate(name):
        if char in _NAME_SAFE and (index or char.isalnum()):
            out.append(char)
        else:
            out += [f"{ESCAPE}{byte:02X}" for byte in char.encode("utf-8")]
    return "".join(out)


def decode_name(text: str) -> str:
    """The contig name of an `encode_name` file-name part: `@` read as `%`, then standard
    percent-decoding (`urllib.parse.unquote`)."""
    from urllib.parse import unquote

    return unquote(text.replace(ESCAPE, "%"), errors="strict")
