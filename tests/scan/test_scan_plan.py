"""Scan planning without a model: targets (all, contigs, regions, BED, aliases), ACGT runs and
gaps, chunks of at most chunk_bp scored bases, every ACGT base in exactly one tile."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from support.files import random_dna, write_fasta

from carbon_vep.config.stages import ScanChunkSettings, TileSettings
from carbon_vep.errors import InputError
from carbon_vep.genome.contigs import encode_name
from carbon_vep.genome.reference import open_reference
from carbon_vep.scan.plan import (
    MAX_STEM,
    chunk_pieces,
    describe_plan,
    file_stem,
    output_files,
    plan_scan,
)
from carbon_vep.scan.targets import acgt_runs, resolve_targets

LENGTHS = {"chr1": 1000, "chr2": 500}


def test_targets_all_regions_bed_and_aliases(tmp_path):
    assert resolve_targets(["all"], LENGTHS) == {"chr1": [(0, 1000)], "chr2": [(0, 500)]}
    bed = tmp_path / "t.bed"
    bed.write_text("track name=x\n1\t10\t20\n1\t20\t30\nchr1\t25\t40\n2\t0\t5\n1\t100\t110\n")
    assert resolve_targets([str(bed)], LENGTHS) == {
        "chr1": [(10, 40), (100, 110)],  # overlapping and adjacent intervals merged
        "chr2": [(0, 5)],
    }
    assert resolve_targets(["2:11-20", "chr2"], LENGTHS) == {"chr2": [(0, 500)]}
    hla = {"HLA-A*01:01:01:01": 3000, "HLA-B*07:02": 2000, "chr1:1-5": 10}
    assert resolve_targets(["HLA-A*01:01:01:01:11-20", "HLA-B*07:02", "chr1:1-5"], hla) == {
        "HLA-A*01:01:01:01": [(10, 20)],  # the name holds `:`; the region after the last one
        "HLA-B*07:02": [(0, 2000)],
        "chr1:1-5": [(0, 10)],  # a contig named like a region is the contig
    }


@pytest.mark.parametrize(
    ("regions", "message"),
    [
        (["chr3"], "contig 'chr3' is not in the reference"),
        (["chr1:900-1,200"], "past the end of chr1"),
        (["missing.bed"], "BED file of the scan's regions not found"),
    ],
)
def test_bad_targets_are_named(regions, message):
    with pytest.raises(InputError, match=message):
        resolve_targets(regions, LENGTHS)


def test_a_beds_names_are_resolved_as_each_alone_on_a_reference_of_many_contigs(tmp_path):
    """Each name a BED repeats is resolved once (ContigAliases: an index by canonical name,
    not every reference contig per line): exact names, aliases (Ensembl, RefSeq, `M`), contigs
    the reference lacks counted per line where allowed, and a name two contigs could mean
    refused even then."""
    lengths = {f"chr{c}": 1000 for c in [*range(1, 23), "X", "M"]}
    lengths |= {f"scaffold_{i}": 1000 for i in range(2000)}
    bed = tmp_path / "n.bed"
    names = ["1", "MT", "NC_000002.12", "scaffold_7", "chrUn_gl000220", "chrX"]
    bed.write_text("".join(f"{n}\t{10 * k}\t{10 * k + 5}\n" for k in range(50) for n in names))
    absent: dict[str, int] = {}
    targets = resolve_targets([str(bed)], lengths, absent=absent)
    assert list(targets) == ["chr1", "chr2", "chrX", "chrM", "scaffold_7"]  # reference order
    assert all(len(spans) == 50 for spans in targets.values())
    assert absent == {"chrUn_gl000220": 50}
    with pytest.raises(InputError, match=r"n.bed:line 5: contig 'chrUn_gl000220' is not in"):
        resolve_targets([str(bed)], lengths)
    bed.write_text("chr17\t0\t5\nChr17\t0\t5\n")
    with pytest.raises(InputError, match=r"line 2: contig 'Chr17' matches several"):
        resolve_targets([str(bed)], {**lengths, "17": 1000}, absent={})


def test_bad_bed_line_names_file_and_line(tmp_path):
    bed = tmp_path / "t.bed"
    bed.write_text("chr1\t10\t20\nchr1\tten\t20\n")
    with pytest.raises(InputError, match=r"t.bed:line 2.*not integers"):
        resolve_targets([str(bed)], LENGTHS)


def test_acgt_runs_skip_gaps_of_any_case():
    assert acgt_runs("NNACGTnnacgtN") == [(2, 6), (8, 12)]
    assert acgt_runs("") == []


@pytest.mark.parametrize("block_bp", [1, 5, 6, 97, 1000, 5000])
def test_a_contigs_runs_read_in_blocks_are_its_runs_read_whole(tmp_path, block_bp):
    """The plan reads a contig a block at a time: runs across a block's edge are joined, a gap
    on an edge ends one; the runs are those of the contig read whole."""
    from carbon_vep.scan.targets import contig_acgt_runs

    seq = random_dna(1000, 9)
    # gaps at 0, on the block edges 95-97 and 194-195, an IUPAC base, one at the contig's end
    for at, width in ((0, 3), (95, 3), (194, 1), (500, 1), (999, 1)):
        seq = seq[:at] + "N" * width + seq[at + width :]
    seq = seq[:600] + "r" + seq[601:]
    fasta = write_fasta(tmp_path / "g.fa", {"c1": seq, "allN": "N" * 40})
    with open_reference(fasta) as reference:
        assert contig_acgt_runs(reference, "c1", block_bp) == acgt_runs(seq)
        assert contig_acgt_runs(reference, "allN", block_bp) == []


def _pieces_base_by_base(seq: str, spans: list[tuple[int, int]]):
    """What target_pieces must give, read one base at a time: each span's ACGT bases grouped by
    the maximal ACGT run of the contig they lie in (kept where that run holds a 6-mer), and the
    span's non-ACGT bases and non-ACGT runs."""
    is_acgt = [b in "ACGTacgt" for b in seq]
    run_of, start = [None] * len(seq), None
    for i, ok in enumerate([*is_acgt, False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            run_of[start:i] = [(start, i)] * (i - start)
            start = None
    pieces, skipped, n_runs, short = [], 0, 0, 0
    for a, b in spans:
        skipped += sum(not ok for ok in is_acgt[a:b])
        n_runs += sum(not is_acgt[i] and (i == a or is_acgt[i - 1]) for i in range(a, b))
        for i in range(a, b):
            run = run_of[i]
            if run is None:
                continue
            if run[1] - run[0] < 6:
                short += 1
            elif pieces and pieces[-1][2:] == run and pieces[-1][1] == i:
                pieces[-1] = (pieces[-1][0], i + 1, *run)
            else:
                pieces.append((i, i + 1, *run))
    return pieces, skipped, n_runs, short


def test_many_targets_on_a_contig_of_many_gaps_are_cut_at_every_run(tmp_path):
    """An exome-like BED on a draft assembly: thousands of targets, thousands of gaps. Each
    target's pieces are found by bisecting the contig's runs (2026-12: every target used to be
    compared with every run of its contig, 119 s for chr1 and chr2 of a draft-like hg38 with an
    exome's 31,830 targets there); checked against the base-by-base reading, with targets that
    start and end on a run's first and last base, inside a gap, across several runs and on runs
    shorter than a 6-mer."""
    import random

    from carbon_vep.scan.targets import target_pieces

    rng = random.Random(11)
    seq = list(random_dna(30_000, 5))
    for _ in range(1000):  # gaps of 1-20 N or IUPAC bases, some leaving ACGT runs under a 6-mer
        at, width = rng.randrange(len(seq) - 20), rng.randint(1, 20)
        seq[at : at + width] = rng.choice("NnRY") * width
    seq = "".join(seq)
    runs = acgt_runs(seq)
    edges = sorted({x for run in runs for x in run})
    bounds = sorted({rng.choice(edges) + rng.choice((-1, 0, 0, 1)) for _ in range(3000)})
    bounds += [rng.randrange(len(seq)) for _ in range(1000)]
    bounds = sorted({min(max(x, 0), len(seq)) for x in bounds})
    spans = [(a, b) for a, b in zip(bounds[::2], bounds[1::2], strict=False) if a < b]
    fasta = write_fasta(tmp_path / "g.fa", {"c1": seq})
    with open_reference(fasta) as reference:
        pieces, counts = target_pieces(reference, {"c1": spans})
    expected, skipped, n_runs, short = _pieces_base_by_base(seq, spans)
    assert len(spans) > 1000 and len(runs) > 500  # many of both
    assert short > 0 and skipped > 0
    assert [(p.start, p.end, p.seg_start, p.seg_end) for p in pieces] == expected
    assert counts["c1"].skipped_non_acgt_bp == skipped
    assert counts["c1"].n_runs == n_runs
    assert counts["c1"].unscorable_bp == short
    assert counts["c1"].scored_bp == sum(e - s for s, e, _, _ in expected)


@pytest.mark.parametrize(("chunk_bp", "tile_bp", "context"), [(1000, 120, 60), (1777, 600, 240)])
def test_every_acgt_base_in_one_tile_and_chunks_bounded(tmp_path, chunk_bp, tile_bp, context):
    seq = random_dna(4000, 3)
    seq = seq[:700] + "N" * 50 + seq[750:760] + "n" * 5 + seq[765:768] + "N" * 9 + seq[777:]
    fasta = write_fasta(tmp_path / "g.fa", {"c1": seq, "c2": random_dna(900, 4)})
    with open_reference(fasta) as reference:
        targets = resolve_targets(["all"], reference.lengths)
        tiles = TileSettings(tile_bp, context)
        plan = plan_scan(reference, targets, tiles, ScanChunkSettings(chunk_bp=chunk_bp))
        scored: dict[str, list[int]] = {"c1": [], "c2": []}
        for index in range(len(plan["chunks"])):
            pieces = chunk_pieces(plan, index)
            assert sum(p.end - p.start for p in pieces) <= chunk_bp
            for piece in pieces:
                for tile in piece.tiles(tiles):
                    window = reference.fetch(piece.chrom, tile.start, tile.end)
                    assert "N" not in window and len(window) % 6 == 0  # no N token, ever
                    assert len(window) <= tile_bp
                    back = tile.score_start - piece.seg_start
                    # a run's last bases are scored from the whole-6-mer tile ending on the run's
                    # end: in a run shorter than a tile, up to 5 bases less than all there is
                    slack = 5 if tile.end == piece.seg_end else 0
                    assert tile.score_start - tile.start >= min(context, back) - slack
                    scored[piece.chrom] += range(tile.score_start, tile.score_end)
    for chrom, positions in scored.items():
        if chrom == "c2":
            assert sorted(positions) == list(range(900))
            continue
        runs = [(a, b) for a, b in acgt_runs(seq) if b - a >= 6]
        assert sorted(positions) == [p for a, b in runs for p in range(a, b)]
    totals = plan["totals"]
    assert totals["skipped_non_acgt_bp"] == 50 + 5 + 9 and totals["n_runs"] == 3
    assert totals["unscorable_bp"] == 3  # the 3 bases between two gaps
    assert totals["scored_bp"] + 64 + 3 == totals["targeted_bp"] == 4900


def _base_tiles(reference, targets, tiles: TileSettings, chunk_bp: int) -> dict:
    """(contig, base) -> the window [start, end) that scores it, over every chunk of the plan."""
    plan = plan_scan(reference, targets, tiles, ScanChunkSettings(chunk_bp=chunk_bp))
    out = {}
    for index in range(len(plan["chunks"])):
        for piece in chunk_pieces(plan, index):
            for tile in piece.tiles(tiles):
                for base in range(tile.score_start, tile.score_end):
                    assert (piece.chrom, base) not in out  # scored once
                    out[piece.chrom, base] = (tile.start, tile.end)
    return out, len(plan["chunks"])


@pytest.mark.parametrize("regions", [["all"], ["c1:301-3900", "c2:50-880"]])
def test_a_bases_tile_does_not_depend_on_how_the_scan_is_cut_into_jobs(tmp_path, regions):
    """chunk_bp differs between profiles (30 Mbp on an A10, 150 Mbp on an H100): every base is
    scored from the same window whatever it is, so its scores are the same (the tile a chunk's
    edge cuts is scored in part on each side). Before, each chunk started its own tiling at its
    first base: a base past the first chunk got another window and other scores."""
    seq = random_dna(4000, 3)
    seq = seq[:700] + "N" * 50 + seq[750:]
    fasta = write_fasta(tmp_path / "g.fa", {"c1": seq, "c2": random_dna(900, 4)})
    tiles = TileSettings(600, 240)
    with open_reference(fasta) as reference:
        targets = resolve_targets(regions, reference.lengths)
        whole, one = _base_tiles(reference, targets, tiles, 100_000)
        for chunk_bp in (1000, 1777, 361):
            cut, chunks = _base_tiles(reference, targets, tiles, chunk_bp)
            assert chunks > one == 1
            assert cut == whole


def test_targets_without_a_scoreable_base_are_refused(tmp_path):
    fasta = write_fasta(tmp_path / "g.fa", {"c1": "N" * 100 + "ACG" + "N" * 20})
    with open_reference(fasta) as reference, pytest.raises(InputError, match="nothing to scan"):
        plan_scan(
            reference,
            resolve_targets(["all"], reference.lengths),
            TileSettings(120, 60),
            ScanChunkSettings(chunk_bp=1000),
        )


# ---- output files: large contigs alone, small ones together -------------------------------
def test_small_contigs_share_files_up_to_group_bp_in_reference_order():
    scored = {
        "chr1": 5000,
        "u1": 400,
        "u2": 600,
        "u3": 1,
        "chr2": 1000,
        "u4": 999,
        "u5": 0,
        "u6": 2,
        "HLA-A*01:01": 998,
    }
    files = output_files(scored, group_bp=1000)
    assert [f["contigs"] for f in files] == [
        ["chr1"],  # >= group_bp: alone
        ["u1", "u2"],  # 1,000: full
        ["u3"],  # closed by chr2, a large contig, after it
        ["chr2"],  # exactly group_bp: alone
        ["u4"],  # u4 + u6 would be 1,001
        ["u6", "HLA-A*01:01"],  # u5 has no scored base: no file
    ]
    assert [f["name"] for f in files] == ["chr1", "u1+1", "u3", "chr2", "u4", "u6+1"]
    assert [f["scored_bp"] for f in files] == [5000, 1000, 1, 1000, 999, 1000]
    alone = output_files(scored, group_bp=1)  # every contig its own files
    assert [f["name"] for f in alone] == [encode_name(c) for c, n in scored.items() if n]


def test_a_shared_file_is_named_after_its_first_contig():
    assert file_stem(["HLA-A*01:01:01:01"]) == "HLA-A@2A01@3A01@3A01@3A01"
    assert file_stem(["HLA-A*01:01:01:01", "HLA-B*07:02"]) == "HLA-A@2A01@3A01@3A01@3A01+1"
    long = "contig_" + "|" * 300  # 900+ characters once encoded
    stem = file_stem([long])
    assert len(stem) <= MAX_STEM and re.fullmatch(r"contig_(@7C)+\+h[0-9a-f]{12}", stem)
    assert file_stem([long + "x"]) != stem and file_stem([long, "b"]) == stem + "+1"


def test_the_plan_lists_output_files_with_their_chunks(tmp_path):
    contigs = {"big": random_dna(3000, 5), **{f"u{i}": random_dna(200, i) for i in range(12)}}
    contigs["gaps"] = "N" * 50
    fasta = write_fasta(tmp_path / "g.fa", contigs)
    with open_reference(fasta) as reference:
        targets = resolve_targets(["all"], reference.lengths)
        chunks = ScanChunkSettings(chunk_bp=2000, group_bp=1000)
        plan = plan_scan(reference, targets, TileSettings(120, 60), chunks)
    names = [f["name"] for f in plan["files"]]
    assert names == ["big", "u0+4", "u5+4", "u10+1"]
    assert plan["totals"]["files"] == 4 and plan["group_bp"] == 1000
    assert plan["contigs"]["u7"]["file"] == "u5+4" and "file" not in plan["contigs"]["gaps"]
    assert plan["contigs"]["big"]["length"] == 3000
    for entry in plan["files"]:  # its chunks are exactly those holding its contigs' bases
        held = {
            i
            for i, chunk in enumerate(plan["chunks"])
            if any(p["chrom"] in entry["contigs"] for p in chunk)
        }
        assert entry["chunks"] == sorted(held)
    assert "output files: 4" in describe_plan(plan)
    assert {f["index"] for f in plan["files"]} == {"tbi"} and ".csi" not in describe_plan(plan)
    # a genome with a contig over 2^29 bp (wheat's): its file gets a .csi, which the plan says
    plan["files"][0]["index"] = "csi"
    assert "tabix index: .csi for 1 file(s) with a contig over 536,870,912 bp" in (
        describe_plan(plan)
    )


def test_names_differing_in_case_alone_get_distinct_file_names():
    """ctg1 and CTG1 would be one file on a case-insensitive file system (macOS, Windows):
    those two, and only those, get `+c` and a digest of their contigs; others keep their name."""
    files = output_files({"ctg1": 50, "CTG1": 50, "chr2": 50, "a": 1, "A": 1}, group_bp=10)
    names = [f["name"] for f in files]
    assert names[2] == "chr2" and len({n.lower() for n in names}) == len(names) == 4
    assert re.fullmatch(r"ctg1\+c[0-9a-f]{8}", names[0])
    assert re.fullmatch(r"CTG1\+c[0-9a-f]{8}", names[1])
    assert names[3] == "a+1"  # a and A share a file: no collision, its name unchanged
    assert [f["name"] for f in output_files({"ctg1": 50, "chr2": 50}, 10)] == ["ctg1", "chr2"]


def test_a_demo_model_is_estimated_at_its_own_shape_a_hub_id_at_its_carbon_size(tmp_path, caplog):
    """The plan runs before the demo model is built: the model rule's flags mark it
    (--demo-model), and it is priced at the shape model.demo builds, not as Carbon-3B (its
    name says no Carbon size); a Hub id keeps the size its name says."""
    from types import SimpleNamespace as Wildcards

    from carbon_vep.cli import main
    from carbon_vep.config.gpus import DEMO_MODEL, GPU_CLASSES
    from carbon_vep.config.run import RunConfig
    from carbon_vep.scan.plan import estimates, gpu_hours
    from carbon_vep.workflow.jobs import Jobs

    fasta = write_fasta(tmp_path / "g.fa", {"c1": random_dna(3000, 5)})
    models = {
        "demo": {"path": str(tmp_path / "demo_model"), "build_demo": True},
        "big": {"path": "HuggingFaceBio/Carbon-8B", "revision": "a" * 40},
    }
    scan = {"reference": str(fasta), "build": "toy1", "regions": "all"}
    run = RunConfig.from_dict(
        {"models": models, "scans": {"g": {**scan, "models": ["demo", "big"]}}}
    )
    flags = shlex.split(Jobs(run).scan_model_paths(Wildcards(scan="g")))
    assert flags[-1] == "--demo-model=demo"
    out = tmp_path / "plan.json"
    argv = ["plan-scan", "--reference", str(fasta), "--regions", "all", "--out", str(out)]
    argv += ["--tile-bp", "600", "--min-context", "240"]
    assert main(argv + flags) == 0
    plan = json.loads(out.read_text())
    estimated = plan["estimates"]["models"]
    assert (estimated["demo"]["shape"], estimated["big"]["shape"]) == (DEMO_MODEL, "Carbon-8B")
    # the same path, marked or not; the hours of a genome (the toy's round to 0) at each shape
    tiles, genome = TileSettings(600, 240), 2_900_000_000
    same = estimates({"scored_bp": genome, "snvs": 0}, tiles, {"d": "x", "h": "x"}, {"d"})
    assert (same["models"]["d"]["shape"], same["models"]["h"]["shape"]) == (DEMO_MODEL, "Carbon-3B")
    for gpu in GPU_CLASSES:
        demo = gpu_hours(genome, tiles, DEMO_MODEL, gpu)
        assert 0 < demo < gpu_hours(genome, tiles, "Carbon-3B", gpu) / 1000
    out.unlink()
    assert main(argv + flags[:1] + ["--demo-model=other"]) == 2 and not out.exists()
    assert "--demo-model other: no --model KEY=PATH of that key" in caplog.text


def test_a_demo_model_not_built_yet_has_its_tiles_checked_against_its_own_context(tmp_path):
    """A demo model the run builds later has no config.json at plan time: its tiles are
    checked against the positions model.demo builds it with (no note calling it a Hub model),
    and a tile past them is refused before any job; a Hub id is still a note."""
    from carbon_vep.config.gpus import DEMO_MAX_POSITIONS
    from carbon_vep.errors import ContextTooLongError
    from carbon_vep.model.context import usable_bp
    from carbon_vep.scan.plan import check_tile_context

    models = {"demo": str(tmp_path / "not_built"), "hub": "HuggingFaceBio/Carbon-3B"}
    fits = usable_bp(DEMO_MAX_POSITIONS, 6)
    notes = check_tile_context(TileSettings(fits, 240), models, {"demo"})
    assert len(notes) == 1 and notes[0].startswith("model hub: tile_bp not checked")
    with pytest.raises(ContextTooLongError, match="model demo"):
        check_tile_context(TileSettings(fits + 6, 240), models, {"demo"})
    # unmarked, the same folder is a model an earlier job copies: a note, not a refusal
    assert len(check_tile_context(TileSettings(fits + 6, 240), models)) == 2
