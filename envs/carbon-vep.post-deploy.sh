#!/usr/bin/env bash
# Snakemake (--sdm conda) runs this inside the environment it has just built from
# carbon-vep.yaml: install the carbon-vep package from the checkout. Snakemake runs it from its
# working directory, normally the checkout; set CARBON_VEP_ROOT when it is not.
set -euo pipefail
root=${CARBON_VEP_ROOT:-$PWD}
if ! grep -qs '^name = "carbon-vep"$' "$root/pyproject.toml"; then
    echo "carbon-vep.post-deploy.sh: $root is not a carbon-vep checkout;" \
        "set CARBON_VEP_ROOT to the checkout and rerun" >&2
    exit 1
fi
python -m pip install --no-deps -e "$root"
