"""A profiled job's device timeline (model.job_profile): the share of the span some kernel ran,
the stretches with none, and what the host did meanwhile; the trace kept for later."""

from __future__ import annotations

import gzip
import json

import torch

from carbon_vep.model.job_profile import device_timeline, events_timeline, timeline_text


def test_busy_share_is_the_union_of_overlapping_kernels_and_gaps_name_the_host():
    kernels = [(0.0, 2_000.0), (1_000.0, 3_000.0), (6_000.0, 7_000.0), (9_500.0, 10_000.0)]
    host = [
        ("cudaStreamSynchronize", 3_000.0, 4_000.0),
        ("aten::index", 3_500.0, 6_500.0),  # 2.5 ms inside the 3 ms gap
        ("aten::mm", 0.0, 1_000.0),  # during kernels: in no gap
    ]
    timeline = device_timeline(kernels, host, (0.0, 10_000.0))
    # busy: 0-3 ms (overlap counted once) + 6-7 ms + 9.5-10 ms = 4.5 of 10 ms
    assert timeline["device_busy_share"] == 0.45
    # gaps of >= 1 ms: 3-6 ms and 7-9.5 ms (the end's 0 ms is none)
    assert timeline["idle_gaps"] == 2 and timeline["idle_in_gaps_s"] == 0.0055
    first, second = timeline["longest_gaps"]
    assert (first["at_s"], first["ms"]) == (0.003, 3.0)
    assert first["host"] == [["aten::index", 2.5], ["cudaStreamSynchronize", 1.0]]
    assert (second["ms"], second["host"]) == (2.5, [])
    text = timeline_text(timeline)
    assert "45.0%" in text and "aten::index 2.5 ms" in text and "no host operator" in text


def test_short_stretches_and_the_span_edges():
    """Kernels beyond the span are clipped; a gap under the threshold is not listed; a span
    with no kernel at all is one gap, busy 0."""
    timeline = device_timeline([(-500.0, 400.0), (1_200.0, 5_000.0)], [], (0.0, 4_000.0))
    assert timeline["device_busy_share"] == round((400 + 2_800) / 4_000, 4)
    assert timeline["idle_gaps"] == 0  # 0.8 ms is under 1 ms
    empty = device_timeline([], [("x", 0.0, 1.0)], (0.0, 2_000.0))
    assert empty["device_busy_share"] == 0.0 and empty["idle_gaps"] == 1


def test_a_real_profiler_s_events_give_a_timeline():
    """The profiler's own events (what a GPU job's are read from): top-level host operators
    found; on a CPU no kernel, so the device is never busy and the span is one gap (listed
    however short: these few operators may take well under the 1 ms threshold)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        a = torch.randn(64, 64)
        for _ in range(3):
            a = a @ a
    timeline = events_timeline(prof.events(), min_gap_us=0.0)
    assert timeline["device_busy_share"] == 0.0 and timeline["idle_gaps"] == 1
    names = {name for gap in timeline["longest_gaps"] for name, _ in gap["host"]}
    assert names & {"aten::randn", "aten::matmul", "aten::mm"}


def test_a_profiled_job_keeps_its_trace(demo_model_dir, tmp_path, monkeypatch):
    """PROFILE_ENV: the job's tables and its whole trace (gzip, Chrome's format) land in the
    folder."""
    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.model.job import load_job_model
    from carbon_vep.model.job_record import PROFILE_ENV, job_record

    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "profiles"))
    with job_record("score-t", None):
        loaded = load_job_model(ModelSettings(str(demo_model_dir), trust_remote_code=True), None)
        with torch.inference_mode():
            loaded.model(input_ids=torch.ones(1, 4, dtype=torch.long))
    [table] = (tmp_path / "profiles").glob("score-t-*.txt")
    [trace] = (tmp_path / "profiles").glob("score-t-*.trace.json.gz")
    assert table.name.removesuffix(".txt") == trace.name.removesuffix(".trace.json.gz")
    assert "aten::" in table.read_text()
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any(str(e.get("name", "")).startswith("aten::") for e in events)
    assert not list((tmp_path / "profiles").glob("*.trace.json"))  # only the packed one
