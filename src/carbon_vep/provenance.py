"""What a result records about how it was made: package versions (and, per result, the model,
its revision and the config hash, passed by the workflow)."""

from __future__ import annotations

import platform
from importlib import metadata

_PACKAGES = (
    "carbon-vep",
    "torch",
    "transformers",
    "snakemake",
    "pysam",
    "polars",
    "scikit-learn",
    "matplotlib",
)


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
