"""Model jobs say they are alive: items done, items/s and ETA at least once a minute."""

from __future__ import annotations

import logging

from carbon_vep.model.batching import in_batches
from carbon_vep.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_at_least_every_minute_and_at_the_end(caplog):
    clock = Clock()
    progress = Progress(100, "windows", "scoring", every_s=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="carbon_vep"):
        for minute in range(5):
            clock.now = minute * 30.0 + 30  # an update every 30 s
            progress.update(10)
        clock.now = 400.0
        progress.update(50)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "scoring: 20/100 windows (20%), 0.3 windows/s, elapsed 1m00s, ETA 4m00s",
        "scoring: 40/100 windows (40%), 0.3 windows/s, elapsed 2m00s, ETA 3m00s",
        "scoring: 100/100 windows (100%), 0.2 windows/s, elapsed 6m40s, ETA 0m00s",
    ]


def test_batches_report_their_items(caplog):
    progress = Progress(5, "tiles", "scan", every_s=0)
    with caplog.at_level(logging.INFO, logger="carbon_vep"):
        list(in_batches([1, 2, 3, 4, 5], lambda b: list(b), 2, progress=progress))
    done = [r.getMessage().split(" tiles")[0] for r in caplog.records]
    assert done == ["scan: 2/5", "scan: 4/5", "scan: 5/5"]
