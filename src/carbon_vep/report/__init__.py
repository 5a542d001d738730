"""What a user reads: the results table (`results_table`), Markdown and HTML reports
(`markdown`, `html` with `page`, `niah` and `sweeps`, `plots`, with `assets/report.css`),
exports for the field's tools (`vcf_export` with `vcf_records` and `vcf_lines`: VCF with
scores in INFO; `exports`: tabix TSV; both read back in their sort order through
`table_slices`), a scan's
genome-browser tracks (`track_list` names them, `tracks` writes the bigWigs, `track_hub` the
UCSC hub and IGV sessions), and the documentation tables generated from their one definition
(`doc_tables`). Each command of `cli.report` calls one function of these, which reads the
command's files and writes its outputs.

May import: `evaluate`, `scan` (a scan's outputs and calibration), `variants` (what a VCF
panel's header declares, for the VCF export), `config`, `genome` and the shared modules
(`atomic`, `columns`, `errors`, `provenance`, `spill`). No torch.
"""
