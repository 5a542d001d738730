"""Suite task files in: a task table (Parquet / TSV / CSV) with its required columns, each row
named by its file and line; and the bootstrap interval of a task's accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.errors import InputError
from carbon_vep.evaluate.metrics import bootstrap_intervals

TABLE_SUFFIXES = {".parquet": "parquet", ".tsv": "\t", ".txt": "\t", ".csv": ","}


def read_task_table(path: str | Path, required: Sequence[str]) -> pl.DataFrame:
    """A task file (Parquet / TSV / CSV) with `required` columns, plus `row_id` and `source`.

    Columns are read as given (text tables as strings); other columns are carried.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "task file not found")
    suffix = next((s for s in TABLE_SUFFIXES if path.name.lower().endswith(s)), None)
    if suffix is None:
        raise InputError(path, f"unknown task file type; use one of {sorted(TABLE_SUFFIXES)}")
    try:
        if suffix == ".parquet":
            frame = pl.read_parquet(path)
        else:
            frame = pl.read_csv(path, separator=TABLE_SUFFIXES[suffix], infer_schema_length=0)
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot read task file: {err}") from err
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(path, f"missing column(s) {missing}; found {frame.columns}")
    if frame.height == 0:
        raise InputError(path, "the task file holds no rows")
    first = 1 if suffix == ".parquet" else 2  # a text table's header is line 1
    unit = "row" if suffix == ".parquet" else "line"
    return frame.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.format(
            "{}:{} {}", pl.lit(str(path)), pl.lit(unit), pl.int_range(pl.len()) + first
        ).alias("source"),
    )


def bootstrap_mean_interval(values: np.ndarray, n_resamples: int, seed: int) -> dict | None:
    """Percentile 95% interval of a row mean (accuracy) over row resamples."""
    if n_resamples <= 0 or len(values) == 0:
        return None
    intervals = bootstrap_intervals(
        len(values), lambda i: {"mean": float(values[i].mean())}, n_resamples, seed
    )
    return intervals.get("mean")
