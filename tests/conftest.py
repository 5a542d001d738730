"""Shared fixtures: small real-format files written by the tests, and the demo model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cluster import ROOT, uninterrupted_run  # noqa: F401  (a session fixture)
from support.files import random_dna, write_fasta

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the network


@pytest.fixture
def genome(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A two-contig FASTA (UCSC names); chr1 has a soft-masked stretch."""
    chr1 = random_dna(3000, 1)
    chr1 = chr1[:1000] + chr1[1000:1200].lower() + chr1[1200:]
    contigs = {"chr1": chr1, "chr2": random_dna(1500, 2)}
    return write_fasta(tmp_path / "genome.fa", contigs), contigs


@pytest.fixture(scope="session")
def demo_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from carbon_vep.model.demo import build_demo_model

    return build_demo_model(tmp_path_factory.mktemp("models") / "demo_model")


DEMO_FASTA = ROOT / "resources/demo/chr17.hg19.part.fa"


@pytest.fixture(scope="session")
def loaded(demo_model_dir: Path):
    """The demo model loaded through the real path (AutoTokenizer/AutoModel + adapter)."""
    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.model.loading import load_model

    return load_model(ModelSettings(str(demo_model_dir), trust_remote_code=True))


@pytest.fixture(scope="session")
def reference():
    """The shipped 40 kbp chr17 fragment."""
    from carbon_vep.genome.reference import open_reference

    with open_reference(DEMO_FASTA) as ref:
        yield ref
