"""carbon_vep: variant scoring with 6-mer DNA language models (Carbon, GENERator)."""

__version__ = "0.1.0"
