"""`python -m carbon_vep.cli`: the same as the `carbon-vep` command."""

import sys

from carbon_vep.cli import main

sys.exit(main())
