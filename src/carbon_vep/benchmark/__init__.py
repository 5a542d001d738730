"""Benchmarks: our code and the reference approach side by side, measured by one harness.

`harness` is how every benchmark measures (wall time of a stage or a whole process, peak RSS,
device peak memory, a pair with its ratios, JSON and Markdown out). One module a `make bench-*`
target, each runnable as `python -m carbon_vep.benchmark.<name>`: `engine` (`make bench`: the
scoring engine against the published approach), `ingest`, `scan`, `contigs`, `calibrate`,
`niah`, `tracks`; `gpu` is `make gpu-check`, one module a phase, its first the product's own
jobs through Snakemake. The yardsticks they (and the tests) measure against: `published` (the
official scripts' approaches, restated from their code), `reference_job` (those approaches as a
job of their own, beside the product's jobs on the same inputs), `known_answer` (a model whose
right answer is known), `host_reads` (host synchronisations counted on a CPU), `synthetic`
(generated genomes and scans).

May import: every stage but the CLI (it runs `carbon-vep` or Snakemake as a user does); no stage
imports the benchmarks (import-linter).
"""
