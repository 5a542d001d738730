"""The benchmarks run end to end at toy sizes, the product's jobs as they run them; no timing is
asserted: what is checked is that the bench and the jobs still agree on the jobs' arguments and
outputs, and that its figures come from what the jobs wrote."""

import pytest

pytestmark = pytest.mark.slow  # each measured process runs once at toy sizes


def test_bench_calibrate_runs_the_scan_jobs_beside_the_references(tmp_path):
    """merge-scan, count-scan, calibrate-scan and write-scan-tsv as jobs on a synthetic chunk at
    two sizes, the two references beside them; counts and scales read from the jobs' files."""
    from carbon_vep.benchmark import calibrate

    sizes = [20_000, 40_000]
    results = calibrate.bench(tmp_path, sizes)
    for bases in sizes:
        r = results[bases]
        assert r["snvs"] == 3 * bases
        for step in calibrate.LABELS:
            assert r[f"{step}_s"] > 0 and r[f"{step}_peak_rss_mb"] > 0 and r[f"{step}_cpu_s"] > 0
        # every SNV counted once: (cell, score) rows at most the SNVs, the scale's scores fewer
        assert 0 < r["distinct_scores"] <= r["cells_x_scores"] <= r["snvs"]
        assert r["tsv_bytes_per_snv_with_phred"] > r["tsv_bytes_per_snv_score_only"] > 0
        folder = tmp_path / f"scan_{bases}"
        assert (folder / "with_phred.tsv.gz.tbi").exists()
    for clock in ("", "_wall"):
        projection = results[f"hg38_projection_16_cores_h{clock}"]
        calibration = projection["calibration_count_calibrate_phred_column"]
        assert 0 < calibration < projection["merge_count_calibrate_tsv_jobs"]


def test_bench_scan_annotates_through_the_workflows_two_jobs(tmp_path):
    """check-panel then annotate --checked on a scan the scan jobs made: every SNV scored, the
    lookup's seconds read from the annotate job's own log."""
    from carbon_vep.benchmark.scan import annotate

    result = annotate(tmp_path, variants=2_000, contig_bp=5_000)
    assert result["statuses"] == {"scored": 2_000}
    assert 0 <= result["lookup_s"] < result["annotate_job_s"]  # the log's 2 decimals
    assert set(result["peak_rss_mb"]) == {"check-panel", "annotate"}


def test_bench_niah_passes_times_the_three_ways_on_one_row():
    """The branch pass on the cell's row and on the row with the value the model generates,
    and a pass per token and continuation, in one process: each measured, its passes counted
    (n - 1 = 3, 1, n + 1 = 5 for a 4-token value), the same prediction, the likelihoods within
    float rounding."""
    from carbon_vep.benchmark import niah_passes

    result = niah_passes.main(["--layers", "2", "--ctx", "512", "--reps", "1"])
    assert set(result["median_ms"]) == set(niah_passes.WAYS)
    assert all(ms > 0 for ms in result["median_ms"].values())
    assert result["value_tokens"] == 4 and result["same_prediction"]
    assert result["passes_after_prefill"] == {"branch": 3, "branch_retrieved": 1, "apart": 5}
    assert result["max_abs_ll_difference"] <= 1e-5


def test_bench_last_layer_times_each_path_both_ways():
    """The NIAH prefill, the right-end contexts and the scan's tiles, the last layer at the
    positions read and whole, in one process: each measured, the same answers, the FLOPs'
    prediction; the pruning switched off for the whole way and back on after it."""
    from carbon_vep.benchmark import last_layer
    from carbon_vep.model import last_layer as model_last_layer

    prunable = model_last_layer.prunable
    result = last_layer.main(["--layers", "2", "--hidden", "64", "--ctx", "256", "--reps", "1"])
    assert model_last_layer.prunable is prunable  # the switch restored
    with last_layer.whole_last_layer():  # what the whole way runs under: no layer pruned
        assert not model_last_layer.prunable(None)
    assert result["kept"] == {"niah_prefill": 1, "right_end": 1, "scan": 65}  # 129-token tiles
    for name in ("niah_prefill", "right_end", "scan"):
        r = result[name]
        assert r["median_ms"]["ours"] > 0 and r["median_ms"]["whole"] > 0
        assert r["max_abs_difference"] <= 1e-5
    for name in ("niah_prefill", "right_end"):  # 2 layers: about half of one saved
        assert 1.5 < result[name]["flops_predict"] < 2
        assert 1.02 < result[name]["flops_predict_carbon_3b"] < 1.05  # about 1/30
    assert 1.01 < result["scan"]["flops_predict_carbon_3b"] < 1.02  # half a tile: about 1/60


