"""The bill before the run (`carbon-vep estimate`, and `snakemake -n`): from a config and the
resources a profile gives each rule, the files a run fetches, the jobs of each rule as far as
they are known before a checkpoint, and the GPU-hours of each task and model. `counts` (how many
items an input holds: a local file's own count, else the documented one, each with its source),
`costs` (what an item costs a model: tokens, FLOPs, GPU seconds; the H100 check's measured rates),
`fetches` (the files and the jobs), `bill` (the GPU lines, and reading a config and a profile),
`table` (the Markdown the command and the dry run print).

May import: `scoring`, `suite`, `report`, `scan`, `config`, `genome` and the shared modules; the
CLI and the workflow import it. No torch, no Snakemake: the Snakefile imports it while parsing.
"""
