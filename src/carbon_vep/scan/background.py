"""Writing on a worker thread, so the device is not kept waiting for the host (no torch).

`BackgroundWriter(write)` calls `write(item)` for each `put(item)`, in order, on one worker
thread, holding at most `depth` items waiting; `put` blocks when they are all taken (memory
stays bounded, and the time blocked is `wait_s`: the writer is the bottleneck when it grows). An
error of the worker is raised in the caller at the next `put` or at `close`; leaving the `with`
block on an error stops the worker before the caller cleans up (items still waiting are
dropped). `threaded=False` writes in the caller instead (same calls, same order), for
comparisons. The GIL is no obstacle: Parquet encoding and compression run in Arrow's C++ with
the GIL released.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

_STOP = object()


class BackgroundWriter:
    def __init__(self, write: Callable[[Any], None], depth: int = 2, threaded: bool = True):
        self._write = write
        self.threaded = threaded
        self.wait_s = 0.0
        self._error: BaseException | None = None
        self._cancelled = False
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, name="carbon-vep-writer", daemon=True)
        if threaded:
            self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            if self._error is None and not self._cancelled:
                try:
                    self._write(item)
                except BaseException as err:  # raised in the caller; the queue keeps draining
                    self._error = err

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def put(self, item: Any) -> None:
        self._raise_error()
        if not self.threaded:
            self._write(item)
            return
        began = time.monotonic()
        self._queue.put(item)
        self.wait_s += time.monotonic() - began

    def close(self) -> None:
        """Wait until every item is written; raise the worker's error if it had one."""
        self._stop()
        self._raise_error()

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def __enter__(self) -> BackgroundWriter:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.close()
        else:  # the caller failed: stop writing before it aborts the output
            self._cancelled = True
            self._stop()
