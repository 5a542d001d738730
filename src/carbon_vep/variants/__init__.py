"""Variant panels in, checked variants out: the readers (`panel`: VCF/BCF through pysam,
Parquet/TSV/CSV through polars), ClinVar labels (`labels`), the per-row check against the
reference with a status and reason (`check`), and the one ingest path that runs them (`ingest`).

May import: `config`, `genome` and the shared modules. No torch.
"""