def test_bench_compiled_layers_times_both_ways_with_the_same_answers():
    """The scan's tiles, the right-end contexts, the centered recipe's window groups and a
    chunked prefill, eager and compiled, in one process: the compiled engine's first call timed
    alone, both ways measured, the same answers (the groups' summed log-likelihoods, ~-140
    here, to float32 rounding)."""
    from carbon_vep.benchmark import compiled_layers

    result = compiled_layers.main(
        ["--layers", "2", "--hidden", "64", "--tile-bp", "600", "--tiles", "3", "--reps", "1"]
    )
    assert result["tokens_a_pass"] == 101 and result["passes"] == 3
    assert result["scan"]["compile_s"] > 0  # the right-end contexts may reuse its graph
    for name in ("scan", "right_end", "centered", "prefill"):
        r = result[name]
        assert r["median_ms"]["eager"] > 0 and r["median_ms"]["compiled"] > 0
        assert r["max_abs_difference"] <= (1e-4 if name == "centered" else 1e-5), name


def test_bench_decode_attention_times_a_compiled_step_both_ways():
    """The product's decode loop with its forward compiled, under transformers' sdpa and the
    jobs' attention: each way's steady step measured; the bytes its attention moves, the cache
    read once against 1 + 2 x 8 times (Carbon-3B's 8 query heads a key head)."""
    from carbon_vep.benchmark import decode_attention

    argv = ["--layers", "1", "--head-dim", "8", "--rows", "2", "--prompt", "64", "--new", "6"]
    result = decode_attention.main([*argv, "--reps", "1"])
    assert set(result["median_step_ms"]) == {"sdpa", "jobs"}
    assert all(ms > 0 for ms in result["median_step_ms"].values())
    moved = result["attention_bytes_a_step"]
    # one layer, 2 rows x 69 slots of 4 key heads of 8 float32 keys and values
    assert moved["jobs"] == 2 * 69 * 4 * 8 * 2 * 4
    assert moved["sdpa"] == 17 * moved["jobs"]


def test_bench_scan_plan_plans_the_draft_genome_whole_and_by_its_exome(tmp_path):
    """plan-scan as a job on the bench's genome at 1/1,000 of its size: every contig written
    planned (bases scored = targeted bases less the gaps), the exome's targets all on the 24
    chromosomes, the figures read from the plans the jobs wrote."""
    from carbon_vep.benchmark import scan_plan

    result = scan_plan.main(["--scale", "0.001", "--targets", "500", "--workdir", str(tmp_path)])
    assert result["contigs"] == len(scan_plan.HG38_MBP) + scan_plan.SMALL_CONTIGS
    whole, exome = result["all"], result["exome"]
    assert whole["targeted_bp"] == result["genome_bp"]
    gaps_bp = whole["targeted_bp"] - whole["scored_bp"]
    assert gaps_bp == whole["n_runs"] * scan_plan.GAP_BP  # every gap whole inside a contig
    assert exome["targeted_bp"] <= 500 * scan_plan.TARGET_BP
    assert 0 < exome["scored_bp"] <= exome["targeted_bp"] < whole["targeted_bp"]
    assert whole["peak_rss_mb"] > 0 and exome["s"] > 0
    assert not list(tmp_path.iterdir())  # the genome removed with its folder
