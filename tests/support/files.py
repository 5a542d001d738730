"""Small real-format inputs the tests write: FASTA files and random DNA (one home with the
benchmarks': carbon_vep.benchmark.synthetic)."""

from carbon_vep.benchmark.synthetic import random_dna, write_fasta

__all__ = ["random_dna", "write_fasta"]
