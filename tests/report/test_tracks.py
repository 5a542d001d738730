"""Genome-browser tracks from a scan, read back by two independent bigWig readers (pyBigWig, on
libBigWig, and pybbi, on UCSC's own code) and compared with the scan's Parquet and tabix TSV at
every scored base: contig ends, a gap of Ns and the first base after it, soft-masked bases, a
contig with `*` and one with `|` in its name; gaps carry no value; the hub's files pass a schema
check; the IGV session and igv.js configuration name every track."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import polars as pl
import pysam
import pytest
import yaml
from support.cluster import run_snakemake
from support.files import random_dna, write_fasta
from support.scans import scan_tsv_rows

from carbon_vep.scan.targets import acgt_runs

pytestmark = pytest.mark.workflow
SCAN = "results/scans/browse/demo"
TRACKS = f"{SCAN}/tracks"
BASES = "ACGT"


def _genome() -> dict[str, str]:
    chr_a = random_dna(2400, 21)
    chr_a = chr_a[:700] + chr_a[700:900].lower() + chr_a[900:1500] + "N" * 37 + chr_a[1537:]
    return {
        "chrA": chr_a,  # soft-masked 701-900, N gap 1501-1537
        "HLA-A*01:01:01:01": random_dna(900, 22),
        "tig00000001|arrow": random_dna(700, 23),
        "chrUn_allN": "N" * 90,  # nothing to score: in no track
        "chrUn_short": random_dna(200, 24),  # scored, but under min_context: no PHRED
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_model_dir) -> Path:
    workdir = tmp_path_factory.mktemp("tracks")
    fasta = write_fasta(workdir / "genome.fa", _genome())
    config = {
        "outdir": "results",
        "models": {
            "demo": {
                "path": str(demo_model_dir),
                "trust_remote_code": True,
                "dtype": "float32",
                "device": "cpu",
                "batch_size": 4,
            }
        },
        "scans": {
            "browse": {
                "reference": str(fasta),
                "build": "hg38",
                "regions": "all",
                "tile_bp": 600,
                "min_context": 240,
                "tsv_decimals": 6,
                "tracks": True,
                "tracks_reference": "copy",
            }
        },
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(workdir, workdir / "config.yaml", "--cores", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir


def _expected(run: Path) -> pl.DataFrame:
    """Per scored base: the four scores and surprise from the Parquet, the PHRED from the TSV
    (none, `.`, at a base with less than min_context bp of left context)."""
    bases = pl.read_parquet(run / SCAN / "positions")
    lp = {b: pl.col(f"log_fns_{b}").cast(pl.Float32) for b in BASES}
    lp_ref = pl.coalesce([pl.when(pl.col("ref") == b).then(lp[b]) for b in BASES])
    scores = [(lp_ref - lp[b]).alias(f"score_{b}") for b in BASES]
    frame = bases.select("chrom", "pos", "ref", *scores, (-lp_ref).alias("surprise"))
    tsv = scan_tsv_rows(run / SCAN)
    phred = tsv.pivot(on="alt", index=["chrom", "pos"], values="phred")
    phred = phred.rename({b: f"phred_{b}" for b in BASES if b in phred.columns})
    return frame.join(phred, on=["chrom", "pos"], how="left")


def _readers(path: Path):
    import bbi
    import pyBigWig

    return pyBigWig.open(str(path)), bbi


def _values(path: Path, chrom: str, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole contig's values from both readers (NaN = no value; a contig absent from the
    header has none, and both readers refuse to read it)."""
    bw, bbi = _readers(path)
    if chrom not in bw.chroms():
        assert chrom not in bbi.chromsizes(str(path))
        return np.full(length, np.nan), np.full(length, np.nan)
    first = np.array(bw.values(chrom, 0, length), dtype=np.float64)
    second = bbi.fetch(str(path), chrom, 0, length, bins=length, missing=np.nan)
    bw.close()
    return first, np.asarray(second, dtype=np.float64)


