"""`SpillFiles`: frames appended to numbered files come back whole, in the order appended,
with their dtypes; a file read is removed, and the folder on exit, failed or not."""

from __future__ import annotations

import datetime

import polars as pl
import pytest

from carbon_vep.spill import SpillFiles


def _part(start: int, n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "row": pl.Series(range(start, start + n), dtype=pl.UInt32),
            "text": [None if i % 3 == 0 else f"v{i};é" for i in range(start, start + n)],
            "kind": pl.Series([("a", "b")[i % 2] for i in range(n)], dtype=pl.Categorical),
            "small": pl.Series([i % 100 for i in range(n)], dtype=pl.Int8),
            "value": pl.Series([i / 7 for i in range(n)], dtype=pl.Float32),
            "flag": [i % 2 == 0 for i in range(n)],
            "day": [datetime.date(2026, 1, 1 + i % 28) for i in range(n)],
            "alts": [["A", "C"][: i % 3] for i in range(n)],
            "nothing": pl.Series([None] * n, dtype=pl.Null),
        }
    )


def test_spilled_frames_come_back_whole_in_order_with_their_dtypes(tmp_path):
    parts = {3: [_part(0, 5), _part(5, 0), _part(5, 7)], 1: [_part(100, 4)]}
    with SpillFiles(tmp_path / "spill") as spill:
        for number in (3, 1, 3, 3):
            spill.append(number, parts[number].pop(0))
        assert spill.numbers() == [1, 3]
        one = spill.read(1)
        assert one.equals(_part(100, 4)) and one.schema == _part(100, 4).schema
        assert spill.numbers() == [3]
        three = spill.read(3)
        expected = pl.concat([_part(0, 5), _part(5, 7)])
        assert three.schema == expected.schema
        assert three.equals(expected)
        assert list((tmp_path / "spill").iterdir()) == []  # a file read is removed
    assert not (tmp_path / "spill").exists()


def test_spill_folder_is_removed_when_the_work_fails(tmp_path):
    with pytest.raises(RuntimeError), SpillFiles(tmp_path / "spill") as spill:
        spill.append(0, _part(0, 3))
        raise RuntimeError("the caller failed")
    assert not (tmp_path / "spill").exists()
