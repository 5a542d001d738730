"""A model job's own count (model.job_record): every model command loads through model.job, the
CLI ends the count, and where CARBON_VEP_JOB_RECORDS names a folder the record lands there (what
the GPU check's product step reads for each Snakemake job). Commands without a model write
none."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from carbon_vep.cli import main
from carbon_vep.config.stages import ModelSettings
from carbon_vep.model.job import load_job_model
from carbon_vep.model.job_record import PROFILE_ENV, RECORDS_ENV, job_record


def records(folder):
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_the_tokens_through_the_body_are_counted_from_the_load(
    demo_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "jobs"))
    with job_record("score-x", "out.parquet"):
        loaded = load_job_model(ModelSettings(str(demo_model_dir), trust_remote_code=True), None)
        with torch.inference_mode():
            loaded.model(input_ids=torch.ones(2, 7, dtype=torch.long))  # 14 tokens
            loaded.model.get_decoder()(input_ids=torch.ones(3, 5, dtype=torch.long))  # 15
    [record] = records(tmp_path / "jobs")
    assert record["command"] == "score-x" and record["out"] == "out.parquet"
    assert record["tokens"] == 29 and record["forward_calls"] == 2
    assert record["succeeded"] is True and record["device"] == "cpu"
    assert 0 < record["load_s"] <= record["wall_s"] <= record["process_s"]
    assert record["after_load_s"] == pytest.approx(record["wall_s"] - record["load_s"], abs=2e-3)
    assert record["host_peak_rss_bytes"] > 0 and record["tokens_per_s"] > 0
    assert "gpu_peak_reserved_bytes" not in record  # a CPU job has no device peak


def test_a_failed_job_is_recorded_failed_and_a_job_without_a_model_not_at_all(
    demo_model_dir, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "jobs"))
    with job_record("no-model", None):
        pass
    assert not (tmp_path / "jobs").exists()
    caplog.set_level("INFO")
    with pytest.raises(RuntimeError), job_record("score-y", None):
        load_job_model(ModelSettings(str(demo_model_dir), trust_remote_code=True), None)
        raise RuntimeError("out of memory")
    [record] = records(tmp_path / "jobs")
    assert record["command"] == "score-y" and record["succeeded"] is False
    # its log line does not read as a job that scored nothing and ended well
    assert "job score-y (stopped by the error below): 0 tokens through the model" in caplog.text


def test_a_cli_model_command_writes_its_record_and_logs_its_line(
    demo_model_dir, tmp_path, monkeypatch, caplog
):
    """score-perturbation on one pair of 54 bp: two sequences of 1 + 9 tokens through the body,
    after the output-layer probe's 1 + 8 tokens twice (the model's head, then ours); then the
    line in the job's log."""
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "jobs"))
    caplog.set_level(logging.INFO, logger="carbon_vep")
    pair = "ACGTTGCAT" * 6
    (tmp_path / "pairs.tsv").write_text(f"original_sequence\tsequence\n{pair}\t{pair[::-1]}\n")
    argv = ["score-perturbation", "--tasks-file", str(tmp_path / "pairs.tsv"), "--task", "p"]
    argv += ["--model", str(demo_model_dir), "--trust-remote-code", "--model-key", "demo"]
    out = tmp_path / "pairs.parquet"
    assert main([*argv, "--out", str(out), "--metrics", str(tmp_path / "m.json")]) == 0
    [record] = records(tmp_path / "jobs")
    assert record["command"] == "score-perturbation" and record["out"] == str(out)
    assert record["tokens"] == 2 * 9 + 2 * 10 and record["succeeded"] is True
    assert record["pass_tokens"] == 2 * 10  # the probe's passes are not the job's own
    assert "job score-perturbation: 38 tokens through the model" in caplog.text


def test_attention_pairs_count_the_cache_a_pass_attends_to(demo_model_dir, tmp_path, monkeypatch):
    """A prefill of 4 tokens (pairs 4 * 5 / 2 = 10), then 2 tokens off its cache (2 * (4 +
    1.5) = 11), batch 1: attention FLOPs scale with 21 query-key pairs, not with 6 tokens."""
    from transformers import DynamicCache

    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "jobs"))
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "profiles"))
    with job_record("score-z", None):
        loaded = load_job_model(ModelSettings(str(demo_model_dir), trust_remote_code=True), None)
        body = loaded.model.get_decoder()
        cache = DynamicCache(config=loaded.model.config)
        with torch.inference_mode():
            body(input_ids=torch.ones(1, 4, dtype=torch.long), cache=cache, use_cache=True)
            body(input_ids=torch.ones(1, 2, dtype=torch.long), cache=cache, use_cache=True)
    [record] = records(tmp_path / "jobs")
    assert record["tokens"] == 6 and record["attention_pairs"] == 21
    [table] = (tmp_path / "profiles").glob("score-z-*.txt")
    assert "aten::" in table.read_text()  # the job's own profile, its operators named