def test_every_track_equals_the_scan_at_every_scored_base(run):
    expected = _expected(run)
    genome = _genome()
    scored = {c: part for (c,), part in expected.partition_by("chrom", as_dict=True).items()}
    assert set(scored) == {"chrA", "HLA-A*01:01:01:01", "tig00000001|arrow", "chrUn_short"}
    for track in [
        *(f"score_{b}" for b in BASES),
        *(f"phred_{b}" for b in BASES),
        "surprise",
        "max_score",
        "max_phred",
    ]:
        path = run / TRACKS / f"{track}.bw"
        for chrom, part in scored.items():
            length = len(genome[chrom])
            got_a, got_b = _values(path, chrom, length)
            np.testing.assert_array_equal(np.isnan(got_a), np.isnan(got_b))
            np.testing.assert_allclose(got_a, got_b, rtol=0, atol=0, equal_nan=True)
            want = np.full(length, np.nan)
            pos = part["pos"].to_numpy()
            if track.startswith("max_"):
                kind = track.removeprefix("max_")
                alts = [pl.when(pl.col("ref") != b).then(pl.col(f"{kind}_{b}")) for b in BASES]
                values = part.select(pl.max_horizontal(alts)).to_series()
            else:
                values = part[track]
            want[pos - 1] = values.to_numpy().astype(np.float32)
            if track.startswith(("score_", "phred_")):  # no value where alt == ref
                want[(pos - 1)[part["ref"].to_numpy() == track[-1]]] = np.nan
            np.testing.assert_array_equal(np.isnan(got_a), np.isnan(want), err_msg=track)
            atol = 0.051 if "phred" in track else 0.0  # the TSV prints PHRED to 1 decimal
            np.testing.assert_allclose(
                got_a, want, rtol=0, atol=atol, equal_nan=True, err_msg=f"{track} {chrom}"
            )


def test_gaps_and_unscored_bases_have_no_value_never_zero(run):
    genome = _genome()
    runs = acgt_runs(genome["chrA"])
    gap_start, gap_end = runs[0][1], runs[1][0]  # the N gap, 0-based half-open
    assert genome["chrA"][gap_start:gap_end] == "N" * 37
    surprise, _ = _values(run / TRACKS / "surprise.bw", "chrA", len(genome["chrA"]))
    assert np.isnan(surprise[gap_start:gap_end]).all()
    assert not np.isnan(surprise[gap_end])  # the first base after the gap
    assert not np.isnan(surprise[-1])  # the contig's last base
    assert not np.isnan(surprise[750])  # a soft-masked base is scored
    bw, _ = _readers(run / TRACKS / "surprise.bw")
    # the scored contigs at their full length; the all-N contig has no data, so no entry
    assert bw.chroms() == {
        "chrA": 2400,
        "HLA-A*01:01:01:01": 900,
        "tig00000001|arrow": 700,
        "chrUn_short": 200,
    }
    assert bw.intervals("chrA", gap_start, gap_end) in (None, ())


def test_a_header_lists_the_contigs_with_a_value_in_that_track(run):
    """bigtools' writer puts a contig in a bigWig's header only once it has a value there (as
    UCSC's bedGraphToBigWig does by default), so a contig scored only under min_context is in
    the score tracks and in no PHRED track (docs/tracks.md): a browser shows it empty in both."""
    import pybigtools

    scored = {"chrA": 2400, "HLA-A*01:01:01:01": 900, "tig00000001|arrow": 700}
    scored_short = scored | {"chrUn_short": 200}
    for track in [*(f"score_{b}" for b in BASES), "max_score", "surprise"]:
        assert pybigtools.open(str(run / TRACKS / f"{track}.bw")).chroms() == scored_short, track
    for track in [*(f"phred_{b}" for b in BASES), "max_phred"]:
        assert pybigtools.open(str(run / TRACKS / f"{track}.bw")).chroms() == scored, track
    tsv = scan_tsv_rows(run / SCAN).filter(pl.col("chrom") == "chrUn_short")
    assert tsv.height == 3 * 200 and tsv["phred"].is_null().all()  # scored, never ranked


def test_chromosome_sizes_come_from_the_reference_index(run):
    fai = pysam.FastaFile(str(run / "genome.fa"))
    bw, _ = _readers(run / TRACKS / "score_A.bw")
    assert bw.chroms() == {c: fai.get_reference_length(c) for c in bw.chroms()}
    assert list(bw.chroms()) == [c for c in fai.references if c in bw.chroms()]


def _stanzas(text: str) -> list[dict[str, str]]:
    return [
        dict(line.split(" ", 1) for line in block.splitlines() if line.strip())
        for block in text.strip().split("\n\n")
    ]


