"""Benchmarks: our code and the reference approach side by side, measured by one harness.

Each benchmark runs the product as users do, `carbon-vep` jobs or Snakemake, and reads what
the jobs write (their timing records, logs, outputs); in-process measurements remain only where
no job gives the figure, and say why. `harness` is how every benchmark measures (a whole
process's wall time and peak RSS within a time limit, the jobs' environment, a stage in this
process, a pair with its ratios, JSON and Markdown out). One module a `make bench-*` target,
each runnable as `python -m carbon_vep.benchmark.<name>`: `engine` (`make bench`: the recipes'
jobs against the official scripts' way), `ingest`, `scan`, `contigs`, `calibrate`, `niah`,
`tracks`, `vllm`, `generate` (rollouts as recovery jobs, also the GPU check's); `gpu` is `make
gpu-check`, one module a step, its first the product's own jobs through Snakemake. The
yardsticks they (and the tests) measure against: `published` (the official scripts' approaches,
restated from their code), `reference_job` (those approaches as a job of their own, beside the
product's jobs on the same inputs), `known_answer` (a model whose right answer is known),
`synthetic` (generated genomes and scans).

May import: every stage but the CLI (it runs `carbon-vep` or Snakemake as a user does); no stage
imports the benchmarks (import-linter).
"""
