"""What the Snakefile computes, as plain Python: the run's file patterns (`paths`), the files it
produces and the wildcard patterns (`targets`), and what each job is given — inputs, settings,
resources, provenance (`jobs`, `scans` for what a scan's plan decides), and the digests of
settings and plan parts that params and provenance carry (`digests`). workflow/rules/common.smk
binds them to the config and the rules name them.

May import: `config`, `estimate` (a model's shape: its jobs' host memory), `scan` (the names
of a calibration folder's files) and the shared modules. No torch: the Snakefile imports it
while parsing.
"""
