"""What a scan refuses or skips before any model job, and the one-region command planned as
the workflow's scans are: N and IUPAC bases never fed to the model, a tile longer than the
model's context refused at plan time, a neutral BED's contigs and overlap with the scan
checked at plan time, a scan with no base at its min_context refused at plan time, settings
refused when the config is read, named errors instead of tracebacks."""

from __future__ import annotations

import json
import logging

import polars as pl
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.cli import main
from carbon_vep.config.fields import ConfigError
from carbon_vep.config.run import RunConfig
from carbon_vep.config.stages import ScanChunkSettings, TileSettings
from carbon_vep.errors import ContextTooLongError
from carbon_vep.genome.reference import open_reference
from carbon_vep.scan.plan import chunk_pieces, plan_scan
from carbon_vep.scan.targets import resolve_targets

GAP = (2500, 2900)  # 0-based: bases 2,501-2,900 are N


@pytest.fixture
def edge(tmp_path):
    """chr1 with a 400-N gap at 2,501-2,900 and an IUPAC R; chrN all N; chrShort 10 bp."""
    seq = random_dna(4000, 7)
    seq = seq[: GAP[0]] + "N" * (GAP[1] - GAP[0]) + seq[GAP[1] :]
    seq = seq[:3500] + "R" + seq[3501:]
    contigs = {"chr1": seq, "chrN": "N" * 600, "chrShort": "ACGTACGTAC"}
    return write_fasta(tmp_path / "edge.fa", contigs), contigs


def _windows(reference, targets, tiles):
    """(contig, base) -> (window start, context_bp) from the planner's tiles."""
    out = {}
    plan = plan_scan(reference, targets, tiles, ScanChunkSettings(chunk_bp=100_000))
    for index in range(len(plan["chunks"])):
        for piece in chunk_pieces(plan, index):
            for tile in piece.tiles(tiles):
                for base in range(tile.score_start, tile.score_end):
                    out[piece.chrom, base] = (tile.start, base - tile.start)
    return out


def _scanned_and_planned(fasta, loaded, chrom: str, start: int, end: int):
    """The region scanned by the one-region command (600 bp tiles, min_context 300), and each
    of its bases' (tile start, context) in the workflow's plan of the same region."""
    from carbon_vep.model.engine import Engine
    from carbon_vep.scan.tiles import scan_region

    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)
    tiles = TileSettings(600, 300)
    with open_reference(fasta) as reference:
        positions = scan_region(engine, reference, chrom, start, end, tiles)
        return positions, _windows(reference, {chrom: [(start, end)]}, tiles)


# ---- A: the one-region command is planned as the workflow's scans are -----------------------
def test_region_scan_skips_n_and_iupac_and_restarts_context_after_a_gap(edge, loaded):
    from carbon_vep.scan.tiles import snv_scores

    fasta, contigs = edge
    positions, planned = _scanned_and_planned(fasta, loaded, "chr1", 2399, 3600)
    assert set(positions["ref"].unique()) <= set("ACGT")  # no N, no R row
    expected = [
        p for p in range(2399, 3600) if contigs["chr1"][p] in "ACGT"
    ]  # every ACGT base once
    assert (positions["pos"] - 1).to_list() == expected
    first = positions.filter(pl.col("pos") == GAP[1] + 1).row(0, named=True)
    assert first["context_bp"] == 0  # never a context of N tokens
    after_r = positions.filter(pl.col("pos") == 3501 + 1).row(0, named=True)
    assert after_r["context_bp"] == 0
    # the same base gets the same window as in the workflow's plan
    got = {
        ("chr1", p - 1): c for p, c in zip(positions["pos"], positions["context_bp"], strict=True)
    }
    assert got == {key: context for key, (_, context) in planned.items()}
    snvs = snv_scores(positions)
    assert snvs.height == 3 * positions.height
    assert snvs["score"].is_finite().all() and snvs["score_conditional"].is_finite().all()


def test_a_short_contig_is_scored_whole_with_the_plans_contexts(edge, loaded):
    """chrShort, 10 bp: a tile is whole 6-mers, so bases 7-10 are scored from the one tile
    that ends on the contig's end (bases 5-10), context 2-5 (docs/scans.md); the region command
    used to leave them unscored, and both now agree."""
    fasta, _ = edge
    positions, planned = _scanned_and_planned(fasta, loaded, "chrShort", 0, 10)
    assert positions["pos"].to_list() == list(range(1, 11))
    assert positions["context_bp"].to_list() == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5]
    assert positions["context_bp"].to_list() == [planned["chrShort", b][1] for b in range(10)]


