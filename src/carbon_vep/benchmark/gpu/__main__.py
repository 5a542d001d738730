"""`python -m carbon_vep.benchmark.gpu`: the GPU check (see the package docstring)."""

import time

STARTED = time.monotonic()  # the budget counts the imports and CUDA's start-up too

from carbon_vep.benchmark.gpu.run import main  # noqa: E402

main(started=STARTED)