def test_the_hub_passes_a_schema_check(run):
    folder = run / TRACKS
    hub = dict(line.split(" ", 1) for line in (folder / "hub.txt").read_text().splitlines())
    assert set(hub) >= {"hub", "shortLabel", "longLabel", "genomesFile", "email"}
    genomes = dict(
        line.split(" ", 1) for line in (folder / hub["genomesFile"]).read_text().splitlines()
    )
    assert genomes["genome"] == "hg38" and (folder / genomes["trackDb"]).is_file()
    stanzas = _stanzas((folder / genomes["trackDb"]).read_text())
    names = {s["track"] for s in stanzas}
    assert len(names) == len(stanzas)  # unique track names
    for stanza in stanzas:
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", stanza["track"]), stanza["track"]
        assert len(stanza["shortLabel"]) <= 17 and stanza["type"] == "bigWig"
        if "parent" in stanza:
            assert stanza["parent"].split()[0] in names
            assert "compositeTrack" in next(
                s for s in stanzas if s["track"] == stanza["parent"].split()[0]
            )
        if "compositeTrack" not in stanza:
            assert (folder / stanza["bigDataUrl"]).is_file()
            low, high = map(float, stanza["viewLimits"].split(":"))
            assert low < high and re.fullmatch(r"\d+,\d+,\d+", stanza["color"])
    leaves = [s for s in stanzas if "bigDataUrl" in s]
    assert len(leaves) == 11  # 4 scores, 4 PHRED, 2 maxima, surprise


def _view_limits(folder: Path) -> dict[str, dict[str, tuple[float, float]]]:
    """Each track's view limits as the UCSC hub, the IGV session and igv.js hold them."""
    stanzas = [s for s in _stanzas((folder / "trackDb.txt").read_text()) if "bigDataUrl" in s]
    session = ET.parse(folder / "igv_session.xml").getroot()
    igv_js = json.loads((folder / "igv.json").read_text())["tracks"]
    return {
        "hub": {
            s["bigDataUrl"]: tuple(float(x) for x in s["viewLimits"].split(":")) for s in stanzas
        },
        "session": {
            track.get("id"): (float(data.get("minimum")), float(data.get("maximum")))
            for track in session.iter("Track")
            for data in track.iter("DataRange")
        },
        "igv.js": {track["url"]: (track["min"], track["max"]) for track in igv_js},
    }


def test_score_tracks_are_viewed_at_their_datas_scale_everywhere(run):
    """The score tracks' view: from the 0.1th to the 99.9th centile of the scan's SNV scores
    (as the TSV prints them), rounded outward, around 0; PHRED fixed at 0-40; the same limits
    in the UCSC hub, the IGV session and the igv.js configuration."""
    from carbon_vep.report.track_hub import around_zero

    ranked = scan_tsv_rows(run / SCAN).filter(pl.col("phred").is_not_null())
    tsv = ranked["score"].to_numpy()
    want = around_zero(*np.quantile(tsv, [0.001, 0.999], method="inverted_cdf"))
    assert want[0] < 0 < want[1] < 1  # the demo model's small scores: -2..6 showed nothing
    views = _view_limits(run / TRACKS)
    assert views["hub"] == views["session"] == views["igv.js"]
    limits = views["hub"]
    for name in (*(f"score_{b}" for b in BASES), "max_score"):
        assert limits[f"{name}.bw"] == want, name
    assert all(limits[f"phred_{b}.bw"] == (0.0, 40.0) for b in BASES)


def test_igv_session_and_igv_js_name_every_track(run):
    """tracks_reference copy: the FASTA and its index beside the tracks, named by file name;
    no file of the folder holds an absolute path (it can be published or sent as it is)."""
    folder = run / TRACKS
    session = ET.parse(folder / "igv_session.xml").getroot()
    assert session.get("genome") == "genome.fa"
    assert (folder / "genome.fa").read_bytes() == (run / "genome.fa").read_bytes()
    assert (folder / "genome.fa.fai").is_file()
    paths = [r.get("path") for r in session.iter("Resource")]
    assert all((folder / p).is_file() for p in paths) and len(paths) == 11
    config = json.loads((folder / "igv.json").read_text())
    assert config["reference"] == {
        "id": "hg38",
        "fastaURL": "genome.fa",
        "indexURL": "genome.fa.fai",
    }
    assert config["loadDefaultGenomes"] is False  # the page needs nothing from outside
    assert sorted(t["url"] for t in config["tracks"]) == sorted(paths)
    texts = [p.read_text() for p in folder.iterdir() if p.suffix in (".xml", ".json", ".txt")]
    assert len(texts) == 6 and not any(str(run) in text or "/tmp/" in text for text in texts)


