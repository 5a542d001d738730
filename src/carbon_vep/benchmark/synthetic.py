"""Synthetic inputs the benchmarks (and the tests) write: FASTA and VCF files, random DNA, and a
random genome of one contig with a per-base scan dataset on it, for the benchmarks that need a scan
larger than the demo model makes quickly (the scan's annotate, calibration, tracks): random ACGT,
float16 log-marginals drawn from a Dirichlet(1) (scores spread over about ±5), written by the
scan's own writer in row groups of 2^20 bases."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl


def write_fasta(path: Path, contigs: dict[str, str], width: int = 60) -> Path:
    """`contigs` (name -> sequence) as a FASTA file, `width` bases a line."""
    lines = []
    for name, seq in contigs.items():
        lines.append(f">{name}")
        lines += [seq[i : i + width] for i in range(0, len(seq), width)]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_vcf(
    path: Path,
    contigs: dict[str, int],
    records: list[tuple[str, int, str, str, str]],
    info_header: tuple[str, ...] = (),
) -> Path:
    """A sites-only VCF: `contigs` (name -> length), `info_header` (##INFO lines) and
    `records` (chrom, pos, ref, alts as VCF writes them, INFO or ".")."""
    lines = ["##fileformat=VCFv4.2"]
    lines += [f"##contig=<ID={name},length={length}>" for name, length in contigs.items()]
    lines += [*info_header, "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    lines += [
        f"{c}\t{pos}\t.\t{ref}\t{alts}\t.\tPASS\t{info}" for c, pos, ref, alts, info in records
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def random_acgt(n: int, rng: np.random.Generator) -> str:
    """`n` uniform random bases drawn from `rng` (the benchmarks' numpy stream)."""
    return "".join(np.array(list("ACGT"))[rng.integers(0, 4, n)])


def random_dna(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(n))


def write_synthetic_scan(
    fasta: Path, parquet: Path, bases: int, rng: np.random.Generator, contig: str = "chrS"
) -> np.ndarray:
    """Write the genome (`fasta`) and its per-base rows (`parquet`); return the bases."""
    from carbon_vep.scan.positions import BaseWriter

    seq = np.array(list("ACGT"))[rng.integers(0, 4, bases)]
    text = "".join(seq)
    fasta.parent.mkdir(parents=True, exist_ok=True)
    write_fasta(fasta, {contig: text})
    writer = BaseWriter(parquet)
    step = 1 << 20
    for lo in range(0, bases, step):
        hi = min(lo + step, bases)
        logs = np.log(rng.dirichlet(np.ones(4), hi - lo)).astype(np.float16)
        frame = pl.DataFrame(
            {
                "chrom": [contig] * (hi - lo),
                "pos": np.arange(lo, hi) + 1,
                "ref": seq[lo:hi],
                "context_bp": np.minimum(np.arange(lo, hi), 24_000),
                "phase": np.arange(lo, hi) % 6,
                **{f"log_fns_{b}": logs[:, i] for i, b in enumerate("ACGT")},
                **{f"log_cond_{b}": logs[:, i] for i, b in enumerate("ACGT")},
            }
        )
        writer.write(frame.cast({"context_bp": pl.Int32, "phase": pl.UInt8}))
    writer.close()
    return seq
