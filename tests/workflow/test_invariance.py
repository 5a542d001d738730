"""No answer moves with how the work is cut (issue 53 §7), nor with the compiled decoder layers:
config/ci.yaml run twice through the real Snakefile, cut two ways (other shard boundaries, other
scan jobs and other batches), the second with `compile_layers` (model.compiled_layers: every
model job's passes run the layers' steps around attention compiled by inductor), gives the same
merged outputs and metrics.

- run `as_shipped`: the workflow tests' run of config/ci.yaml (support/cluster.py's `ci_run`,
  once a session): `shard_size: 28` (two shards a dataset of the 56-row demo panel), the
  default `chunk_bp` (one scan_chunk job for the 2 kbp region), `batch_size: 8` windows a
  forward pass, Genomic-NIAH `rows_per_job: 5` (two score_niah jobs a cell); the demo model
  built by the workflow in its folder;
- run `recut`: `shard_size: 100` (one shard a dataset), `chunk_bp: 1000` (two scan_chunk jobs,
  as the GPU profiles cut a genome at 30 or 150 Mbp), a token budget `batch_tokens: 300`
  instead of the 8 windows (it replaces batch_size: 7 centered windows of ~41 tokens a pass,
  2 next-token contexts or scan tiles of ~101 tokens, one 512-token NIAH prompt),
  `rows_per_job: 10` (one score_niah job a cell), the recovery task in `parts: 3` (three
  score_recovery jobs of 2, 3 and 3 of its 8 prompts, merged by merge_recovery), and
  `compile_layers: true` (each job compiles in its own process; ~40 s more for the run on 2
  cores).

Both score with the same demo model directory (the one `as_shipped` built; `recut` does not
build it again), so the provenance names the same files. The scan's chunks tile from the
target's start, not each chunk's (scan/tiling.py `tile_segment`'s anchor): before, the second
job's 1,000 bases got other windows and scores moved by up to 0.79 (log_cond), PHRED by up to
17.

Compared: every dataset's merged `scores.parquet`, the scan's merged positions Parquet and its
per-SNV TSV, the suite tasks' and the NIAH cells' merged `predictions.parquet`, the results
table and every merged `metrics.json`. Keys, statuses, reasons, strings, integers, booleans
(decisions such as `correct`, `ll_correct`, greedy predictions), nulls, row counts and row order
must be identical. Floats may differ by float rounding alone:

- float32/float64 values: `ABS_TOL` = 1e-5 absolute. The model runs float32 on CPU; another
  batch composition changes the padding and so the shapes of the matmuls and the order of the
  reductions (the attention and the softmax normalisers over 4,096 6-mers), which moves a
  log-likelihood by a few float32 ulps: at the magnitudes here (|log p| up to ~10, an ulp
  ~1e-6) 1e-5 is about ten ulps, the bound the engine's own batch-size and prefix-sharing
  tests use (tests/model/test_engine.py). Measured without the compile: at most 1.4e-6 (the
  next-token recipe's `ref_ll`/`alt_ll`, 9.5e-7 on its `score`), every other file
  bit-identical; with it (2026-11-29): at most 9.5e-7 (the next-token `score`, a NIAH cell's
  log-likelihoods), the centered scores 9.5e-8, the perturbation tasks bit-identical (inductor's
  CPU kernels gave the demo model's eager values there), the scan one float16 ulp. The smallest
  decision margin of the demo (a perturbation pair's, 1.7e-3) is far above the bound, so no
  decision may flip.
- the scan's float16 columns (`log_fns_*`, `log_cond_*`): one float16 ulp at the value, as a
  float32 value that moves by rounding may round to the neighbouring float16;
- the scan TSV's `score` (printed to 2 decimals) and `phred` (1 decimal): one printed unit, as a
  score at a rounding edge may print one unit away and shift the ranks behind the PHRED.

Provenance that legitimately differs is left out: `settings_sha256` (compile_layers is among
the jobs' settings), found by diffing every JSON file and TSV header of the two runs: in the
files compared nothing else
differed (no timings in them; the scan's summary.json and plan.json, not compared, hold its
wall time and byte counts)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from support.cluster import ci_run_log, run_snakemake

pytestmark = pytest.mark.workflow

ABS_TOL = 1e-5  # float32 log-likelihood scales: see the module docstring
DATASETS = ("demo_centered", "demo_nexttoken", "demo_scan_lookup")
TASKS = ("demo_cag_expansion", "demo_recovery", "demo_synonymous_codon")
NIAH_CELLS = ("niah_512", "niah_neardup_d2_512")
SCAN = "results/scans/demo_scan/demo"  # the demo scan's outputs for the demo model
SNV_TSV = f"{SCAN}/snvs/chr17.tsv.gz"
# what the recut run builds: the gate (after the results table, so every merge and metric)
# and the scan's SNV TSV; not the reports or VCF exports, which nothing here compares
RECUT_TARGETS = (
    "results/baseline_comparison.tsv",
    SNV_TSV,
)
IGNORED_KEYS = {"settings_sha256"}  # provenance: the hash of the job's settings, which differ
RECUT = {
    "shard_size": 100,
    "chunk_bp": 1000,
    "batch_tokens": 300,
    "rows_per_job": 10,
    "recovery_parts": 3,
    "compile_layers": True,
}


def _recut_config(workdir: Path, shipped: Path) -> Path:
    """The shipped run's config, cut as RECUT, its model the shipped run's (not built again)."""
    config = yaml.safe_load((shipped / "config.yaml").read_text())
    config["models"]["demo"].update(build_demo=False)
    config["shard_size"] = RECUT["shard_size"]
    config["chunk_bp"] = RECUT["chunk_bp"]
    config["batch_tokens"] = RECUT["batch_tokens"]
    config["niah"]["demo_niah"]["rows_per_job"] = RECUT["rows_per_job"]
    config["tasks"]["demo_recovery"]["parts"] = RECUT["recovery_parts"]
    config["compile_layers"] = RECUT["compile_layers"]
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ci_run) -> dict[str, tuple[Path, str]]:
    """Both runs' working directories and what snakemake printed (each ends with the baseline
    gate of config/ci.yaml, so each also passed baselines/demo.yaml)."""
    workdir = tmp_path_factory.mktemp("recut")
    config = _recut_config(workdir, ci_run)
    result = run_snakemake(workdir, config, "--cores", "2", *RECUT_TARGETS, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        "as_shipped": (ci_run, ci_run_log(ci_run).read_text()),
        "recut": (workdir, result.stdout + result.stderr),
    }


def _pair(runs, relative: str) -> tuple[Path, Path]:
    return runs["as_shipped"][0] / relative, runs["recut"][0] / relative


# ---- the two runs really cut the work differently (or the comparison proves nothing) ------
def test_shards_scan_jobs_niah_parts_and_batches_really_differ(runs):
    for dataset in DATASETS:
        counts = [
            len(list(p.glob("shard_*.parquet"))) for p in _pair(runs, f"results/{dataset}/shards")
        ]
        assert counts == [2, 1], dataset
        scored = [
            len(list(p.glob("shard_*.parquet")))
            for p in _pair(runs, f"results/{dataset}/demo/shard_scores")
        ]
        assert scored == [2, 1], dataset
    chunks = _pair(runs, f"{SCAN}/chunks")
    assert [len(list(p.glob("chunk_*.json"))) for p in chunks] == [1, 2]
    for cell in NIAH_CELLS:
        parts = _pair(runs, f"results/suite/niah/demo_niah/{cell}/demo/parts")
        assert [len(list(p.glob("rows_*.parquet"))) for p in parts] == [2, 1], cell
    recovery = _pair(runs, "results/suite/demo_recovery/demo/parts")
    assert [len(list(p.glob("predictions_*.parquet"))) for p in recovery] == [1, 3]
    shares = [pl.read_parquet(p).height for p in sorted(recovery[1].glob("predictions_*"))]
    assert shares == [2, 3, 3]  # the 8 prompts cut into I/3 shares, each its own job
    # every model job got its run's batch settings (snakemake prints each job's command)
    shipped, recut = runs["as_shipped"][1], runs["recut"][1]
    jobs = ("score-shard", "scan-chunk", "score-recovery", "score-perturbation", "score-niah")
    for log, flags in (
        (shipped, ["--batch-size 8 --batch-tokens 0"]),
        (recut, ["--batch-tokens 300", '"compile_layers": true']),  # in its --settings JSON
    ):
        commands = [
            line for line in log.splitlines() if any(f"carbon-vep {j}" in line for j in jobs)
        ]
        assert len(commands) >= 5, flags
        assert all(flag in line for line in commands for flag in flags), flags
    assert "--batch-tokens 300" not in shipped and '"compile_layers": true' not in shipped


# ---- the comparison ------------------------------------------------------------------------
def _first_difference(a: pl.DataFrame, b: pl.DataFrame, columns: list[str]) -> str:
    for column in columns:
        x, y = a[column], b[column]
        differs = (x != y).fill_null(True) & ~(x.is_null() & y.is_null())
        if differs.any():
            row = int(differs.arg_max())
            return f"column {column}, row {row}: {x[row]!r} != {y[row]!r}"
    return "?"


def _float_bound(column: pl.Series, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if column.dtype == pl.Float16:  # one float16 ulp at the larger of the two values
        return np.maximum(ABS_TOL, np.spacing(np.maximum(abs(x), abs(y)).astype(np.float16)))
    return np.full(x.shape, ABS_TOL)


def assert_tables_match(a: pl.DataFrame, b: pl.DataFrame, name: str) -> None:
    """Same schema, rows and order; non-float columns identical; floats within the bounds."""
    assert a.schema == b.schema, name
    assert a.height == b.height, name
    floats = [c for c, dtype in a.schema.items() if dtype.is_float()]
    exact = [c for c in a.columns if c not in floats]
    assert a.select(exact).equals(b.select(exact)), f"{name}: {_first_difference(a, b, exact)}"
    for column in floats:
        x_col, y_col = a[column], b[column]
        assert x_col.is_null().equals(y_col.is_null()), f"{name}: {column} nulls moved"
        x = x_col.cast(pl.Float64).to_numpy()
        y = y_col.cast(pl.Float64).to_numpy()
        finite = np.isfinite(x) & np.isfinite(y)
        same_special = np.array_equal(x[~finite], y[~finite], equal_nan=True)
        assert same_special, f"{name}: {column}: non-finite values moved"
        gap = np.abs(x[finite] - y[finite])
        bound = _float_bound(x_col, x[finite], y[finite])
        if gap.size and (gap > bound).any():
            row = int(np.flatnonzero(finite)[np.argmax(gap - bound)])
            raise AssertionError(
                f"{name}: {column}, row {row}: {x[row]!r} vs {y[row]!r} "
                f"(|diff| {abs(x[row] - y[row]):.3g} > {bound.max():.3g})"
            )


def assert_json_match(a, b, where: str) -> None:
    """Identical structure, keys and non-float values; floats within ABS_TOL."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) - IGNORED_KEYS == set(b) - IGNORED_KEYS, where
        for key in sorted(set(a) - IGNORED_KEYS):
            assert_json_match(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_json_match(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        both_nan = math.isnan(a) and math.isnan(b)
        assert both_nan or a == b or abs(a - b) <= ABS_TOL, f"{where}: {a!r} vs {b!r}"
    else:  # strings, integers, booleans, None: exactly (and the same JSON type)
        assert type(a) is type(b) and a == b, f"{where}: {a!r} vs {b!r}"


@pytest.mark.parametrize("dataset", DATASETS)
def test_dataset_scores_do_not_move(runs, dataset):
    shipped, recut = _pair(runs, f"results/{dataset}/demo/scores.parquet")
    a, b = pl.read_parquet(shipped), pl.read_parquet(recut)
    assert a.height == 56 and a["row_id"].to_list() == list(range(56))  # one row per variant
    assert_tables_match(a, b, f"{dataset} scores")


def test_scan_positions_and_snv_tsv_do_not_move(runs):
    shipped, recut = _pair(runs, f"{SCAN}/positions/chr17.parquet")
    a, b = pl.read_parquet(shipped), pl.read_parquet(recut)
    assert a.height == 2_000
    assert_tables_match(a, b, "scan positions")
    tsv = [
        gzip.decompress(path.read_bytes()).decode().splitlines() for path in _pair(runs, SNV_TSV)
    ]
    headers = [[line for line in lines if line.startswith("#")] for lines in tsv]
    assert [h for h in headers[0] if not h.startswith("##settings_sha256=")] == [
        h for h in headers[1] if not h.startswith("##settings_sha256=")
    ]
    rows = [[line.split("\t") for line in lines if not line.startswith("#")] for lines in tsv]
    assert len(rows[0]) == len(rows[1]) == 3 * 2_000
    for x, y in zip(*rows, strict=True):
        assert x[:4] == y[:4]  # chrom, pos, ref, alt
        assert abs(float(x[4]) - float(y[4])) <= 0.01 + 1e-9, (x, y)  # score: 2 decimals
        assert abs(float(x[5]) - float(y[5])) <= 0.1 + 1e-9, (x, y)  # phred: 1 decimal


@pytest.mark.parametrize(
    "predictions",
    [
        *(f"results/suite/{task}/demo/predictions.parquet" for task in TASKS),
        *(f"results/suite/niah/demo_niah/{cell}/demo/predictions.parquet" for cell in NIAH_CELLS),
    ],
)
def test_task_and_niah_predictions_do_not_move(runs, predictions):
    shipped, recut = _pair(runs, predictions)
    a, b = pl.read_parquet(shipped), pl.read_parquet(recut)
    assert a.height > 0
    assert_tables_match(a, b, predictions)


def test_metrics_and_results_table_do_not_move(runs):
    root = runs["as_shipped"][0]
    names = sorted(
        str(p.relative_to(root))
        for p in root.glob("results/**/metrics.json")
        if "/parts/" not in str(p)  # a NIAH job's own rows: the parts differ by design
    )
    assert len(names) == len(DATASETS) + len(TASKS) + len(NIAH_CELLS)
    recut = runs["recut"][0]
    assert (
        sorted(
            str(p.relative_to(recut))
            for p in recut.glob("results/**/metrics.json")
            if "/parts/" not in str(p)
        )
        == names
    )
    for name in names:
        shipped_json, recut_json = (json.loads(p.read_text()) for p in _pair(runs, name))
        assert_json_match(shipped_json, recut_json, name)
    table = _pair(runs, "results/results_table.parquet")
    assert_tables_match(*(pl.read_parquet(p) for p in table), "results table")
