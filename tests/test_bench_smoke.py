"""The benchmark's model-throughput path runs (on CPU, tiny shape); no timing is asserted."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "scripts/bench.py"


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def test_model_rows_reports_both_normalisations():
    bench = _bench_module()
    tiny = {"tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)}  # fmt: skip
    rows = bench.model_rows(torch.device("cpu"), tiny, n_windows=2, tokens=30, peak_n=64)
    assert [r["normalization"] for r in rows] == ["full_vocab", "dna_block"]
    for row in rows:
        assert row["bp_per_s"] == pytest.approx(6 * row["tokens_per_s"])
        assert all(
            math.isfinite(row[k]) and row[k] > 0 for k in ("tokens_per_s", "bf16_peak_tflops")
        )
