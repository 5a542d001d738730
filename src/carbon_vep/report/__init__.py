"""What a user reads: the results table (`results_table`), Markdown and HTML reports
(`markdown`, `html`, `plots`, with `assets/report.css`), exports for the field's tools
(`exports`: VCF with scores in INFO, tabix TSV), and the documentation tables generated from
their one definition (`doc_tables`).

May import: `evaluate`, `config`, `genome` and the shared modules. No torch.
"""