def test_region_without_a_scorable_base_is_refused_before_the_model_loads(edge, tmp_path, caplog):
    fasta, _ = edge
    out = tmp_path / "pos.parquet"
    common = ["--reference", str(fasta), "--model", str(tmp_path / "no-model"), "--out", str(out)]
    code = main(
        ["scan", "--region", "chr1:2501-2900", "--tile-bp", "600", "--min-context", "300"] + common
    )
    assert code == 2 and not out.exists()
    assert "nothing to scan" in caplog.text and "400 bp N / non-ACGT" in caplog.text
    caplog.clear()
    code = main(["scan", "--region", "chrN:1-600"] + common)
    assert code == 2 and not out.exists() and "nothing to scan" in caplog.text


def test_target_pieces_count_what_is_skipped(edge):
    from carbon_vep.scan.targets import target_pieces

    fasta, _ = edge
    with open_reference(fasta) as reference:
        pieces, counts = target_pieces(reference, {"chr1": [(2399, 3600)]})
    assert [(p.start, p.end) for p in pieces] == [(2399, 2500), (2900, 3500), (3501, 3600)]
    assert counts["chr1"].skipped_non_acgt_bp == 401 and counts["chr1"].n_runs == 2


# ---- B: a tile longer than the model's context, refused at plan time --------------------------
def _model_folder(tmp_path, positions):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": positions}))
    return folder


def test_a_tile_longer_than_the_models_context_is_refused_by_the_plan(edge, tmp_path, caplog):
    fasta, _ = edge
    folder = _model_folder(tmp_path, 8192)
    with open_reference(fasta) as reference:
        targets = resolve_targets(["chr1"], reference.lengths)
        with pytest.raises(ContextTooLongError, match=r"16,001 positions .* supports 8,192"):
            plan_scan(
                reference,
                targets,
                TileSettings(96_000, 24_000),
                ScanChunkSettings(),
                {"m": str(folder)},
            )
        ok = plan_scan(
            reference,
            targets,
            TileSettings(49_146, 24_000),
            ScanChunkSettings(),
            {"m": str(folder)},
        )
        assert ok["notes"] == []
        hub = plan_scan(
            reference,
            targets,
            TileSettings(96_000, 24_000),
            ScanChunkSettings(),
            {"h": "org/not-fetched"},
        )
    assert hub["notes"] == [
        "model h: tile_bp not checked against its context here: a Hub model (its config is "
        "read when its job loads it)"
    ]
    out = tmp_path / "plan.json"
    argv = ["plan-scan", "--reference", str(fasta), "--regions", "chr1", "--tile-bp", "96000"]
    code = main(argv + [f"--model=m={folder}", "--out", str(out)])
    assert code == 2 and not out.exists() and "lower `--tile-bp` to at most 49,146" in caplog.text


# ---- C: the neutral BED's contigs, checked at plan time ----------------------------------------
def test_neutral_contigs_missing_from_the_reference_are_named_at_plan_time(edge, tmp_path, caplog):
    fasta, _ = edge
    bed = tmp_path / "neutral.bed"
    bed.write_text("chr1\t0\t100\nchr1_KI270706v1_random\t0\t50\nchrZ\t5\t9\nchrZ\t20\t30\n")
    out = tmp_path / "plan.json"
    argv = ["plan-scan", "--reference", str(fasta), "--regions", "chr1"]
    argv += ["--tile-bp", "600", "--min-context", "300", "--out", str(out)]
    with caplog.at_level(logging.WARNING):
        assert main(argv + ["--neutral-regions", str(bed)]) == 0
    note = "3 intervals on 2 contigs not in the reference ignored (chr1_KI270706v1_random, chrZ)"
    assert note in caplog.text and note in json.loads(out.read_text())["notes"][0]
    other = tmp_path / "other.bed"
    other.write_text("chrZ\t5\t9\n")
    out.unlink()
    assert main(argv + ["--neutral-regions", str(other)]) == 2 and not out.exists()
    assert "no interval lies on a contig of the reference" in caplog.text
    past = tmp_path / "past.bed"
    past.write_text("chrShort\t0\t20\n")
    assert main(argv + ["--neutral-regions", str(past)]) == 2
    assert "past.bed:line 1: end 20 is past the end of chrShort" in caplog.text


def test_a_neutral_bed_that_overlaps_no_target_is_refused_at_plan_time(edge, tmp_path, caplog):
    """Its calibration would find no neutral SNV after every chunk was scored: refused by the
    plan, before any model job. Intervals half-open: ending where the target starts (or
    starting where it ends) is no overlap; one base in is."""
    fasta, _ = edge
    out = tmp_path / "plan.json"
    argv = ["plan-scan", "--reference", str(fasta), "--regions", "chr1:1001-2000"]
    argv += ["--tile-bp", "600", "--min-context", "300", "--out", str(out)]

    def plan_with(name: str, lines: str) -> int:
        bed = tmp_path / name
        bed.write_text(lines)
        return main([*argv, "--neutral-regions", str(bed)])

    assert plan_with("elsewhere.bed", "chrShort\t0\t10\nchr1\t0\t1000\nchr1\t2000\t2400\n") == 2
    assert not out.exists()
    assert "elsewhere.bed: neutral_regions: none of its intervals overlaps the scan's regions " in (
        caplog.text
    )
    assert "(chr1:1,001-2,000)" in caplog.text
    assert plan_with("first_base.bed", "chr1\t0\t1001\n") == 0 and out.exists()
    out.unlink()
    assert plan_with("last_base.bed", "chr1\t1999\t2400\n") == 0 and out.exists()


