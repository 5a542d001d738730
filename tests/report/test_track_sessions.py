"""The reference an IGV session opens, named so the tracks folder works where it is published:
the build's genome id, or the FASTA by a relative path, or a copy beside the tracks; never an
absolute local path."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pysam
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.errors import InputError
from carbon_vep.report.track_hub import igv_js, igv_session, session_reference
from carbon_vep.report.track_list import track_set


@pytest.fixture
def scan(tmp_path) -> tuple[dict, Path]:
    """A scan record whose reference sits elsewhere than its tracks folder."""
    (tmp_path / "genomes").mkdir()
    fasta = write_fasta(tmp_path / "genomes/lambda.fa", {"chrA": random_dna(500, 3)})
    pysam.faidx(str(fasta))  # its .fai
    out = tmp_path / "results/scans/s/demo/tracks"
    out.mkdir(parents=True)
    return {"reference": str(fasta), "build": "lambda_test"}, out


def test_a_build_igv_and_ucsc_host_is_named_by_its_id(scan):
    record, out = scan
    for build, genome in (("GRCh37", "hg19"), ("hg38", "hg38"), ("mm10", "mm10")):
        reference = session_reference({**record, "build": build}, out, "auto")
        assert reference.genome == genome and reference.fasta is None
    with pytest.raises(InputError, match="build 'lambda_test' is none IGV and UCSC host"):
        session_reference(record, out, "genome")


def test_another_build_gets_its_fasta_by_a_path_relative_to_the_tracks(scan):
    record, out = scan
    reference = session_reference(record, out, "auto")
    assert reference.fasta == "../../../../../genomes/lambda.fa"
    assert reference.index == f"{reference.fasta}.fai" and reference.gzi is None
    assert (out / reference.fasta).resolve() == Path(record["reference"]).resolve()
    tracks = track_set(calibrated=False)
    session = ET.fromstring(igv_session(tracks, reference))
    assert session.get("genome") == reference.fasta
    browser = igv_js(tracks, record, reference)
    assert browser["reference"] == {
        "id": "lambda_test",
        "fastaURL": reference.fasta,
        "indexURL": reference.index,
    }
    assert not any(os.path.isabs(v) for v in json.dumps(browser).split('"') if "/" in v)


def test_copy_puts_the_fasta_and_its_index_beside_the_tracks(scan):
    record, out = scan
    reference = session_reference(record, out, "copy")
    assert (reference.fasta, reference.index) == ("lambda.fa", "lambda.fa.fai")
    for name in ("lambda.fa", "lambda.fa.fai"):
        original = Path(record["reference"]).with_name(name)
        assert (out / name).read_bytes() == original.read_bytes()
    assert not list(out.glob(".*tmp*"))
    session_reference(record, out, "copy")  # again (a rerun): replaces, no error


def test_a_reference_a_browser_cannot_read_is_refused_naming_it(scan, tmp_path):
    record, out = scan
    fai = Path(f"{record['reference']}.fai")
    fai.rename(f"{record['reference']}.gzi")  # no .fai; a stray .gzi is not an index of it
    with pytest.raises(InputError, match=r"lambda\.fa: tracks_reference relative: .* \.fai"):
        session_reference(record, out, "relative")
    parquet = {**record, "reference": str(tmp_path / "genome.parquet")}
    with pytest.raises(InputError, match="genome.parquet: tracks_reference copy"):
        session_reference(parquet, out, "copy")
