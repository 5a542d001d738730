"""`python -m carbon_vep.benchmark.gpu`: the GPU check (see the package docstring)."""

import time

STARTED = time.monotonic()  # the budget counts the imports and CUDA's start-up too

import sys  # noqa: E402

from carbon_vep.benchmark.gpu.run import main  # noqa: E402

report = main(started=STARTED)
sys.exit(1 if (report.get("product") or {}).get("failed") else 0)  # a product job failed