IGV_JS = Path(__file__).resolve().parents[2] / "envs/igv-js/node_modules/igv/dist/igv.min.js"
PAGE = """<!doctype html><html><body><div id="igv"></div><script src="igv.min.js"></script>
<script>
fetch("igv.json").then((r) => r.json())
  .then((config) => igv.createBrowser(document.getElementById("igv"), {...config, locus: LOCUS}))
  .then((browser) => { window.igvBrowser = browser; })
  .catch((error) => { console.error(String(error)); window.igvFailed = String(error); });
</script></body></html>"""
LOCUS = "chrA:1001-1400"  # scored bases between the soft-masked run and the gap


def _painted_rows(page) -> dict[str, int]:
    """Per data track: how many pixel rows of its canvas hold a painted (non-transparent) pixel,
    i.e. how tall its bars are drawn (a view far wider than the data draws them a row high)."""
    return page.evaluate(
        """() => Object.fromEntries(window.igvBrowser.trackViews
            .filter((view) => view.track.type === "wig")
            .map((view) => {
                const canvas = view.viewports[0].canvas;
                const data = canvas.getContext("2d")
                    .getImageData(0, 0, canvas.width, canvas.height).data;
                const rows = new Set();
                for (let i = 3; i < data.length; i += 4)
                    if (data[i] > 0) rows.add(Math.floor((i - 3) / 4 / canvas.width));
                return [view.track.name, rows.size / window.devicePixelRatio];
            }))"""
    )


def test_igv_js_draws_every_track_of_the_published_folder(run):
    """The tracks folder served as it is from 127.0.0.1 and opened by igv.js (npm, pinned:
    `make setup-igv`) in headless Chromium: every track loads with no console error and no
    request leaves the folder, and every data track's bars are drawn tall at a scored locus,
    read from the rendered canvases' pixels."""
    from support.browser import CHROMIUM_FLAGS, chromium_path, sync_playwright
    from support.http import served

    if not IGV_JS.is_file():
        pytest.skip("igv.js is not installed: make setup-igv (npm)")
    executable = chromium_path()
    errors, outside = [], []
    with served(run / TRACKS) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 2400})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("requestfailed", lambda r: errors.append(f"failed: {r.url} {r.failure}"))

        def route(request):
            if request.request.url.startswith(base):
                return request.continue_()
            outside.append(request.request.url)
            return request.abort()

        page.route("**/*", route)
        page.route(f"{base}/igv.min.js", lambda r: r.fulfill(path=str(IGV_JS)))
        page.route(
            f"{base}/view.html",
            lambda r: r.fulfill(body=PAGE.replace("LOCUS", repr(LOCUS)), content_type="text/html"),
        )
        page.goto(f"{base}/view.html")
        page.wait_for_function("window.igvBrowser || window.igvFailed", timeout=60_000)
        page.wait_for_function(
            "window.igvBrowser.trackViews.filter((v) => v.track.type === 'wig')"
            ".every((v) => v.viewports[0].canvas)",
            timeout=60_000,
        )
        page.wait_for_timeout(500)  # the last track's paint
        rows = _painted_rows(page)
        browser.close()
    assert not errors and not outside, (errors, outside)
    config = json.loads((run / TRACKS / "igv.json").read_text())
    assert sorted(rows) == sorted(t["name"] for t in config["tracks"])
    # a 50-pixel track: the data's own view draws the bars tens of rows tall; the old fixed
    # -2..6 view drew the demo model's scores one row high (measured: 50 against 1)
    flat = {name: height for name, height in rows.items() if height < 10}
    assert not flat, rows


def test_runs_of_one_value_become_one_bedgraph_entry():
    from carbon_vep.report.tracks import runs

    pos = np.array([1, 2, 3, 5, 6, 7])  # 1-based; base 4 has no value
    values = np.array([1.0, 1.0, 2.0, 2.0, 2.0, 3.0])
    starts, ends, kept = runs(pos, values)
    assert starts.tolist() == [0, 2, 4, 6]  # 0-based half-open, as a bigWig stores them
    assert ends.tolist() == [2, 3, 6, 7]
    assert kept.tolist() == [1.0, 2.0, 2.0, 3.0]  # a gap splits a run of one value
