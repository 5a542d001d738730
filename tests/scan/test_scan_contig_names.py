"""A scan of a genome named as real assemblies are, read back by the field's own tools.

The genome (cut from the shipped lambda phage genome) has an NCBI `gi|...|` contig and an HLA
allele (`HLA-A*01:01:01:01`) large enough for their own files, then smaller HLA, decoy,
unlocalized, unplaced and EBV contigs, 54 draft-assembly contigs (SPAdes `NODE_..._cov_...`,
Canu/Arrow `tig...|arrow`, one name starting with `_`) and an all-N contig: small contigs share
output files (`group_bp`). It is scanned once through the Snakefile with the demo model; then

- tabix (`-l`, `-H`, region queries on every contig), pysam, bcftools annotate, vcfanno,
  DuckDB, polars and pyarrow read every contig back exactly, and bcftools and vcfanno give
  every SNV of a VCF exactly the score `carbon-vep annotate` gives (no --build: the scan's),
  none missing, none on another ALT (6 decimals in the TSV, so the 3 ALTs of a base differ);
- the merge ran as few jobs as there are output files, not one per contig; and a dry run of a
  3,000-contig genome plans a few dozen jobs.

The tools come from Debian (tabix, bcftools, vcfanno) and PyPI (duckdb); `.ci/run` installs
them. A test skips, saying so, only where its tool is missing.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pysam
import pytest
import yaml
from support.cluster import run_snakemake, workflow_env
from support.files import random_dna, write_fasta

from carbon_vep.genome.contigs import decode_name, encode_name
from carbon_vep.scan.targets import acgt_runs

pytestmark = pytest.mark.workflow
ROOT = Path(__file__).resolve().parents[2]
LAMBDA = ROOT / "resources/genome/lambda_phage.fa"
TILE_BP, MIN_CONTEXT, GROUP_BP, DECIMALS = 600, 240, 1_000, 6
SCAN = "results/scans/names/demo"
# bcftools and vcfanno print a Float INFO value with 5-6 significant digits: a PHRED of 35.950123
# comes back as 35.9501 (the scores, under 10 here, keep their 6 decimals)
PHRED_REL = 2e-5
SCORE_HEADER = '##INFO=<ID=CVEP_SCORE,Number=A,Type=Float,Description="carbon-vep scan score">'


def _lambda() -> str:
    return "".join(line.strip() for line in LAMBDA.read_text().splitlines()[1:])


def _genome() -> dict[str, str]:
    seq = _lambda()
    contigs = {
        "gi|9626243|ref|NC_001416.1|": seq[:2000],  # own files
        "HLA-A*01:01:01:01": seq[2000:3200],  # own files
        "HLA-B*07:02:01": seq[3200:3500],
        "chrUn_JTFH01000001v1_decoy": seq[3500:3750],
        "chr1_KI270706v1_random": seq[3750:3950],
        "chrUn_KI270302v1": seq[3950:4100],
        "chrEBV": seq[4100:4300],
        "chrUn_allN": "N" * 120,  # nothing to score: no file, not_scanned
    }
    start = 5000
    for i in range(54):  # draft-assembly contigs of 60-199 bp
        n = 60 + (i * 37) % 140
        if i == 6:
            name = f"_unplaced_{i}"  # a leading `_`: pyarrow would skip such a file name
        elif i % 3:
            name = f"NODE_{i + 1}_length_{n}_cov_{3 + i / 7:.6f}"  # SPAdes
        elif i % 2:
            name = f"tig{i:08d}|arrow"  # Canu, polished by Arrow
        else:
            name = f"chrUn_KN{707606 + i}v1_decoy"
        contigs[name] = seq[start : start + n]
        start += n
    return contigs


def _scored(genome: dict[str, str]) -> dict[str, list[int]]:
    """1-based positions scored per contig: every base of each ACGT run of >= 6."""
    out = {}
    for name, seq in genome.items():
        positions = [p + 1 for a, b in acgt_runs(seq) if b - a >= 6 for p in range(a, b)]
        if positions:
            out[name] = positions
    return out


def _vcf_records(genome: dict[str, str]) -> list[tuple[str, int, str, str]]:
    """Every ALT at the first, a middle and the last base of every scored contig; an SNV whose
    REF is not the reference's; one on the all-N contig."""
    records = []
    for name, positions in _scored(genome).items():
        for pos in sorted({positions[0], positions[len(positions) // 2], positions[-1]}):
            ref = genome[name][pos - 1].upper()
            records += [(name, pos, ref, alt) for alt in "ACGT" if alt != ref]
    wrong = "A" if genome["chrEBV"][9] != "A" else "C"
    records.append(("chrEBV", 10, wrong, "G" if wrong != "G" else "T"))
    records.append(("chrUn_allN", 50, "N", "A"))
    rank = {name: i for i, name in enumerate(genome)}
    return sorted(records, key=lambda r: (rank[r[0]], r[1]))  # a sorted VCF


def _write_vcf(path: Path, genome: dict[str, str], records) -> Path:
    lines = ["##fileformat=VCFv4.2"]
    lines += [f"##contig=<ID={name},length={len(seq)}>" for name, seq in genome.items()]
    lines.append("#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO")
    lines += [f"{c}\t{p}\t.\t{r}\t{a}\t.\t.\t." for c, p, r, a in records]
    path.write_text("\n".join(lines) + "\n")
    return path


def _config(workdir: Path, fasta: Path, model_dir: Path, chunk_bp=20_000, **scan_keys) -> Path:
    config = {
        "outdir": "results",
        "chunk_bp": chunk_bp,
        "models": {
            "demo": {
                "path": str(model_dir),
                "trust_remote_code": True,
                "dtype": "float32",
                "device": "cpu",
                "batch_size": 4,
            }
        },
        "scans": {
            "names": {
                "reference": str(fasta),
                "build": "lambda_names",
                "regions": "all",
                "tile_bp": TILE_BP,
                "min_context": MIN_CONTEXT,
                "group_bp": GROUP_BP,
                "tsv_decimals": DECIMALS,
                **scan_keys,
            }
        },
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _jobs(output: str) -> list[str]:
    """The rule of every job Snakemake ran (its `rule NAME:` lines; `localrule`,
    `localcheckpoint` for jobs on the head node)."""
    return re.findall(r"^(?:local)?(?:rule|checkpoint) (\w+):$", output, re.MULTILINE)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package; .ci/run installs it)")
    return path


def _run(*argv: str, cwd: Path, **kwargs) -> str:
    out = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, env=workflow_env(), **kwargs
    )
    assert out.returncode == 0, f"{argv}: {out.stderr[-2000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def scan(tmp_path_factory, demo_model_dir) -> Path:
    workdir = tmp_path_factory.mktemp("names")
    genome = _genome()
    fasta = write_fasta(workdir / "genome.fa", genome)
    _write_vcf(workdir / "query.vcf", genome, _vcf_records(genome))
    config = _config(workdir, fasta, demo_model_dir)
    result = run_snakemake(workdir, config, "--cores", "2", f"{SCAN}/summary.json")
    assert result.returncode == 0, result.stderr[-3000:]
    (workdir / "snakemake.log").write_text(result.stdout + result.stderr)
    return workdir


@pytest.fixture(scope="module")
def record(scan) -> dict:
    """scan.json, its output files as {name: contigs} (in reference order)."""
    record = json.loads((scan / SCAN / "scan.json").read_text())
    record["files"] = {entry["name"]: entry["contigs"] for entry in record["files"]}
    return record


@pytest.fixture(scope="module")
def annotated_rows(scan) -> pl.DataFrame:
    """`carbon-vep annotate` of the query VCF, no --build, no --reference (the scan's)."""
    out = scan / "annotated.parquet"
    _run(
        "carbon-vep",
        "annotate",
        "--scan",
        SCAN,
        "--panel",
        "query.vcf",
        "--out",
        str(out),
        cwd=scan,
    )
    return pl.read_parquet(out)


@pytest.fixture(scope="module")
def annotated(annotated_rows) -> dict[tuple[str, int, str, str], float | None]:
    keys = annotated_rows.select("chrom", "pos", "ref", "alt").iter_rows()
    return dict(zip(keys, annotated_rows["score"], strict=True))


@pytest.fixture(scope="module")
def annotated_phred(annotated_rows) -> dict[tuple[str, int, str, str], float | None]:
    """annotate's PHRED, as the TSV prints it (at its 6 decimals): none where the scan had less
    than min_context bp of left context (most of these small contigs), `.` in the TSV."""
    unranked = annotated_rows["window_bp"] < MIN_CONTEXT
    assert annotated_rows["phred"].is_null().to_list() == unranked.fill_null(True).to_list()
    assert 0 < unranked.sum() < annotated_rows.height - 2 - 12  # 18 SNVs of 6 bases ranked
    keys = annotated_rows.select("chrom", "pos", "ref", "alt").iter_rows()
    return dict(zip(keys, annotated_rows["phred"], strict=True))


# ---- files, names and jobs ----------------------------------------------------------------
def test_small_contigs_share_files_and_every_contig_is_in_exactly_one(scan, record):
    scored = _scored(_genome())
    files = record["files"]
    assert [c for contigs in files.values() for c in contigs] == list(scored)  # reference order
    groups = list(files.values())
    for (name, contigs), after in zip(files.items(), [*groups[1:], None], strict=True):
        bases = [len(scored[c]) for c in contigs]
        if len(contigs) == 1:
            assert name == encode_name(contigs[0])
        else:  # a run of small contigs, at most group_bp scored bases, named after the first
            assert max(bases) < GROUP_BP and sum(bases) <= GROUP_BP
            assert name == f"{encode_name(contigs[0])}+{len(contigs) - 1}"
        if after and max(bases) < GROUP_BP:  # closed only when the next contig did not fit
            assert sum(bases) + len(scored[after[0]]) > GROUP_BP
        assert decode_name(name.split("+")[0]) == contigs[0]
        assert shlex.quote(name) == name  # no shell quoting needed
    assert files["gi@7C9626243@7Cref@7CNC_001416.1@7C"] == ["gi|9626243|ref|NC_001416.1|"]
    assert files["HLA-A@2A01@3A01@3A01@3A01"] == ["HLA-A*01:01:01:01"]
    assert "HLA-B@2A07@3A02@3A01+" in next(iter(n for n in files if "+" in n))[:22]
    assert len(files) == 11  # 2 large contigs; 61 small ones (8,259 bases) in 9 files
    assert record["contigs"]["chrUn_allN"]["file"] is None
    on_disk = sorted(p.name for p in (scan / SCAN / "snvs").glob("*.tsv.gz"))
    assert on_disk == sorted(f"{n}.tsv.gz" for n in files)
    assert sorted(p.stem for p in (scan / SCAN / "positions").glob("*.parquet")) == sorted(files)


def test_one_merge_job_per_output_file(scan, record):
    jobs = _jobs((scan / "snakemake.log").read_text())
    assert jobs.count("merge_scan_file") == len(record["files"]) == 11
    assert jobs.count("scan_chunk") == 1
    assert jobs.count("count_scan_file") == 11
    assert jobs.count("write_scan_tsv") == jobs.count("index_scan_tsv") == 11
    assert jobs.count("calibrate_scan") == 1
    # plan, the model's input record, the chunk, a merge, a count, a TSV and its index a
    # file, the calibration and the summary: not 1 per contig
    assert len(jobs) == 1 + 1 + 1 + 11 + 11 + 1 + 11 + 11 + 1
    merge_logs = list((scan / f"logs/{SCAN}").glob("merge_scan_file_*.log"))
    assert len(merge_logs) == 11


def test_a_dry_run_of_3000_contigs_plans_a_few_dozen_jobs(demo_model_dir, tmp_path):
    genome = {f"chrUn_JTFH0100{i:04d}v1_decoy": random_dna(300, i) for i in range(3000)}
    fasta = write_fasta(tmp_path / "many.fa", genome)
    config = _config(tmp_path, fasta, demo_model_dir, chunk_bp=300_000, group_bp=30_000)
    planned = run_snakemake(tmp_path, config, "--cores", "1", "--until", "plan_scan")
    assert planned.returncode == 0, planned.stderr[-2000:]
    dry = run_snakemake(tmp_path, config, "-n", f"{SCAN}/summary.json")
    assert dry.returncode == 0, dry.stderr[-2000:]
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", dry.stdout + dry.stderr, re.MULTILINE))
    assert int(stats["merge_scan_file"]) == 30  # 900,000 scored bases, 30,000 a file
    assert int(stats["write_scan_tsv"]) == int(stats["count_scan_file"]) == 30
    assert int(stats["index_scan_tsv"]) == 30
    assert int(stats["scan_chunk"]) == 3
    # + the model's input record, the calibration and the summary
    assert int(stats["total"]) == 30 + 30 + 30 + 30 + 3 + 1 + 1 + 1


# ---- tabix and pysam ----------------------------------------------------------------------
def test_tabix_lists_headers_and_regions_on_every_contig(scan, record):
    tabix = _tool("tabix")
    scored, genome = _scored(_genome()), _genome()
    for name, contigs in record["files"].items():
        path = f"{SCAN}/snvs/{name}.tsv.gz"
        assert _run(tabix, "-l", path, cwd=scan).splitlines() == contigs
        header = _run(tabix, "-H", path, cwd=scan)
        assert header.isascii() and "##sign=score = log m(ref) - log m(alt)" in header
        assert [
            h[len("##contig=") :] for h in header.splitlines() if h.startswith("##contig=")
        ] == contigs
        with pysam.TabixFile(str(scan / path)) as handle:
            assert list(handle.header) == header.splitlines()  # ASCII: pysam reads it
            assert list(handle.contigs) == contigs
        for contig in contigs:
            last = scored[contig][-1]
            rows = _run(tabix, path, f"{contig}:{last - 1}-{last}", cwd=scan).splitlines()
            assert [r.split("\t")[:2] for r in rows] == 3 * [[contig, str(last - 1)]] + 3 * [
                [contig, str(last)]
            ]
            assert rows[-1].split("\t")[2] == genome[contig][last - 1].upper()
            whole = _run(tabix, path, contig, cwd=scan).splitlines()
            assert len(whole) == 3 * len(scored[contig])


# ---- the Parquet dataset: DuckDB, polars, pyarrow -----------------------------------------
def _expected_positions() -> pl.DataFrame:
    return pl.DataFrame(
        [(c, p) for c, positions in _scored(_genome()).items() for p in positions],
        schema={"chrom": pl.Utf8, "pos": pl.Int64},
        orient="row",
    )


def test_duckdb_polars_and_pyarrow_read_every_contig_back(scan):
    duckdb = pytest.importorskip("duckdb", reason="duckdb not installed (pip install duckdb)")
    import pyarrow.dataset as ds

    folder = scan / SCAN / "positions"
    expected = _expected_positions().sort("chrom", "pos")
    by_polars = pl.read_parquet(folder).sort("chrom", "pos")
    by_arrow = pl.from_arrow(ds.dataset(folder).to_table()).sort("chrom", "pos")
    query = f"SELECT * FROM read_parquet('{folder}/*.parquet', hive_partitioning = true)"
    by_duckdb = duckdb.sql(query).pl().sort("chrom", "pos")
    for table in (by_polars, by_arrow, by_duckdb):
        assert table.select("chrom", "pos").equals(expected)
        assert table.select(pl.exclude("chrom", "pos")).equals(
            by_polars.select(pl.exclude("chrom", "pos"))
        )
    hla = duckdb.sql(  # one contig, by its name: the files' chrom statistics find it
        f"SELECT pos FROM read_parquet('{folder}/*.parquet') WHERE chrom = 'HLA-B*07:02:01' "
        "ORDER BY pos"
    ).pl()
    assert hla["pos"].to_list() == _scored(_genome())["HLA-B*07:02:01"]
    lazy = pl.scan_parquet(folder / "*.parquet").filter(pl.col("chrom") == "_unplaced_6")
    assert lazy.collect().height == len(_scored(_genome())["_unplaced_6"])


# ---- annotation tools: bcftools and vcfanno against carbon-vep annotate --------------------
def _info_scores(vcf_text: str, field: str = "CVEP_SCORE") -> dict[tuple, float | None]:
    out = {}
    for line in vcf_text.splitlines():
        if line.startswith("#"):
            continue
        chrom, pos, _, ref, alt, _, _, info = line.split("\t")[:8]
        fields = dict(f.split("=", 1) for f in info.split(";") if "=" in f)
        value = fields.get(field)  # absent (bcftools) or `.` (vcfanno): no value
        out[(chrom, int(pos), ref, alt)] = None if value in (None, ".") else float(value)
    return out


def _check_against_annotate(got, annotated, rel: float = 0.0, phred: bool = False) -> None:
    """Every SNV that annotate scores has the same value (at the TSV's 6 decimals; `rel` for
    values the tool prints with fewer digits), on its own ALT; every SNV it does not score (or,
    `phred`, gives no PHRED: `annotated_phred` checks which) has none."""
    assert set(got) == set(annotated)
    for key, score in annotated.items():
        if score is None:
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(score, abs=0.5e-6 + 1e-6, rel=rel), key
    if phred:
        return
    scored = [k for k, v in annotated.items() if v is not None]
    alts: dict[tuple[str, int], set[float | None]] = {}
    for chrom, pos, ref, alt in scored:
        alts.setdefault((chrom, pos), set()).add(got[(chrom, pos, ref, alt)])
    # a value on another ALT shows wherever the ALTs of a base differ: at most bases (the demo
    # model's float16 log-marginals sit on a 2^-10 grid near log 1/4, so some ALTs tie)
    assert sum(len(values) == 3 for values in alts.values()) > 0.5 * len(alts)


def _check_phred(vcf_text: str, annotated_phred) -> None:
    """The tool's CVEP_PHRED against annotate's: the same where the TSV has one, none where it
    has `.` (bcftools leaves the tag off, vcfanno writes `.`)."""
    _check_against_annotate(_info_scores(vcf_text, "CVEP_PHRED"), annotated_phred, PHRED_REL, True)


DOC = ROOT / "docs/annotation.md"


def _doc_block(name: str) -> str:
    """The shell block of docs/annotation.md marked `<!-- tested: NAME -->`."""
    text = DOC.read_text()
    match = re.search(rf"<!-- tested: {name} -->\n```bash\n(.*?)\n```", text, re.DOTALL)
    assert match, f"docs/annotation.md has no tested block {name!r}"
    return match[1]


@pytest.fixture
def user_dir(scan, tmp_path) -> Path:
    """A user's folder: the query VCF as in.vcf.gz (bgzipped, indexed)."""
    _tool("bgzip")
    shutil.copy(scan / "query.vcf", tmp_path / "in.vcf")
    _run("bgzip", "-f", "in.vcf", cwd=tmp_path)
    _run("tabix", "-p", "vcf", "in.vcf.gz", cwd=tmp_path)
    return tmp_path


def _run_doc(folder: Path, scan: Path, *blocks: str) -> None:
    """Run the documented commands, as written, with $SCAN the scan's output folder."""
    for name in blocks:
        script = "set -euo pipefail\n" + _doc_block(name)
        out = subprocess.run(
            ["bash", "-c", script],
            cwd=folder,
            capture_output=True,
            text=True,
            env=workflow_env(SCAN=str(scan / SCAN)),
        )
        assert out.returncode == 0, f"{name}: {out.stderr[-2000:]}"


def test_bcftools_annotate_gives_every_snv_the_annotate_score(
    scan, user_dir, annotated, annotated_phred
):
    bcftools = _tool("bcftools")
    _run_doc(user_dir, scan, "bcftools-header", "bcftools-each-file")  # one pass per file
    each = _run(bcftools, "view", "annotated.vcf.gz", cwd=user_dir)
    _check_against_annotate(_info_scores(each), annotated)
    _check_phred(each, annotated_phred)
    _run_doc(user_dir, scan, "bcftools-one-file")  # concat-scan, then one pass
    one = _run(bcftools, "view", "annotated.vcf.gz", cwd=user_dir)
    _check_against_annotate(_info_scores(one), annotated)
    _check_phred(one, annotated_phred)


def test_concat_scan_holds_every_contig_once_in_reference_order(scan, record, user_dir):
    tabix = _tool("tabix")
    _run(
        "carbon-vep", "concat-scan", "--scan", str(scan / SCAN), "--out", "all.tsv.gz", cwd=user_dir
    )
    contigs = [c for names in record["files"].values() for c in names]
    assert _run(tabix, "-l", "all.tsv.gz", cwd=user_dir).splitlines() == contigs
    header = _run(tabix, "-H", "all.tsv.gz", cwd=user_dir).splitlines()
    assert [h for h in header if h.startswith("##contig=")] == [f"##contig={c}" for c in contigs]
    assert sum(h.startswith("#chrom") for h in header) == 1
    rows = pysam.BGZFile(str(user_dir / "all.tsv.gz")).read().decode().splitlines()
    parts = []
    for name in record["files"]:
        text = pysam.BGZFile(str(scan / SCAN / f"snvs/{name}.tsv.gz")).read().decode()
        parts += [line for line in text.splitlines() if not line.startswith("#")]
    assert [r for r in rows if not r.startswith("#")] == parts  # copied, in order


def test_vcfanno_gives_every_snv_the_annotate_score(scan, user_dir, annotated, annotated_phred):
    _tool("vcfanno")
    _run_doc(user_dir, scan, "vcfanno")
    text = (user_dir / "annotated.vcf").read_text()
    _check_against_annotate(_info_scores(text), annotated)
    _check_phred(text, annotated_phred)


def test_a_sites_vcf_for_vep_custom_carries_the_same_scores(
    scan, user_dir, annotated, annotated_phred
):
    """VEP's --custom reads VCF, not a TSV: the conversion docs/annotation.md gives, checked
    with bcftools and pysam (VEP itself is not installable here)."""
    bcftools = _tool("bcftools")
    _run_doc(user_dir, scan, "bcftools-header", "bcftools-one-file", "vep-sites")
    with pysam.VariantFile(str(user_dir / "cvep_sites.vcf.gz")) as sites:
        assert "CVEP_SCORE" in sites.header.info
        assert sum(1 for _ in sites) == 3 * sum(len(p) for p in _scored(_genome()).values())
    sites = _run(
        bcftools,
        "annotate",
        "-a",
        "cvep_sites.vcf.gz",
        "-c",
        "INFO/CVEP_SCORE",
        "in.vcf.gz",
        cwd=user_dir,
    )
    _check_against_annotate(_info_scores(sites), annotated)
    sites = _run(
        bcftools,
        "annotate",
        "-a",
        "cvep_sites.vcf.gz",
        "-c",
        "INFO/CVEP_PHRED",
        "in.vcf.gz",
        cwd=user_dir,
    )
    _check_phred(sites, annotated_phred)
