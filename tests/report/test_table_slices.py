"""A table read back in another order than its own (`report.table_slices`): each batch's rows
are the same whether read from the slices that hold them or dealt once to spill files, for a
table in order and one scattered against the batches, with rows the reader leaves out."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from carbon_vep.report import table_slices
from carbon_vep.report.table_slices import ROW, batches_in_order, rows_by_number, slice_reads

SLICE = 64


def _table(tmp_path, n: int) -> pl.LazyFrame:
    rng = np.random.default_rng(11)
    frame = pl.DataFrame(
        {
            "pos": rng.integers(0, 10_000, n),
            "text": [f"row {i}" if i % 5 else None for i in range(n)],
            "keep": rng.random(n) < 0.9,
        }
    )
    frame.write_parquet(tmp_path / "table.parquet", row_group_size=SLICE)
    return pl.scan_parquet(tmp_path / "table.parquet")


def _kept(piece: pl.LazyFrame, offset: int) -> pl.LazyFrame:
    """What a reader keeps of a slice: its rows numbered from `offset`, some left out."""
    return piece.with_row_index(ROW, offset=offset).filter(pl.col("keep")).drop("keep")


def _batches(table: pl.LazyFrame, scattered: bool, size: int) -> list[pl.Series]:
    rows = _kept(table, 0).select(ROW, "pos").collect()
    order = rows.sort("pos", ROW) if scattered else rows  # sorted by position: scattered rows
    numbers = order[ROW]
    return [numbers.slice(start, size) for start in range(0, len(numbers), size)]


@pytest.mark.parametrize("scattered", [False, True])
@pytest.mark.parametrize("spill_files", [1, 3, 128])
def test_each_batch_has_its_rows_read_either_way(tmp_path, monkeypatch, scattered, spill_files):
    table = _table(tmp_path, 1_000)
    batches = _batches(table, scattered, size=37)
    expected = [rows_by_number(table, wanted, _kept, SLICE) for wanted in batches]
    monkeypatch.setattr(table_slices, "SPILL_FILES", spill_files)
    for limit in (0, 10**9):  # dealt to spill files; read from the slices
        monkeypatch.setattr(table_slices, "REREAD_LIMIT", limit)
        out = tmp_path / "out.gz"
        got = list(batches_in_order(table, batches, _kept, SLICE, out))
        assert len(got) == len(expected)
        for ours, theirs, wanted in zip(got, expected, batches, strict=True):
            assert ours.equals(theirs)
            assert sorted(ours[ROW].to_list()) == sorted(wanted.to_list())
        assert [p.name for p in tmp_path.iterdir()] == ["table.parquet"]  # no spill left


def test_a_scattered_table_is_dealt_and_one_in_order_is_read_from_its_slices(tmp_path):
    """The choice: the slices a batch spans, summed over the batches, against the table's
    (batches of a slice's rows, as the exports read them: in order, a batch spans two)."""
    table = _table(tmp_path, 2_000)
    n_slices = -(-2_000 // SLICE)
    in_order = _batches(table, scattered=False, size=SLICE)
    scattered = _batches(table, scattered=True, size=SLICE)
    assert slice_reads(in_order, SLICE) <= 2 * n_slices
    assert slice_reads(scattered, SLICE) > table_slices.REREAD_LIMIT * n_slices
    assert slice_reads([pl.Series([0, SLICE - 1]), pl.Series([SLICE, 3 * SLICE])], SLICE) == 1 + 3
