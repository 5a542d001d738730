"""The reference genome and coordinates on it: reading a FASTA or GENERator Parquet
(`reference`), whether its .fai and .gzi still describe it (`fai_check`), contig-name aliases
(`contigs`), build names and fingerprints (`builds`), htslib's own diagnostics (`htslib`), and
windows around variants with deterministic shards (`windows`).

May import: the top-level shared modules (errors, atomic, columns, progress, provenance) only.
No torch.
"""
