"""The scan's loop without the GPU waiting on the host, checked against the loop as it was:

- one copy of a batch's per-base values to the host instead of two per tile, with the device
  one batch ahead: identical values (support/engine_as_it_was.py's per-tile reference);
- a batch's rows built and written on a worker thread while the device computes the next:
  byte-identical chunk files; a writer that fails, or a scan that fails, leaves no file.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from support import engine_as_it_was as as_it_was
from support.host_reads import HostReads

from carbon_vep.config.stages import TileSettings
from carbon_vep.model.engine import Engine
from carbon_vep.progress import Progress
from carbon_vep.scan.background import BackgroundWriter
from carbon_vep.scan.positions import BaseWriter
from carbon_vep.scan.targets import Piece
from carbon_vep.scan.tiles import _new_timing, _scored_batches, scan_chunk
from carbon_vep.scan.tiling import tile_region

TILES = TileSettings(240, 120)


@pytest.fixture(scope="module")
def engine(loaded):
    return Engine(loaded.model, loaded.vocab, loaded.device, batch_size=3)


@pytest.fixture
def one_thread():
    """Bit-equal values need one OpenMP thread: with two, torch's CPU kernels may split a
    reduction by the batch's shape, and the reference copies per tile from other batches (the
    test failed under `pytest -n 0` on 2 cores, passed under `make test`'s one thread a worker)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _cut(reference, start=1_000, end=2_500):
    length = reference.lengths["chr17"]
    return [("chr17", t) for t in tile_region(length, start, end, *TILES.__dict__.values())]


def _batches(engine, reference, cut, log=True):
    progress = Progress(sum(t.score_end - t.score_start for _, t in cut), "bases", "test")
    return list(_scored_batches(engine, reference, cut, progress, _new_timing(), log=log))


@pytest.mark.parametrize("log", [True, False])
def test_one_copy_per_batch_gives_the_values_of_per_tile_copies(engine, reference, log, one_thread):
    cut = _cut(reference)
    ours = [values for batch in _batches(engine, reference, cut, log) for values in _scored(batch)]
    before = as_it_was.per_tile_scan_values(engine, reference, cut, log=log)
    assert len(ours) == len(before) == len(cut) > 3 * 2  # several batches of 3 tiles
    for got, expected in zip(ours, before, strict=True):
        assert np.array_equal(got, expected)


def _scored(batch):
    """Each tile's scored bases' values from a batch, [2, bases, 4] (ATCG order)."""
    for (_, tile, _), values in zip(batch.tiles, batch.values, strict=True):
        lo, hi = tile.score_start - tile.start - batch.first, tile.score_end - tile.start
        yield values[:, lo : hi - batch.first]


def test_host_reads_and_copies_do_not_grow_with_the_tiles_of_a_batch(
    engine, reference, monkeypatch
):
    copies = []
    to_host_async = engine.to_host_async
    monkeypatch.setattr(engine, "to_host_async", lambda x: (copies.append(1), to_host_async(x))[1])
    counts = {}
    for n in (1, 3):
        copies.clear()
        with HostReads() as reads:
            batches = _batches(engine, reference, _cut(reference)[:n])
        assert len(batches) == 1
        counts[n] = reads.total
        assert len(copies) == 1  # the batch's values, once
    assert counts[1] == counts[3] <= 1  # transformers' one read per forward pass at most


def _chunk(engine, reference, path, overlap):
    pieces = [Piece("chr17", 1_000, 3_000, 0, reference.lengths["chr17"])]
    writer = BaseWriter(path)
    try:
        stats = scan_chunk(engine, reference, pieces, TILES, writer, "test", overlap=overlap)
    except BaseException:
        writer.abort()
        raise
    writer.close()
    return stats


def test_the_chunk_file_is_the_one_the_loop_as_it_was_wrote(engine, reference, tmp_path):
    """Per-tile copies, rows written before the next batch starts (support/engine_as_it_was.py)
    against one copy per batch, the device one batch ahead, rows written on a thread: the same
    bytes."""
    _chunk(engine, reference, tmp_path / "now.parquet", overlap=True)
    pieces = [Piece("chr17", 1_000, 3_000, 0, reference.lengths["chr17"])]
    cut = [(p.chrom, t) for p in pieces for t in p.tiles(TILES)]
    writer = BaseWriter(tmp_path / "before.parquet")
    assert as_it_was.per_tile_scan_chunk(engine, reference, cut, writer) == 2_000
    writer.close()
    assert (tmp_path / "now.parquet").read_bytes() == (tmp_path / "before.parquet").read_bytes()


def test_writing_on_a_thread_gives_byte_identical_files(engine, reference, tmp_path):
    inline = _chunk(engine, reference, tmp_path / "inline.parquet", overlap=False)
    threaded = _chunk(engine, reference, tmp_path / "threaded.parquet", overlap=True)
    assert inline["bases"] == threaded["bases"] == 2_000
    assert (tmp_path / "inline.parquet").read_bytes() == (
        tmp_path / "threaded.parquet"
    ).read_bytes()
    for stats in (inline, threaded):
        assert 0 < stats["forward_s"] <= stats["device_s"] <= stats["wall_s"]
        assert stats["writer_wait_s"] >= 0 and 0 < stats["write_s"] < stats["wall_s"]


def test_a_failing_writer_stops_the_scan_and_leaves_no_file(
    engine, reference, tmp_path, monkeypatch
):
    calls = []

    def fail_second(self, frame):
        calls.append(frame.height)
        if len(calls) == 2:
            raise OSError("disk full")
        write(self, frame)

    write = BaseWriter.write
    monkeypatch.setattr(BaseWriter, "write", fail_second)
    with pytest.raises(OSError, match="disk full"):
        _chunk(engine, reference, tmp_path / "chunk.parquet", overlap=True)
    assert list(tmp_path.iterdir()) == []


def test_a_failing_scan_stops_the_writer_before_the_file_is_gone(
    engine, reference, tmp_path, monkeypatch
):
    launched = []
    forward = engine.forward

    def fail_third(ids, *args, **kwargs):
        launched.append(len(ids))
        if len(launched) == 3:
            raise RuntimeError("device lost")
        return forward(ids, *args, **kwargs)

    monkeypatch.setattr(engine, "forward", fail_third)
    with pytest.raises(RuntimeError, match="device lost"):
        _chunk(engine, reference, tmp_path / "chunk.parquet", overlap=True)
    assert list(tmp_path.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name == "carbon-vep-writer"]


def test_background_writer_keeps_order_bounds_the_queue_and_reports_errors():
    written, held = [], []

    def slow(item):
        held.append(item)
        time.sleep(0.01)
        written.append(item)

    with BackgroundWriter(slow, depth=2) as sink:
        for item in range(10):
            sink.put(item)
            assert item - len(written) <= 2 + 1  # at most `depth` waiting, one being written
    assert written == list(range(10)) and sink.wait_s > 0

    def fail(item):
        raise ValueError(f"bad {item}")

    sink = BackgroundWriter(fail)
    sink.put(1)
    with pytest.raises(ValueError, match="bad 1"):
        for item in range(2, 100):  # raised at a later put (or at close)
            sink.put(item)
        sink.close()
