"""`python -m carbon_vep.benchmark.gpu`: the GPU check (see the package docstring)."""

from carbon_vep.benchmark.gpu.run import main

main()