def test_a_scan_whose_bases_all_lack_min_context_is_refused_at_plan_time(edge, tmp_path, caplog):
    """No base would be ranked, so its calibration would stop after every chunk was scored:
    refused by the plan. chr1's longest ACGT run before a gap is its first 2,500 bases, whose
    last tile ends on the gap and starts at base 4 (2,496 bp, whole 6-mers): 2,495 bp of left
    context at most, so ranked at min_context 2,495, not at 2,496, as the tiler itself says."""
    fasta, _ = edge
    with open_reference(fasta) as reference:
        targets = resolve_targets(["chr1"], reference.lengths)
        for min_context in (2495, 2496):
            windows = _windows(reference, targets, TileSettings(3000, min_context))
            most = max(context for _, context in windows.values())
            assert most == 2495
    argv = ["plan-scan", "--reference", str(fasta), "--regions", "chr1", "--tile-bp", "3000"]
    out = tmp_path / "plan.json"
    assert main([*argv, "--min-context", "2496", "--out", str(out)]) == 2 and not out.exists()
    assert (
        "no SNV of this scan would be ranked (get a PHRED): a base needs min_context (2,496 bp) "
        "of ACGT left context in its tile, and the scan's bases get at most 2,495"
    ) in caplog.text
    assert main([*argv, "--min-context", "2495", "--out", str(out)]) == 0 and out.exists()


# ---- D, E: refused when the config is read; named errors, not tracebacks ----------------------
SCAN = {"reference": "r.fa", "build": "toy1", "regions": "all"}
MODELS = {"m": {"path": "x"}}


def test_tracks_reference_genome_needs_a_hosted_build():
    tracks = {**SCAN, "tracks": True, "tracks_reference": "genome"}
    with pytest.raises(
        ConfigError, match=r"scans\.g: tracks_reference: genome .* 'toy1'.*relative"
    ):
        RunConfig.from_dict({"models": MODELS, "scans": {"g": tracks}})
    RunConfig.from_dict({"models": MODELS, "scans": {"g": {**tracks, "build": "GRCh38"}}})
    RunConfig.from_dict({"models": MODELS, "scans": {"g": {**tracks, "tracks_reference": "auto"}}})


def test_min_context_leaving_no_room_in_a_tile_is_refused_by_key_and_flag(tmp_path, caplog):
    from carbon_vep.config.workflow import read_run_config

    config = {"models": MODELS, "scans": {"g": {**SCAN, "tile_bp": 600, "min_context": 600}}}
    with pytest.raises(
        ConfigError,
        match=r"scans\.g: the config key `min_context` = 600 leaves no bases .* `tile_bp` = 600",
    ):
        read_run_config(config, "c.yaml", check_inputs=False)
    fasta = write_fasta(tmp_path / "g.fa", {"chr1": random_dna(1000, 1)})
    out = tmp_path / "plan.json"
    base = ["plan-scan", "--reference", str(fasta), "--out", str(out)]
    assert main(base + ["--regions", "chr1", "--tile-bp", "600", "--min-context", "600"]) == 2
    assert "`--min-context` = 600 leaves no bases to score" in caplog.text
    assert main(base + ["--regions", "chr1:100-50"]) == 2 and not out.exists()
    assert "regions (--regions): region 'chr1:100-50' is empty" in caplog.text


def test_a_scan_folder_above_its_models_names_the_model_folders(tmp_path, caplog):
    """`--scan results/scans/<scan>` (the plan's folder, not the model's): the error names the
    folders below that hold a scan.json, the path the user meant."""
    scan = tmp_path / "scans" / "hg38"
    for model in ("carbon3b", "carbon8b"):
        (scan / model).mkdir(parents=True)
        (scan / model / "scan.json").write_text("{}")
    (scan / "plan.json").write_text("{}")
    out = tmp_path / "c.tsv.gz"
    assert main(["concat-scan", "--scan", str(scan), "--out", str(out)]) == 2
    assert f"{scan}: not a scan's output folder (no scan.json)" in caplog.text
    assert f"one folder a model: {scan}/carbon3b, {scan}/carbon8b" in caplog.text
    caplog.clear()
    assert main(["concat-scan", "--scan", str(tmp_path), "--out", str(out)]) == 2
    assert caplog.text.rstrip().endswith("not a scan's output folder (no scan.json)")
    assert not out.exists()
