"""Whole-genome and region scans, every possible SNV scored in one forward pass per tile: the
plan (`plan`: targets, ACGT runs, chunks, estimates), tile geometry (`tiling`), the tile loop
on the model (`tiles`), and the outputs (`outputs`: chunk files, the per-contig Parquet and
tabix merge, the summary).

May import: `model`, `variants`, `sources`, `config`, `genome` and the shared modules. Only
`tiles` imports torch.
"""
