"""Small real-format inputs the tests write: FASTA files and random DNA."""

from __future__ import annotations

import random
from pathlib import Path


def write_fasta(path: Path, contigs: dict[str, str], width: int = 60) -> Path:
    lines = []
    for name, seq in contigs.items():
        lines.append(f">{name}")
        lines += [seq[i : i + width] for i in range(0, len(seq), width)]
    path.write_text("\n".join(lines) + "\n")
    return path


def random_dna(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(n))
