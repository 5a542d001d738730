"""Shared fixtures: small real-format files written by the tests, and the demo model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cluster import ROOT, ci_run, uninterrupted_run  # noqa: F401  (session fixtures)
from support.files import random_dna, write_fasta
from support.once import built_once

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the network

# The longest files first (their fixtures run whole workflows or engines): `make test` hands
# whole files to its two workers in collection order (pytest-xdist, --dist loadfile, with
# --no-loadscope-reorder: xdist would otherwise reorder the files by their number of tests, which
# put test_bench_generate.py, one test of ~100 s, last, run alone while the other worker idled).
# Longest-first is the classic fix for that tail; the order of the rest is kept.
FILE_SECONDS = {  # each file's test time in a full run (docs/testing.md), longest first
    "workflow/test_workflow.py": 398,
    # the product's workflow, `profiles`, known answer, host memory (2026-11-30: 255 s alone;
    # the other steps are `make gpu-rehearsal`'s)
    "test_gpu_check_smoke.py": 300,
    "scan/test_scan_genome.py": 240,
    "workflow/test_invariance.py": 145,  # one run; the other is test_workflow.py's (ci_run)
    "suite/test_vllm.py": 130,
    "test_bench_generate.py": 60,  # five jobs with vLLM's; the rest asserted on the smoke
    "sources/test_hub.py": 83,
    "workflow/test_slurm.py": 79,
    "report/test_tracks.py": 61,
    "scan/test_scan_contig_names.py": 59,
    "scan/test_scan_lambda.py": 58,
    "workflow/test_ingest_workflow.py": 55,
    "workflow/test_resume.py": 52,
    "workflow/test_profiles.py": 48,
    "sources/test_hub_datasets.py": 36,
    "workflow/test_shipped_configs.py": 34,
    "workflow/test_config_sections.py": 31,
    "scoring/test_known_answer.py": 25,
    "sources/test_inputs.py": 22,
}


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist worker, and the processes it starts, gets its share of the cores for
    torch's OpenMP threads (read when torch loads: no test module is imported yet). Two workers
    that each run torch on every core wait on each other's spinning threads: tests/model,
    tests/scoring and the NIAH and recovery tests took 111-132 s that way on 2 cores, 68-74 s
    with one thread each (docs/testing.md). Snakemake gives its jobs their `threads` itself."""
    worker = getattr(config, "workerinput", None)  # None: one process, or xdist's controller
    if worker is not None:
        share = max(1, (os.cpu_count() or 1) // worker["workercount"])
        os.environ.setdefault("OMP_NUM_THREADS", str(share))


def _file_rank(item: pytest.Item) -> tuple[int, int]:
    path = item.nodeid.split("::")[0].removeprefix("tests/")
    if path in FILE_SECONDS:
        return 0, -FILE_SECONDS[path]
    slow = item.get_closest_marker("workflow") or item.get_closest_marker("slow")
    return (1, 0) if slow else (2, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_file_rank)  # stable: each file's tests stay in their order


@pytest.fixture
def genome(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A two-contig FASTA (UCSC names); chr1 has a soft-masked stretch."""
    chr1 = random_dna(3000, 1)
    chr1 = chr1[:1000] + chr1[1000:1200].lower() + chr1[1200:]
    contigs = {"chr1": chr1, "chr2": random_dna(1500, 2)}
    return write_fasta(tmp_path / "genome.fa", contigs), contigs


@pytest.fixture(scope="session")
def demo_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model, one directory for both workers: a run shared between them
    (`uninterrupted_run`) names it in its config and provenance, as the tests reusing it do."""
    from carbon_vep.model.demo import build_demo_model

    models = built_once(tmp_path_factory, "models", lambda d: build_demo_model(d / "demo_model"))
    return models / "demo_model"


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
