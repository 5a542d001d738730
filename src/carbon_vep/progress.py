"""Progress of a model job: items done, items/s and ETA in the log at least once a minute, and a
progress bar when stderr is a terminal, so a user watching a 20-minute shard knows it is alive.

Every model stage reports through `Progress`; batching.py updates it after each batch.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

log = logging.getLogger("carbon_vep")
LOG_EVERY_S = 60.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
    """Counts `unit`s of `what` towards `total`; logs a line every `every_s` seconds and at the
    end (`clock` is injectable so tests need not wait a minute)."""

    def __init__(
        self,
        total: int,
        unit: str,
        what: str,
        every_s: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.unit, self.what = total, unit, what
        self.every_s, self.clock = every_s, clock
        self.done = 0
        self.start = self.last_log = clock()
        self.bar = _terminal_bar(total, unit, what)

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        now = self.clock()
        if now - self.last_log >= self.every_s or self.done >= self.total:
            self.last_log = now
            log.info("%s", self.line(now))

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = _duration(left) if left != float("inf") else "unknown"
        share = self.done / self.total if self.total else 1.0
        return (
            f"{self.what}: {self.done:,}/{self.total:,} {self.unit} ({share:.0%}), "
            f"{rate:,.1f} {self.unit}/s, elapsed {_duration(elapsed)}, ETA {eta}"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _terminal_bar(total: int, unit: str, what: str):
    if not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit=f" {unit}", desc=what, file=sys.stderr, leave=False)
