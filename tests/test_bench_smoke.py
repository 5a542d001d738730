"""The benchmark's model-throughput path runs (on CPU, tiny shape); no timing is asserted."""

import math

import pytest
import torch

from carbon_vep.benchmark import engine as bench


def test_model_rows_reports_both_normalisations():
    tiny = {"tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)}  # fmt: skip
    rows = bench.model_rows(torch.device("cpu"), tiny, n_windows=2, tokens=30, peak_n=64)
    assert [r["normalization"] for r in rows] == ["full_vocab", "dna_block"]
    for row in rows:
        assert row["bp_per_s"] == pytest.approx(6 * row["tokens_per_s"])
        assert all(
            math.isfinite(row[k]) and row[k] > 0 for k in ("tokens_per_s", "bf16_peak_tflops")
        )
