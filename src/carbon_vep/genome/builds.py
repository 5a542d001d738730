"""Genome builds: one spelling per assembly, and what a reference's contig lengths say about it.

Datasets and scans declare the build their panel and reference are on. Two checks use it:
`check_shared_references` (entries that point at one reference file must declare one build)
and `check_reference_build` (a reference whose chromosome lengths are those of another known
build than the declared one is refused). Both run before any job: in the workflow when the
config is loaded, in `carbon-vep score` / `check-panel` / `scan` when the reference is opened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from carbon_vep.errors import InputError
from carbon_vep.genome.contigs import canonical_contig

# Spellings of one assembly (compared lower-case); builds are compared in the canonical form.
BUILD_SYNONYMS = {
    "hg38": "GRCh38",
    "grch38": "GRCh38",
    "hg19": "GRCh37",
    "grch37": "GRCh37",
    "b37": "GRCh37",
    "hs37d5": "GRCh37",
    "hg18": "NCBI36",
    "ncbi36": "NCBI36",
    "mm39": "GRCm39",
    "grcm39": "GRCm39",
    "mm10": "GRCm38",
    "grcm38": "GRCm38",
}
# Lengths of a few chromosomes of each known assembly (canonical contig names): a fingerprint
# that tells the builds apart without reading the sequence.
CHROMOSOME_LENGTHS = {
    "GRCh38": {"1": 248_956_422, "2": 242_193_529, "17": 83_257_441, "X": 156_040_895},
    "GRCh37": {"1": 249_250_621, "2": 243_199_373, "17": 81_195_210, "X": 155_270_560},
    "NCBI36": {"1": 247_249_719, "2": 242_951_149, "17": 78_774_742, "X": 154_913_754},
    "GRCm39": {"1": 195_154_279, "2": 181_755_017, "X": 169_476_592},
    "GRCm38": {"1": 195_471_971, "2": 182_113_224, "X": 171_031_299},
}

# The genome ids IGV and the UCSC browser host, by canonical build (a scan's tracks_reference
# `genome` names one; report.track_hub's sessions and hub)
UCSC_GENOMES = {
    "GRCh38": "hg38",
    "GRCh37": "hg19",
    "NCBI36": "hg18",
    "GRCm39": "mm39",
    "GRCm38": "mm10",
}


def canonical_build(build: str) -> str:
    """`hg38` -> `GRCh38`; names not in the synonym table are returned as given."""
    return BUILD_SYNONYMS.get(build.lower(), build)


def ucsc_genome(build: str) -> str | None:
    """The IGV / UCSC genome id of `build` (hg38 for GRCh38); None for a build they don't host."""
    return UCSC_GENOMES.get(canonical_build(build))


def builds_of(lengths: Mapping[str, int]) -> list[str]:
    """Known builds whose fingerprint contigs all have the reference's lengths (those present)."""
    by_name = {canonical_contig(name): length for name, length in lengths.items()}
    found = []
    for build, fingerprint in CHROMOSOME_LENGTHS.items():
        shared = [c for c in fingerprint if c in by_name]
        if shared and all(by_name[c] == fingerprint[c] for c in shared):
            found.append(build)
    return found


def check_reference_build(declared: str, lengths: Mapping[str, int], reference: object) -> None:
    """Refuse a reference whose chromosome lengths belong to another known build.

    A reference that matches no known fingerprint (a fragment, another species) passes: only
    a positive match with a different build is an error.
    """
    found = builds_of(lengths)
    if found and canonical_build(declared) not in found:
        raise InputError(
            reference,
            f"its chromosome lengths are those of {found[0]}, but the build declared is "
            f"{declared} ({canonical_build(declared)}); point `reference` at the {declared} "
            f"genome, or correct the declared build",
        )


def check_shared_references(entries: Iterable[tuple[str, str, str]]) -> None:
    """(what, reference path, build) entries that share a reference file must share a build."""
    first_user: dict[str, tuple[str, str]] = {}
    for what, reference, build in entries:
        other = first_user.setdefault(os.path.realpath(reference), (what, build))
        if canonical_build(other[1]) != canonical_build(build):
            raise ValueError(
                f"{other[0]} (build {other[1]}) and {what} (build {build}) use the same "
                f"reference {reference}: one FASTA holds one build; point each at the FASTA of "
                "its own build, or correct the `build` that is wrong"
            )
