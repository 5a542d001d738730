"""A whole multi-contig genome scanned through the real Snakefile with the demo model: one config
entry (`regions: all`) -> plan checkpoint -> chunk jobs -> per-contig Parquet + tabix TSV (each
contig large enough for its own files here; tests/scan/test_scan_contig_names.py groups small
ones);
a chunk job killed mid-write is redone alone and the merged files are byte-identical; a panel is
annotated from the scan without a model.

The genome is built from the shipped lambda phage genome (resources/genome): two contigs with
assembly gaps (N runs, upper and lower case), soft-masked bases, and a run of 3 ACGT bases
between gaps (too short for one 6-mer: counted, not scored)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pysam
import pytest
import yaml
from support.cluster import run_snakemake, selected, start_snakemake, workflow_env
from support.files import write_fasta
from support.scans import scan_tsv_rows
from support.slurm import REASON as SLURM_REASON
from support.slurm import THROUGH_CPU_PARTITION, slurm_jobs

from carbon_vep.scan.targets import acgt_runs

pytestmark = pytest.mark.workflow
ROOT = Path(__file__).resolve().parents[2]
LAMBDA = ROOT / "resources/genome/lambda_phage.fa"
TILE_BP, MIN_CONTEXT, CHUNK_BP = 600, 240, 1500
GROUP_BP = 1500  # chrA (3,000 scored bases) and chrB (1,800) each get their own files
# chrB is named as an HLA allele: `*` and `:` in its name, `@2A` and `@3A` in its file names
# (and in its merge job's wildcards, which the SLURM executor puts into the job's log path)
CHR_B = "HLA-B*07:02:01"
CHR_B_FILE = "HLA-B@2A07@3A02@3A01"
SCAN = "results/scans/genome/demo"
MERGED = ("positions/", "calibration/counts/")  # what merge_scan_file and count_scan_file write
LOOKUP = "results/lookup/demo/scores.parquet"
TARGETS = ("--cores", "2", f"{SCAN}/summary.json", f"{SCAN}/summary.md", LOOKUP)
KILLED_CHUNK = 1  # the bases of chrA on both sides of its gap


def _lambda() -> str:
    return "".join(line.strip() for line in LAMBDA.read_text().splitlines()[1:])


def _genome() -> dict[str, str]:
    seq = _lambda()
    chr_a = seq[:1800] + "N" * 100 + seq[1800:3000]
    chr_b = (
        "NN"
        + seq[10_000:10_600]
        + seq[10_600:10_900].lower()
        + seq[10_900:11_200]
        + "nnnn"
        + seq[11_200:11_203]
        + "N" * 10
        + seq[12_000:12_600]
    )
    return {"chrA": chr_a, CHR_B: chr_b}


def _panel_records(genome: dict[str, str]) -> list[tuple[str, int, str, str]]:
    """SNVs on chrA (scored) and on chrB's 3 ACGT bases between gaps (not scanned)."""
    alt_of = {b: "G" if b != "G" else "T" for b in "ACGT"}
    short = 2 + 1200 + 4 + 1  # chrB's 3 ACGT bases between gaps (1-based)
    return [
        ("chrA", 100, genome["chrA"][99], alt_of[genome["chrA"][99]]),
        ("chrA", 2500, genome["chrA"][2499], alt_of[genome["chrA"][2499]]),
        (CHR_B, short, genome[CHR_B][short - 1], alt_of[genome[CHR_B][short - 1]]),
    ]


def _write_vcf(path: Path, records) -> Path:
    lines = ["##fileformat=VCFv4.2", "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"]
    lines += [f"{c}\t{p}\t.\t{r}\t{a}\t.\t.\t." for c, p, r, a in records]
    path.write_text("\n".join(lines) + "\n")
    return path


