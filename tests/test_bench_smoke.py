"""The benchmark's model-throughput path runs (on CPU, tiny shape); no timing is asserted."""

import math

import pytest
import torch

from carbon_vep.benchmark import engine as bench

pytestmark = pytest.mark.slow  # each benchmark runs once at toy sizes


def test_model_rows_reports_both_normalisations():
    tiny = {
        "tiny": dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    }
    rows = bench.model_rows(torch.device("cpu"), tiny, n_windows=2, tokens=30, peak_n=64)
    assert [r["normalization"] for r in rows] == ["full_vocab", "dna_block"]
    for row in rows:
        assert row["bp_per_s"] == pytest.approx(6 * row["tokens_per_s"])
        assert all(
            math.isfinite(row[k]) and row[k] > 0 for k in ("tokens_per_s", "bf16_peak_tflops")
        )


def test_the_harness_measures_a_whole_process_and_a_fresh_python_step():
    """run_command: wall time, the child's peak RSS (a process that touches 200 MB shows it),
    the exit code; run_step: a module-level function in a fresh Python, its dict back; Pair:
    the ratios."""
    import os
    import sys
    from pathlib import Path

    from carbon_vep.benchmark.harness import Pair, StepFailed, run_command, run_step

    touch = "x = bytearray(200 * 2**20); x[::4096] = bytes(len(range(0, len(x), 4096)))"
    big = run_command([sys.executable, "-c", touch])
    small = run_command([sys.executable, "-c", "pass"])
    assert big.returncode == 0 and big.peak_rss_mb > small.peak_rss_mb + 150
    assert run_command([sys.executable, "-c", "raise SystemExit(3)"], check=False).returncode == 3
    with pytest.raises(StepFailed, match="exited 3"):
        run_command([sys.executable, "-c", "raise SystemExit(3)"])
    tests = str(Path(__file__).parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    step = run_step("support.bench_steps:allocate", 120, env=env)
    assert step.result == {"mb": 120} and step.peak_rss_mb > small.peak_rss_mb + 100
    assert step.as_dict()["mb"] == 120 and step.as_dict()["s"] == step.seconds
    pair = Pair("x", small, big)
    assert pair.speedup == big.seconds / small.seconds
    assert pair.memory_ratio == big.peak_rss_mb / small.peak_rss_mb
