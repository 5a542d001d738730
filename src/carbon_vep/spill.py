"""Rows dealt to numbered files on disk in one pass, then read back a file at a time: the
distribution sorts that keep a table's rows out of memory (make-shards' buckets of keys,
the exports' runs of batches read back in another order than the table's).

`SpillFiles` appends frames to a file per number as Arrow IPC streams (zstd): an append
writes one record batch and keeps nothing but the open file (a Parquet writer keeps every row
group's metadata until it closes, and a pass of 100,000-row slices dealt to 128 files writes a
row group a file a slice: 128,000 of them for a table of 100 M rows). A file read back is
removed; the folder is removed on exit, whatever happened.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa

_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


class SpillFiles:
    """Frames appended to numbered files in `folder` (created; removed on exit), each file
    read back whole once, with the dtypes its frames had."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir()
        # number -> its open file, its writer and the dtypes its frames have
        self._open: dict[int, tuple[pa.NativeFile, pa.ipc.RecordBatchStreamWriter, pl.Schema]] = {}

    def __enter__(self) -> SpillFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        for sink, writer, _ in self._open.values():
            writer.close()
            sink.close()
        self._open.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    def numbers(self) -> list[int]:
        """The numbers written to (and not yet read), in order."""
        return sorted(self._open)

    def append(self, number: int, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        if number not in self._open:
            sink = pa.OSFile(str(self._path(number)), "wb")
            writer = pa.ipc.new_stream(sink, table.schema, options=_OPTIONS)
            self._open[number] = sink, writer, frame.schema
        self._open[number][1].write_table(table)

    def read(self, number: int) -> pl.DataFrame:
        """Every row appended to `number`, in the order appended; the file is removed."""
        sink, writer, schema = self._open.pop(number)
        writer.close()
        sink.close()
        path = self._path(number)
        with pa.OSFile(str(path), "rb") as source:
            table = pa.ipc.open_stream(source).read_all()
        path.unlink()
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame.cast(schema)

    def _path(self, number: int) -> Path:
        return self.folder / f"{number:05d}.arrows"