def _config(workdir: Path, shared: Path, model_dir: Path) -> Path:
    config = {
        "outdir": "results",
        "chunk_bp": CHUNK_BP,
        "models": {
            "demo": {
                "path": str(model_dir),
                "trust_remote_code": True,  # the demo model's tokenizer ships as remote code
                "dtype": "float32",
                "device": "cpu",
                "batch_size": 4,
            }
        },
        "scans": {
            "genome": {
                "reference": str(shared / "genome.fa"),
                "build": "lambda_test",
                "regions": "all",
                "tile_bp": TILE_BP,
                "min_context": MIN_CONTEXT,
                "group_bp": GROUP_BP,
            }
        },
        "datasets": {  # a panel scored by lookup in the scan: no model job
            "lookup": {
                "panel": str(shared / "panel.vcf"),
                "format": "vcf",
                "reference": str(shared / "genome.fa"),
                "build": "lambda_test",
                "recipe": "from_scan",
                "scan": "genome",
            }
        },
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """The genome, in one place for every run (configs and outputs then match byte for byte)."""
    folder = tmp_path_factory.mktemp("genome")
    write_fasta(folder / "genome.fa", _genome())
    _write_vcf(folder / "panel.vcf", _panel_records(_genome()))
    return folder


# the SLURM run's targets: each contig's positions file (merge_scan_file) and its counts
# (count_scan_file)
MERGED_FILES = tuple(f"{SCAN}/positions/{name}.parquet" for name in ("chrA", CHR_B_FILE))
COUNTED_FILES = tuple(f"{SCAN}/calibration/counts/{name}.parquet" for name in ("chrA", CHR_B_FILE))


@pytest.fixture(scope="module", autouse=True)
def slurm_scan(request, tmp_path_factory, shared, demo_model_dir):
    """The scan through real SLURM (test_scan_through_real_slurm_gives_the_local_files), started
    before this file's first test: it is mostly waits on the SLURM plugin's polling, which
    overlap the local runs of the tests meanwhile. None where no SLURM controller answers or
    that test is not selected."""
    if SLURM_REASON is not None or not selected(
        request, test_scan_through_real_slurm_gives_the_local_files
    ):
        yield None
        return
    workdir = tmp_path_factory.mktemp("slurm_scan") / "slurm"
    workdir.mkdir()
    # the profile's chunk_bp (one GPU class) set back to this test's: the same config, the same
    # chunks, the same files
    run = start_snakemake(
        workdir,
        _config(workdir, shared, demo_model_dir),
        *THROUGH_CPU_PARTITION,
        "--config",
        f"chunk_bp={CHUNK_BP}",
        "--",
        *MERGED_FILES,
        *COUNTED_FILES,
        timeout=900,
    )
    yield run, workdir
    run.stop()


@pytest.fixture(scope="module")
def genome_run(tmp_path_factory, shared, demo_model_dir) -> Path:
    workdir = tmp_path_factory.mktemp("scan_run")
    result = run_snakemake(workdir, _config(workdir, shared, demo_model_dir), *TARGETS)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def _positions(run: Path) -> pl.DataFrame:
    return pl.read_parquet(run / SCAN / "positions").sort("chrom", "pos")


def test_every_acgt_base_once_and_counts_add_up(genome_run):
    plan = json.loads((genome_run / "results/scans/genome/plan.json").read_text())
    summary = json.loads((genome_run / SCAN / "summary.json").read_text())
    positions = _positions(genome_run)
    genome = _genome()
    expected, skipped, short = [], 0, 0
    for chrom, seq in genome.items():
        runs = acgt_runs(seq)
        skipped += len(seq) - sum(b - a for a, b in runs)
        short += sum(b - a for a, b in runs if b - a < 6)
        expected += [(chrom, p + 1) for a, b in runs if b - a >= 6 for p in range(a, b)]
    expected.sort()  # as _positions sorts: by contig name, then position
    got = list(zip(positions["chrom"].cast(pl.Utf8), positions["pos"], strict=True))
    assert got == expected  # every ACGT base exactly once, no N
    totals = plan["totals"]
    assert totals["scored_bp"] == len(expected) == summary["bases_written"]
    assert totals["snvs"] == 3 * len(expected)
    assert totals["skipped_non_acgt_bp"] == skipped == 100 + 2 + 4 + 10
    assert totals["n_runs"] == 4 and totals["unscorable_bp"] == short == 3
    length = sum(len(s) for s in genome.values())
    assert totals["targeted_bp"] == length == totals["scored_bp"] + skipped + short
    assert totals["chunks"] == -(-len(expected) // CHUNK_BP)
    refs = [genome[c][p - 1].upper() for c, p in expected]
    assert positions["ref"].to_list() == refs
    logs = positions.select(pl.col(f"log_fns_{b}").cast(pl.Float64) for b in "ACGT")
    probs = logs.select(pl.all().exp()).sum_horizontal()
    assert (probs - 1).abs().max() < 2e-3  # float16 log-marginals: 2^-11 relative each


def test_context_stops_at_gaps_and_contig_starts(genome_run):
    """A base after a gap gets its context back to the gap's end, as at a contig start."""
    positions = _positions(genome_run)
    genome = _genome()
    for chrom, seq in genome.items():
        part = positions.filter(pl.col("chrom") == chrom)
        starts = np.zeros(len(seq), dtype=np.int64)
        for a, b in acgt_runs(seq):
            starts[a:b] = a
        back = part["pos"].to_numpy() - 1 - starts[part["pos"].to_numpy() - 1]
        context = part["context_bp"].to_numpy()
        assert (context <= back).all()
        assert (context >= np.minimum(back, MIN_CONTEXT)).all()
        assert (part["phase"].to_numpy() == context % 6).all()


def test_scores_match_next_token_scoring_at_phase_zero(genome_run, loaded):
    from carbon_vep.model.engine import Engine

    engine = Engine(loaded.model, loaded.vocab, loaded.device, batch_size=4)
    genome = _genome()
    phase0 = _positions(genome_run).filter(pl.col("phase") == 0)
    after_gap = phase0.filter((pl.col("chrom") == "chrA") & (pl.col("pos") > 1900)).head(3)
    picks = pl.concat([phase0.gather([5, 60, 200, phase0.height - 1]), after_gap])
    for row in picks.iter_rows(named=True):
        end = row["pos"] - 1
        context = genome[row["chrom"]][end - row["context_bp"] : end].upper()
        assert "N" not in context and len(context) % 6 == 0
        lp = engine.next_base_log_probs([engine.vocab.encode(context)], "dna_block")[0]
        expected = lp[[0, 2, 3, 1]]  # ATCG -> ACGT
        got = [row[f"log_fns_{b}"] for b in "ACGT"]
        assert got == pytest.approx(expected, rel=2**-10, abs=1e-5), row  # float16 storage


def test_tabix_files_answer_region_queries(genome_run):
    positions = _positions(genome_run)
    for chrom, name in (("chrA", "chrA"), (CHR_B, CHR_B_FILE)):
        path = genome_run / SCAN / f"snvs/{name}.tsv.gz"
        header = [
            line
            for line in pysam.BGZFile(str(path)).read().decode().splitlines()
            if line.startswith("#")
        ]
        text = "\n".join(header)
        assert text.isascii()
        with pysam.TabixFile(str(path)) as tabix:  # pysam decodes header lines as ASCII
            assert list(tabix.header) == header
        for needed in (
            "##model=",
            "##revision=",
            "##normalization=dna_block",
            "##sign=",
            "##column=score",
            "#chrom\tpos\tref\talt\tscore",
        ):
            assert needed in text, needed
        with pysam.TabixFile(str(path)) as tabix:
            assert list(tabix.contigs) == [chrom]
            rows = [line.split("\t") for line in tabix.fetch(chrom, 1899, 1910)]
        expect = positions.filter((pl.col("chrom") == chrom) & pl.col("pos").is_between(1900, 1910))
        assert len(rows) == 3 * expect.height
        assert [int(r[1]) for r in rows] == sorted(3 * expect["pos"].to_list())
        for r in rows:
            base = expect.filter(pl.col("pos") == int(r[1])).row(0, named=True)
            assert r[2] == base["ref"] and r[3] != r[2] and r[3] in "ACGT"
            score = base[f"log_fns_{r[2]}"] - base[f"log_fns_{r[3]}"]
            assert float(r[4]) == pytest.approx(score, abs=0.005 + 1e-6)
    chr_a = positions.filter(pl.col("chrom") == "chrA")
    assert chr_a.filter(pl.col("pos").is_between(1801, 1900)).height == 0  # the gap


def test_summary_reports_bytes_per_snv(genome_run):
    summary = json.loads((genome_run / SCAN / "summary.json").read_text())
    files = list((genome_run / SCAN).glob("positions/*.parquet"))
    assert sorted(f.name for f in files) == [f"{CHR_B_FILE}.parquet", "chrA.parquet"]
    assert summary["parquet_bytes"] == sum(f.stat().st_size for f in files)
    assert summary["parquet_bytes_per_snv"] > 0 and summary["tsv_bytes_per_snv"] > 0
    report = (genome_run / SCAN / "summary.md").read_text()
    assert "scan plan" in report and "scan summary (measured)" in report


KILL_SHIM = '''#!{python}
"""carbon-vep, except that scan-chunk of chunk $SHIM_CHUNK is killed (SIGKILL) after writing
its first row group under the temporary name."""
import os, signal, sys

from carbon_vep import cli
from carbon_vep.scan import positions as scan_positions

argv = sys.argv[1:]
if argv[:1] == ["scan-chunk"] and argv[argv.index("--chunk") + 1] == os.environ["SHIM_CHUNK"]:
    write = scan_positions.BaseWriter.write

    def write_then_die(self, frame):
        write(self, frame)
        self.writer.close()
        os.kill(os.getpid(), signal.SIGKILL)

    scan_positions.BaseWriter.write = write_then_die
sys.exit(cli.main(argv))
'''


def _outputs(run: Path) -> dict[str, bytes]:
    scan = run / SCAN
    files = [
        *scan.glob("positions/*.parquet"),
        *scan.glob("snvs/*"),
        *scan.glob("calibration/*.*"),
        *scan.glob("calibration/counts/*"),
    ]
    return {str(f.relative_to(scan)): f.read_bytes() for f in sorted(files)}


def _killing_env(tmp_path: Path, shim: str, **extra: str) -> dict[str, str]:
    """The workflow's environment with `shim` first on PATH as `carbon-vep`."""
    bindir = tmp_path / "shim"
    bindir.mkdir()
    (bindir / "carbon-vep").write_text(shim.format(python=sys.executable))
    (bindir / "carbon-vep").chmod(0o755)
    env = workflow_env(**extra)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    return env


SUMMARY = ("summary.json", "summary.md", "scan.json")  # the targets: lost, they are redone


def _finished_run_without(genome_run: Path, dest: Path, *removed: str) -> Path:
    """A copy of the finished scan (outputs and Snakemake's records) with `removed` (paths under
    the scan's folder) deleted: what a run redoes after losing them with the targets (an
    intermediate file lost alone is not redone while the targets are up to date)."""
    from support.cluster import copy_run

    workdir = copy_run(genome_run, dest)
    for name in removed:
        path = workdir / SCAN / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return workdir


def test_killed_chunk_is_redone_alone_with_identical_files(
    genome_run, shared, demo_model_dir, tmp_path
):
    """chrA's files lost, so both of its chunks are scored again (their Parquet is temporary),
    and the job of chunk 1 is killed mid-write: the rerun redoes that chunk alone."""
    lost = ("positions/chrA.parquet", "calibration/counts/chrA.parquet", *SUMMARY)
    workdir = _finished_run_without(genome_run, tmp_path / "resume", *lost)
    config = _config(workdir, shared, demo_model_dir)
    env = _killing_env(tmp_path, KILL_SHIM, SHIM_CHUNK=f"{KILLED_CHUNK:05d}")
    killed = run_snakemake(workdir, config, *TARGETS, "--keep-going", env=env)
    assert killed.returncode != 0
    log = killed.stdout + killed.stderr
    started = re.findall(r"wildcards: scan=genome, model=demo, chunk=(\d+)", log)
    assert sorted(started) == ["00000", f"{KILLED_CHUNK:05d}"]  # chrA's two chunks
    chunks = workdir / SCAN / "chunks"
    name = f"chunk_{KILLED_CHUNK:05d}"
    assert not (chunks / f"{name}.parquet").exists()
    assert list(chunks.glob(f".{name}.parquet.tmp-*"))  # the killed job's half-written file
    assert not (workdir / SCAN / "positions/chrA.parquet").exists()  # its merge waits for it
    assert (chunks / "chunk_00000.parquet").exists()

    rerun = run_snakemake(workdir, config, *TARGETS)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    log = rerun.stdout + rerun.stderr
    redone = re.findall(r"wildcards: scan=genome, model=demo, chunk=(\d+)", log)
    assert redone == [f"{KILLED_CHUNK:05d}"]  # the other chunks are not scored again
    assert not list(chunks.glob(".*.tmp-*"))  # the stale temporary file is gone
    assert _outputs(workdir) == _outputs(genome_run)
    shutil.rmtree(workdir, ignore_errors=True)


# ---- calibration ----------------------------------------------------------------------------
def _ranked(run: Path, rows: pl.DataFrame) -> pl.Series:
    """Which rows are on the scales: their base's left context (the Parquet's) is at least
    min_context."""
    bases = pl.read_parquet(run / SCAN / "positions", columns=["chrom", "pos", "context_bp"])
    joined = rows.join(bases, on=["chrom", "pos"], how="left", maintain_order="left")
    return joined["context_bp"] >= MIN_CONTEXT


# the bases with less than MIN_CONTEXT bp of left context: the first MIN_CONTEXT of each ACGT run
# long enough to tile (chrA: its start, after its gap; chrB: after its leading N, after the gap)
SHORT_CONTEXT_BASES = 4 * MIN_CONTEXT


def test_phred_of_every_tsv_row_equals_a_direct_sort(genome_run):
    """PHRED = -10 log10(rank / total), rank = how many ranked SNVs score at least as high (as
    printed), computed here by sorting the scores of the scan's TSVs whose base had at least
    min_context bp of left context; the others (after a contig start or a gap) have none."""
    rows = scan_tsv_rows(genome_run / SCAN)
    assert rows.columns == ["chrom", "pos", "ref", "alt", "score", "phred"]
    assert rows["score"].null_count() == 0 and rows.height == 3 * 4800  # every SNV scored
    ranked = _ranked(genome_run, rows)
    assert rows["phred"].is_null().to_list() == (~ranked).to_list()
    assert (~ranked).sum() == 3 * SHORT_CONTEXT_BASES
    rows = rows.filter(ranked)
    scores = np.sort(rows["score"].to_numpy())
    at_least = len(scores) - np.searchsorted(scores, rows["score"].to_numpy(), side="left")
    expected = 10 * np.log10(len(scores) / at_least)
    assert np.allclose(rows["phred"].to_numpy(), expected, atol=0.05 + 1e-6)  # one decimal
    calibration = json.loads((genome_run / SCAN / "calibration/calibration.json").read_text())
    assert calibration["total"] == len(scores) == 3 * (4800 - SHORT_CONTEXT_BASES)
    assert calibration["unranked_snvs"] == 3 * SHORT_CONTEXT_BASES
    top = rows.filter(pl.col("score") == rows["score"].max())
    if top.height == 1:  # a unique highest score ranks first
        assert top["phred"][0] == pytest.approx(10 * np.log10(len(scores)), abs=0.05)
    order = np.argsort(rows["score"].to_numpy(), kind="stable")
    assert np.all(np.diff(rows["phred"].to_numpy()[order]) >= 0)  # monotone in the score


def _cells_by_hand(genome: dict[str, str], rows: pl.DataFrame) -> list[tuple[str, str]]:
    """(level, context + alt) of each SNV by slicing the genome: the pentanucleotide when its 5
    bases are ACGT, else the trinucleotide, else the global cell (an N or a contig end next to
    the SNV)."""
    out = []
    for chrom, pos, alt in rows.select("chrom", "pos", "alt").iter_rows():
        seq, i = genome[chrom].upper(), pos - 1
        penta, tri = seq[max(i - 2, 0) : i + 3], seq[max(i - 1, 0) : i + 2]
        if i >= 2 and len(penta) == 5 and set(penta) <= set("ACGT"):
            out.append(("pentanucleotide", penta + alt))
        elif i >= 1 and len(tri) == 3 and set(tri) <= set("ACGT"):
            out.append(("trinucleotide", tri + alt))
        else:
            out.append(("global", ""))  # one global cell, whatever the alternate base
    return out


def test_context_means_equal_a_direct_group_by_with_gaps_and_contig_ends(genome_run):
    """The means of the ranked SNVs (those with min_context bp of left context), by hand; the
    SNVs next to a gap or a contig end on their right fall back to coarser cells."""
    rows = scan_tsv_rows(genome_run / SCAN)
    rows = rows.filter(_ranked(genome_run, rows))
    cells = _cells_by_hand(_genome(), rows)
    frame = rows.with_columns(
        pl.Series("level", [c[0] for c in cells]),
        pl.Series("cell", [c[1] for c in cells]),
        (pl.col("score") * 100).round().cast(pl.Int64).alias("key"),  # the printed score, x100
    )
    levels = dict(frame.group_by("level").len().iter_rows())
    assert levels["trinucleotide"] > 0 and levels["global"] > 0  # gaps and ends are counted
    contexts = pl.read_parquet(genome_run / SCAN / "calibration/contexts.parquet")
    by_level = dict(contexts.group_by("level").agg(pl.col("n_scored").sum()).iter_rows())
    assert by_level == levels  # no SNV lost, none in the wrong level
    direct = frame.group_by("level", "cell").agg(
        pl.col("key").mean().alias("direct"), pl.len().alias("n")
    )
    ours = contexts.with_columns((pl.col("context") + pl.col("alt")).alias("cell")).join(
        direct, on=["level", "cell"], how="inner"
    )
    assert ours.height == direct.height  # every cell the SNVs fall in is in the table
    assert (ours["n_neutral"] == ours["n"]).all()  # neutral set = every scanned SNV
    assert np.allclose(ours["mean_key_neutral"], ours["direct"])


def test_a_panel_from_the_scan_carries_phred_and_the_calibrated_score(genome_run):
    """The from_scan dataset's rows: the TSV's PHRED for the same SNV (none at chrA:100, 99 bp
    from the contig's start, as in the TSV); calibrated = the printed score minus the mean its
    cell uses."""
    scores = pl.read_parquet(genome_run / LOOKUP).sort("row_id")
    scored = scores.filter(pl.col("status") == "scored")
    assert scored["pos"].to_list() == [100, 2500] and scored["window_bp"].to_list() == [99, 599]
    assert scored["phred"].is_null().to_list() == [True, False]
    assert scored["calibrated_phred"].is_null().to_list() == [True, False]
    assert scored["calibrated"].null_count() == 0
    rows = scan_tsv_rows(genome_run / SCAN)
    contexts = pl.read_parquet(genome_run / SCAN / "calibration/contexts.parquet")
    genome = _genome()
    for row in scored.iter_rows(named=True):
        tsv = rows.filter(
            (pl.col("chrom") == row["chrom"])
            & (pl.col("pos") == row["pos"])
            & (pl.col("alt") == row["alt"])
        )
        if tsv["phred"][0] is None:
            assert row["phred"] is None
        else:
            assert row["phred"] == pytest.approx(tsv["phred"][0], abs=1e-5)  # one decimal
        seq, i = genome[row["chrom"]].upper(), row["pos"] - 1
        cell = contexts.filter(
            (pl.col("level") == "pentanucleotide")
            & (pl.col("context") == seq[i - 2 : i + 3])
            & (pl.col("alt") == row["alt"])
        )
        expected = np.floor(tsv["score"][0] * 100 - cell["mean_key"][0] + 0.5) / 100
        assert row["calibrated"] == pytest.approx(expected, abs=1e-6)


def test_a_calibration_of_another_model_is_refused(genome_run, shared, tmp_path):
    other = tmp_path / "calibration"
    shutil.copytree(genome_run / SCAN / "calibration", other)
    record = json.loads((other / "calibration.json").read_text())
    (other / "calibration.json").write_text(json.dumps({**record, "model": "another/model"}))
    out = tmp_path / "a.parquet"
    args = ("--scan", str(genome_run / SCAN), "--panel", str(shared / "panel.vcf"))
    refused = _annotate(*args, "--calibration", str(other), "--out", str(out))
    assert refused.returncode == 2 and not out.exists()
    assert "calibration made for other scores (model: calibrated for 'another/model'" in (
        refused.stderr
    )
    same = _annotate(
        *args, "--calibration", str(genome_run / SCAN / "calibration"), "--out", str(out)
    )
    assert same.returncode == 0, same.stderr


KILL_CALIBRATION_SHIM = '''#!{python}
"""carbon-vep, except that calibrate-scan is killed (SIGKILL) after writing its first table."""
import os, signal, sys

from carbon_vep import cli

argv = sys.argv[1:]
if argv[:1] == ["calibrate-scan"]:
    write_parquet = __import__("polars").DataFrame.write_parquet

    def write_then_die(self, *args, **kwargs):
        write_parquet(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    __import__("polars").DataFrame.write_parquet = write_then_die
sys.exit(cli.main(argv))
'''


def test_a_killed_calibration_is_redone_with_identical_files(
    genome_run, shared, demo_model_dir, tmp_path
):
    """The calibration and what follows it lost, and its job killed after writing its first
    table: the rerun redoes it (not the scan) and every file equals the first run's."""
    tables = ("phred.parquet", "calibrated_phred.parquet", "contexts.parquet", "calibration.json")
    lost = [f"calibration/{name}" for name in tables] + ["snvs", *SUMMARY]
    workdir = _finished_run_without(genome_run, tmp_path / "calibrate", *lost)
    config = _config(workdir, shared, demo_model_dir)
    env = _killing_env(tmp_path, KILL_CALIBRATION_SHIM)
    killed = run_snakemake(workdir, config, *TARGETS, env=env)
    assert killed.returncode != 0
    assert "rule calibrate_scan:" in killed.stdout + killed.stderr
    folder = workdir / SCAN / "calibration"
    assert not (folder / "calibration.json").exists()  # written last: marks the folder complete
    assert not (folder / "phred.parquet").exists()  # the killed write left its temporary name
    assert not (workdir / SCAN / "snvs").exists()  # no TSV without the calibration
    rerun = run_snakemake(workdir, config, *TARGETS)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "rule scan_chunk:" not in rerun.stdout + rerun.stderr  # the scan is not redone
    assert _outputs(workdir) == _outputs(genome_run)
    shutil.rmtree(workdir, ignore_errors=True)


def test_dry_run_prints_the_plan(genome_run, shared, demo_model_dir):
    config = _config(genome_run, shared, demo_model_dir)
    result = run_snakemake(genome_run, config, "-n", "--forceall")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "bases scored:" in result.stderr and "jobs (chunks):" in result.stderr
    assert "Estimated GPU-hours" in result.stderr


def test_plan_scan_command_prints_estimates(shared, tmp_path):
    out = subprocess.run(
        [
            "carbon-vep",
            "plan-scan",
            "--reference",
            str(shared / "genome.fa"),
            "--regions",
            "chrA",
            f"{CHR_B}:1-500",
            "--chunk-bp",
            "1000",
            "--tile-bp",
            "600",
            "--min-context",
            "240",
            "--model",
            "big=HuggingFaceBio/Carbon-3B",
            "--out",
            str(tmp_path / "plan.json"),
        ],
        capture_output=True,
        text=True,
        env=workflow_env(),
        check=True,
    )
    assert "bases scored:" in out.stdout and "| big | Carbon-3B |" in out.stdout
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["totals"]["skipped_non_acgt_bp"] == 100 + 2
    assert all(sum(p["end"] - p["start"] for p in c) <= 1000 for c in plan["chunks"])


def test_annotate_panel_from_the_scan_without_a_model(genome_run, shared, tmp_path):
    genome = _genome()
    moved = dict(genome)  # the panel's reference differs from the scanned one at chrA:200
    other = "A" if genome["chrA"][199] != "A" else "C"
    moved["chrA"] = genome["chrA"][:199] + other + genome["chrA"][200:]
    reference = write_fasta(tmp_path / "other.fa", moved)
    alt_of = {b: "G" if b != "G" else "T" for b in "ACGT"}
    scored, _, short = _panel_records(genome)
    records = [
        scored,
        (CHR_B, 1500, genome[CHR_B][1499].upper(), "A" if genome[CHR_B][1499] != "a" else "C"),
        short,
        ("chrA", 200, other, alt_of[other]),  # the scan's base here is another
        ("chrA", 300, genome["chrA"][299:301], genome["chrA"][299]),  # a deletion: skipped
    ]
    vcf = _write_vcf(tmp_path / "panel.vcf", records)
    out = tmp_path / "annotated.parquet"
    subprocess.run(  # no --build: the scan's; the reference differs in one base only
        [
            "carbon-vep",
            "annotate",
            "--scan",
            str(genome_run / SCAN),
            "--panel",
            str(vcf),
            "--reference",
            str(reference),
            "--out",
            str(out),
        ],
        check=True,
        env=workflow_env(),
        capture_output=True,
        text=True,
    )
    rows = pl.read_parquet(out).sort("row_id")
    assert rows["status"].to_list() == [
        "scored",
        "scored",
        "not_scanned",
        "ref_mismatch",
        "skipped",
    ]
    positions = _positions(genome_run)
    for i in (0, 1):
        chrom, pos, ref, alt = records[i]
        base = positions.filter((pl.col("chrom") == chrom) & (pl.col("pos") == pos)).row(
            0, named=True
        )
        expected = base[f"log_fns_{ref}"] - base[f"log_fns_{alt}"]
        assert rows["score"][i] == pytest.approx(expected, abs=1e-6)
        assert rows["window_bp"][i] == base["context_bp"]
    assert rows.filter(pl.col("status") != "scored")["score"].null_count() == 3
    assert "the scan's base here is" in rows["reason"][3]


def _annotate(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["carbon-vep", "annotate", *argv], env=workflow_env(), capture_output=True, text=True
    )


def test_annotate_takes_the_scans_build_and_reference(genome_run, shared, tmp_path):
    """No --build and no --reference: the scan's (scan.json); a --build of the same assembly
    is accepted, another refused; a reference whose contigs have other lengths is refused."""
    record = json.loads((genome_run / SCAN / "scan.json").read_text())
    assert record["build"] == "lambda_test"
    assert record["reference"] == str(shared / "genome.fa")  # absolute, as the config gives it
    assert record["contigs"]["chrA"] == {"file": "chrA", "length": 3000 + 100, "scored_bp": 3000}
    scan, vcf = str(genome_run / SCAN), str(shared / "panel.vcf")
    out = tmp_path / "a.parquet"
    done = _annotate("--scan", scan, "--panel", vcf, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "build lambda_test" in done.stderr
    assert pl.read_parquet(out)["status"].to_list() == ["scored", "scored", "not_scanned"]
    key = ["row_id", "status", "score"]
    assert pl.read_parquet(out).select(key).equals(pl.read_parquet(genome_run / LOOKUP).select(key))
    same = _annotate("--scan", scan, "--panel", vcf, "--build", "lambda_test", "--out", str(out))
    assert same.returncode == 0, same.stderr

    other = _annotate("--scan", scan, "--panel", vcf, "--build", "hg38", "--out", str(out))
    assert other.returncode != 0
    assert "--build hg38 (GRCh38) disagrees with the scan's build lambda_test" in other.stderr
    longer = dict(_genome(), chrA=_genome()["chrA"] + "ACGT")
    fasta = write_fasta(tmp_path / "longer.fa", longer)
    moved = _annotate("--scan", scan, "--panel", vcf, "--reference", str(fasta), "--out", "x")
    assert moved.returncode != 0
    assert "contig 'chrA' is 3,104 bp here but 3,100 bp in the scan's reference" in moved.stderr
    renamed = write_fasta(tmp_path / "renamed.fa", {f"{c}_v2": s for c, s in _genome().items()})
    names = _annotate("--scan", scan, "--panel", vcf, "--reference", str(renamed), "--out", "x")
    assert names.returncode != 0 and "none of the scan's contigs" in names.stderr


def test_dataset_recipe_from_scan_scores_by_lookup(genome_run):
    scores = pl.read_parquet(genome_run / LOOKUP).sort("row_id")
    assert scores["status"].to_list() == ["scored", "scored", "not_scanned"]
    assert set(scores["recipe"].drop_nulls()) == {"from_scan"}
    positions = _positions(genome_run)
    for i, (chrom, pos, ref, alt) in enumerate(_panel_records(_genome())[:2]):
        base = positions.filter((pl.col("chrom") == chrom) & (pl.col("pos") == pos)).row(
            0, named=True
        )
        expected = base[f"log_fns_{ref}"] - base[f"log_fns_{alt}"]
        assert scores["score"][i] == pytest.approx(expected, abs=1e-6)
    log = genome_run / "logs/results/lookup/demo/annotate_from_scan.log"
    assert "annotated 3 rows" in log.read_text()
    assert not (genome_run / "results/lookup/shards").exists()  # no shard, no model job


def test_scan_through_real_slurm_gives_the_local_files(genome_run, slurm_scan):
    """The same scan on the single-node SLURM of scripts/start_local_slurm.sh up to its merged
    files: the plan checkpoint, the model's input record, every chunk (the model jobs) and the
    merges are sbatch jobs, and the merged Parquet and counts equal the local run's. (The rules
    after the merges, calibration, TSVs and summary, are CPU jobs like merge_scores, which
    tests/workflow/test_slurm.py sends through the scheduler; each level of them costs a round
    trip of the scheduler's polling, 12-33 s here, so they are left out.)"""
    if SLURM_REASON is not None:
        pytest.skip(SLURM_REASON)
    run, workdir = slurm_scan
    result = run.result()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    merged = sorted((genome_run / SCAN).glob("positions/*.parquet"))
    assert [str(path.relative_to(genome_run)) for path in merged] == sorted(MERGED_FILES)
    plan = json.loads((workdir / "results/scans/genome/plan.json").read_text())
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", output)
    # plan, the model's input record (sha256 of its files), the chunks, a merge and a count a
    # file
    assert len(submitted) == 1 + 1 + plan["totals"]["chunks"] + 2 * len(merged)
    assert "record_model_inputs" in output and "rule calibrate_scan" not in output
    jobs = slurm_jobs(output)
    assert {(partition, state) for _, partition, state in jobs} == {("cpu", "COMPLETED")}
    assert _outputs(workdir) == {
        name: data for name, data in _outputs(genome_run).items() if name.startswith(MERGED)
    }


# ---- what a config edit reruns ----------------------------------------------------------------
# a dry run indents the jobs of a group (write_scan_tsv and index_scan_tsv: group scan_tsv)
JOB_LINE = re.compile(r"^[ \t]*(?:local)?(?:rule|checkpoint) (\w+):", re.MULTILINE)
MODEL_AND_MERGE = {"scan_chunk", "merge_scan_file"}  # the GPU jobs, and what needs their chunks


def _edited_config(workdir: Path, shared: Path, model_dir: Path, **scan_keys) -> Path:
    """The finished scan's config with `scan_keys` set on its entry (None: the key removed),
    and `_other` as a second scan entry when given."""
    path = _config(workdir, shared, model_dir)
    config = yaml.safe_load(path.read_text())
    other = scan_keys.pop("_other", None)
    config["scans"]["genome"].update(scan_keys)
    if other:
        config["scans"]["other"] = other
    path.write_text(yaml.safe_dump(config))
    return path


def _planned_jobs(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stderr[-3000:]
    return JOB_LINE.findall(result.stdout + result.stderr)


def test_a_complete_scan_plans_nothing(genome_run, shared, demo_model_dir):
    config = _config(genome_run, shared, demo_model_dir)
    result = run_snakemake(genome_run, config, "-n", *TARGETS)
    assert _planned_jobs(result) == []


@pytest.mark.parametrize(
    "edit",
    [
        {"tracks": True},  # the tracks of a finished scan: exported from its outputs
        {"tracks": True, "tracks_reference": "copy"},
        {"tsv_calibrated": True},  # the TSV's columns
        {"context_min_count": 5},  # the calibration
        {"tsv_decimals": 3},  # the counts and TSVs: recounted from the Parquet files
        {"_other": {"reference": "x", "build": "lambda_test", "regions": "chrA"}},
    ],
    ids=["tracks", "tracks_reference", "tsv_calibrated", "context_min_count", "decimals", "entry"],
)
def test_a_config_edit_reruns_no_chunk_of_a_finished_scan(
    genome_run, shared, demo_model_dir, tmp_path, edit
):
    """`snakemake -n` after an edit that cannot change the scores: no scan_chunk job (nor a merge,
    which would need the temporary chunks again); what the edit changes is planned."""
    from support.cluster import copy_run

    workdir = copy_run(genome_run, tmp_path / "edited")
    if "_other" in edit:
        edit["_other"]["reference"] = str(shared / "genome.fa")
    config = _edited_config(workdir, shared, demo_model_dir, **edit)
    jobs = _planned_jobs(run_snakemake(workdir, config, "-n", *TARGETS, f"{SCAN}/summary.json"))
    assert not MODEL_AND_MERGE & set(jobs), jobs
    if "tracks" in edit:
        assert "scan_chunk" not in jobs and "export_track" not in jobs  # not asked for here
    if "tsv_decimals" in edit:
        recount = {
            "count_scan_file",
            "calibrate_scan",
            "write_scan_tsv",
            "index_scan_tsv",
            "summarize_scan",
        }
        assert recount <= set(jobs) <= recount | {"annotate_from_scan"}, jobs
    shutil.rmtree(workdir, ignore_errors=True)


def test_tracks_turned_on_export_the_finished_scan(genome_run, shared, demo_model_dir, tmp_path):
    from support.cluster import copy_run

    workdir = copy_run(genome_run, tmp_path / "tracks")
    config = _edited_config(workdir, shared, demo_model_dir, tracks=True)
    jobs = _planned_jobs(run_snakemake(workdir, config, "-n"))
    assert "export_track" in jobs and "write_track_hub" in jobs
    assert not MODEL_AND_MERGE & set(jobs) and "summarize_scan" not in jobs, jobs
    shutil.rmtree(workdir, ignore_errors=True)


def test_a_new_group_bp_rewrites_the_plan_and_keeps_the_chunks(
    genome_run, shared, demo_model_dir, tmp_path
):
    """group_bp rewrites plan.json (the checkpoint reruns, so a dry run cannot tell): the run
    itself scores no chunk again and merges no file whose contigs stay the same (both contigs
    keep their own files at 1,000 scored bases)."""
    from support.cluster import copy_run

    workdir = copy_run(genome_run, tmp_path / "regrouped")
    config = _edited_config(workdir, shared, demo_model_dir, group_bp=1000)
    result = run_snakemake(workdir, config, *TARGETS)
    jobs = _planned_jobs(result)
    assert "plan_scan" in jobs and not MODEL_AND_MERGE & set(jobs), jobs
    plan = json.loads((workdir / "results/scans/genome/plan.json").read_text())
    assert plan["group_bp"] == 1000
    assert _outputs(workdir) == _outputs(genome_run)
    shutil.rmtree(workdir, ignore_errors=True)


def test_a_reference_path_with_a_space(shared, demo_model_dir, tmp_path):
    """Every path a rule's command names is quoted: a reference, a regions BED (and outdir)
    with a space. The BED keeps the scan to chrA's first 600 bases (one chunk job, not four):
    the lookup's other two variants are rows that say they were not scanned."""
    workdir = tmp_path / "spaced"
    workdir.mkdir()
    (tmp_path / "my genome").mkdir()
    fasta = tmp_path / "my genome" / "my genome.fa"
    shutil.copy(shared / "genome.fa", fasta)
    shutil.copy(shared / "panel.vcf", tmp_path / "my genome" / "my panel.vcf")
    bed = tmp_path / "my genome" / "my regions.bed"
    bed.write_text("chrA\t0\t600\n")
    path = _config(workdir, shared, demo_model_dir)
    config = yaml.safe_load(path.read_text())
    config["outdir"] = "my results"
    config["scans"]["genome"]["reference"] = str(fasta)
    config["scans"]["genome"]["regions"] = [str(bed)]
    config["datasets"]["lookup"]["reference"] = str(fasta)
    config["datasets"]["lookup"]["panel"] = str(tmp_path / "my genome" / "my panel.vcf")
    path.write_text(yaml.safe_dump(config))
    lookup = LOOKUP.replace("results/", "my results/", 1)
    result = run_snakemake(workdir, path, "--cores", "2", lookup)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "unrecognized arguments" not in result.stdout + result.stderr
    assert f"--reference '{fasta}'" in result.stdout + result.stderr  # printed as it ran
    scores = pl.read_parquet(workdir / lookup)
    assert scores.height == 3
    # chrA:100 inside the BED's region; chrA:2500 outside it; chrB's site is not scanned anyway
    assert scores["status"].to_list() == ["scored", "not_scanned", "not_scanned"]
