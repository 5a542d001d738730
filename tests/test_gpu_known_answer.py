"""The GPU check's known_answer step within its time limit: a job running at the limit is
stopped and the jobs after it are not started, each such row saying so, so a hung job cannot
hold the lent device for the rest of the call. (The step's answers, every job run, are tested
in the CPU rehearsal: tests/test_gpu_check_smoke.py.)"""

from __future__ import annotations

import math

import torch

from carbon_vep.benchmark.gpu import known_answer as step
from carbon_vep.benchmark.harness import Measured


def test_jobs_past_the_limit_are_stopped_or_not_started(tmp_path, monkeypatch):
    world = {"model": tmp_path / "model", "fasta": tmp_path / "genome.fa"}
    monkeypatch.setattr(step.known_answer, "build_world", lambda work, steps, device: world)
    monkeypatch.setattr(step.known_answer, "write_panel", lambda w: tmp_path / "panel.tsv")
    limits = []

    def first_job_hangs(*args, env=None, check=True, timeout_s=None):
        limits.append(timeout_s)
        # the harness's answer for a command stopped at its limit (exit 124); the clock is gone
        monkeypatch.setattr(step.time, "monotonic", lambda: math.inf)
        return Measured(timeout_s, 10.0, stderr="timed out after 60 s", returncode=124)

    monkeypatch.setattr(step, "carbon_vep_job", first_job_hangs)
    rows = step.known_answer_aurocs(torch.device("cpu"), tmp_path, 1, time_limit_s=60)
    assert len(limits) == 1 and 0 < limits[0] <= 60  # one job started, with what was left
    assert rows[0]["error"] == "timed out after 60 s" and math.isnan(rows[0]["auroc"])
    assert [r["error"] for r in rows[1:]] == ["not run: the time limit was reached"] * 5
    assert {(r["recipe"], r["precision"]) for r in rows} == {
        (recipe, precision) for recipe in ("centered", "nexttoken") for precision in step.PRECISIONS
    }
