"""Write the demo's zero-shot suite tasks from the shipped 40 kbp chr17 fragment.

- resources/demo/demo_recovery.tsv (sequence, label, type): 300 bp of the fragment, then the
  next 30 bp as the label, the layout of GenerTeam/sequence-recovery. `type` is `unmasked` or
  `repeat` (soft-masked label bases), a real annotation of the fragment.
- resources/demo/demo_cag_expansion.tsv (original_sequence, sequence): 300 bp windows whose
  30 bp at offset 60 (codon-aligned) are replaced by ten CAG codons, as in the Carbon CAG
  triplet-expansion task (length and reading frame preserved).
- resources/demo/demo_synonymous_codon.tsv (original_sequence, sequence): 300 bp windows read
  in frame 0, every sense codon replaced by the most frequent human codon for its amino acid
  (Kazusa codon usage, Homo sapiens); the fragment is not a CDS, so these are synonymous-codon
  *style* pairs that exercise the task's machinery.

The windows are fixed (no randomness), so the outputs are deterministic and committed.
Run: python scripts/make_demo_tasks.py
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pysam

ROOT = Path(__file__).resolve().parents[1]
FASTA = ROOT / "resources/demo/chr17.hg19.part.fa"
OUT = ROOT / "resources/demo"
WINDOW_BP = 300
LABEL_BP = 30
N_ROWS = 8

# Standard genetic code, codons in TCAG order.
_BASES = "TCAG"
_AMINO = "FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG"
GENETIC_CODE = {
    "".join(c): a for c, a in zip(itertools.product(_BASES, repeat=3), _AMINO, strict=True)
}
# Most frequent human codon per amino acid (Kazusa codon usage database, Homo sapiens).
PREFERRED_CODON = {
    "A": "GCC", "R": "AGA", "N": "AAC", "D": "GAC", "C": "TGC", "Q": "CAG", "E": "GAG",
    "G": "GGC", "H": "CAC", "I": "ATC", "L": "CTG", "K": "AAG", "M": "ATG", "F": "TTC",
    "P": "CCC", "S": "AGC", "T": "ACC", "W": "TGG", "Y": "TAC", "V": "GTG",
}  # fmt: skip


def synonymous(seq: str) -> str:
    """Each sense codon (frame 0) replaced by the preferred codon of its amino acid."""
    codons = [seq[i : i + 3] for i in range(0, len(seq) - len(seq) % 3, 3)]
    swapped = [PREFERRED_CODON.get(GENETIC_CODE.get(c, "*"), c) for c in codons]
    return "".join(swapped) + seq[len(codons) * 3 :]


def cag_expansion(seq: str, offset: int = 60) -> str:
    return seq[:offset] + "CAG" * 10 + seq[offset + 30 :]


def write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    lines = ["\t".join(header)] + ["\t".join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    fasta = pysam.FastaFile(str(FASTA))
    genome = fasta.fetch(fasta.references[0])
    starts = [1000 + i * 4500 for i in range(N_ROWS)]
    recovery = []
    for start in starts:
        prompt = genome[start : start + WINDOW_BP]
        label = genome[start + WINDOW_BP : start + WINDOW_BP + LABEL_BP]
        kind = "repeat" if sum(b.islower() for b in label) > LABEL_BP // 2 else "unmasked"
        recovery.append([prompt.upper(), label.upper(), kind])
    write_tsv(OUT / "demo_recovery.tsv", ["sequence", "label", "type"], recovery)
    windows = [genome[s + 2000 : s + 2000 + WINDOW_BP].upper() for s in starts]
    header = ["original_sequence", "sequence"]
    write_tsv(OUT / "demo_cag_expansion.tsv", header, [[w, cag_expansion(w)] for w in windows])
    write_tsv(OUT / "demo_synonymous_codon.tsv", header, [[w, synonymous(w)] for w in windows])


if __name__ == "__main__":
    main()