def test_phases_add_up_in_the_record_of_the_command_running(demo_model_dir, tmp_path, monkeypatch):
    """`add_phase` sums a named phase's seconds into the running command's record (what the GPU
    check reads NIAH's prefill, generation and likelihood from); outside a command it is a
    no-op, and a record without phases has an empty map."""
    from carbon_vep.model.job_record import add_phase

    add_phase("prefill", 5.0)  # no command: nothing to add to, nothing raised
    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "jobs"))
    spec = ModelSettings(str(demo_model_dir), trust_remote_code=True)
    with job_record("score-niah", "a.parquet"):
        load_job_model(spec, None)
        add_phase("prefill", 0.25)
        add_phase("generate", 0.5)
        add_phase("prefill", 0.125)
    with job_record("score-shard", "b.parquet"):
        load_job_model(spec, None)
    niah, shard = records(tmp_path / "jobs")
    assert niah["phases"] == {"prefill": 0.375, "generate": 0.5} and shard["phases"] == {}


def test_the_body_passes_are_timed_from_the_probe_on_and_decode_steps_are_not(
    demo_model_dir, tmp_path, monkeypatch
):
    """The record's pass clock (model.pass_clock): passes of more than one token a row, from
    the load or from `passes_timed_from_here` (after the start-up probe); a one-token pass (a
    decode step) is counted in `tokens` but not timed."""
    from carbon_vep.model.job_record import passes_timed_from_here

    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "jobs"))
    with job_record("score-p", None):
        loaded = load_job_model(ModelSettings(str(demo_model_dir), trust_remote_code=True), None)
        body = loaded.model.get_decoder()
        with torch.inference_mode():
            body(input_ids=torch.ones(4, 9, dtype=torch.long))  # before: dropped
            passes_timed_from_here()
            body(input_ids=torch.ones(2, 7, dtype=torch.long))  # 14, timed
            body(input_ids=torch.ones(3, 1, dtype=torch.long))  # a decode step: not timed
            body(input_ids=torch.ones(1, 5, dtype=torch.long))  # 5, timed
    [record] = records(tmp_path / "jobs")
    assert record["tokens"] == 36 + 14 + 3 + 5 and record["pass_tokens"] == 19
    assert 0 < record["pass_s"] <= record["after_load_s"]


def test_device_passes_are_read_from_their_events_as_they_finish(monkeypatch):
    """On a GPU a pass is timed by two CUDA events (no host wait): finished ones are read every
    FOLD_EVERY passes, the rest at the end; none inside a CUDA graph's capture."""
    from types import SimpleNamespace

    from carbon_vep.model import pass_clock

    now = {"ms": 0.0, "capturing": False}
    device = SimpleNamespace(type="cuda", index=1)

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing
            self.at, self.done = None, False

        def record(self, stream):
            assert stream == ("stream of", device)  # the model's device's stream, not device 0
            self.at = now["ms"]

        def query(self):
            return self.done

        def synchronize(self):
            self.done = True

        def elapsed_time(self, end):
            return end.at - self.at

    fake_cuda = SimpleNamespace(
        Event=Event,
        is_current_stream_capturing=lambda: now["capturing"],
        current_stream=lambda device: ("stream of", device),
    )
    monkeypatch.setattr(pass_clock, "_torch", lambda: SimpleNamespace(cuda=fake_cuda))
    monkeypatch.setattr(pass_clock, "FOLD_EVERY", 2)
    ids = SimpleNamespace(shape=(2, 10), device=device)
    clock = pass_clock.PassClock()
    for length_ms in (5.0, 7.0):  # two passes: the fold finds neither finished
        clock.start(ids)
        now["ms"] += length_ms
        clock.stop()
    assert clock.tokens == 0 and len(clock._events) == 2
    clock._events[0][1].done = True
    clock.start(ids)
    now["ms"] += 11.0
    clock.stop()  # the first is read, the second is not done, so reading stops there
    assert clock.tokens == 20 and len(clock._events) == 2
    now["capturing"] = True
    clock.start(ids)
    clock.stop()  # inside a capture: not timed
    assert clock.seconds() == (5.0 + 7.0 + 11.0) / 1000 and clock.tokens == 60
    # a device error (the job failing with it) is not raised again by the record's last read
    now["capturing"] = False
    clock.start(ids)
    clock.stop()

    def device_error():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    clock._events[0][1].synchronize = device_error
    assert clock.seconds() == (5.0 + 7.0 + 11.0) / 1000 and not clock._events
