"""Suite task files in: a task table (Parquet, TSV or CSV, named as panels are) with its
required columns, each row named by its file and row or line; a job's share of the rows
(`Part`) and the shares joined again (`merged_parts`); a task job's outputs (`TaskRun`); and a
generation job's times out (`JobTimes`: the engine's start and the scoring, written as JSON
beside the job's outputs)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep.errors import InputError
from carbon_vep.variants.text_table import (
    TABLE_SUFFIXES,
    read_text_table,
    table_format,
    text_dialect,
    text_records,
)


def read_task_table(
    path: str | Path, required: Sequence[str], text: Sequence[str] | None = None
) -> pl.DataFrame:
    """A task file (Parquet, or TSV / CSV plain or gzipped, named as panels are) with `required`
    columns, plus `row_id` and `source` (the file and its row or line).

    Text tables are read as strings; other columns are carried. The `text` columns present
    (default: the required ones, sequences all) must hold text: a Parquet column of another
    type (a list, numbers) is refused naming it, rather than cast to digits or a traceback.
    """
    path = Path(path)
    fmt = _task_format(path)
    try:
        if fmt == "parquet":
            frame = pl.read_parquet(path)
        else:
            frame = read_text_table(path, fmt, all_text=True)
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot read task file: {err}") from err
    _require_columns(path, frame.columns, required, frame.height)
    _require_text(path, frame, required if text is None else text)
    first = 1 if fmt == "parquet" else 2  # a text table's header is line 1
    unit = "row" if fmt == "parquet" else "line"
    return frame.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.format(
            "{}:{} {}", pl.lit(str(path)), pl.lit(unit), pl.int_range(pl.len()) + first
        ).alias("source"),
    )


def count_task_rows(path: str | Path, required: Sequence[str]) -> int:
    """The rows `read_task_table` reads from a task file, refused as it refuses the file, read
    without their values: a Parquet file's footer, or a text table's records counted line by
    line. What merge-recovery needs: its memory stays flat however long the prompts are."""
    path = Path(path)
    fmt = _task_format(path)
    try:
        if fmt == "parquet":
            columns = list(pl.read_parquet_schema(path))
            rows = pl.scan_parquet(path).select(pl.len()).collect().item()
        else:
            columns = read_text_table(path, fmt, n_rows=0, all_text=True).columns
            rows = sum(1 for _ in text_records(path, text_dialect(path, fmt).quoted)) - 1
    except (pl.exceptions.PolarsError, OSError, EOFError) as err:  # EOF: a gzip cut short
        raise InputError(path, f"cannot read task file: {err}") from err
    _require_columns(path, columns, required, rows)
    return rows


def _task_format(path: Path) -> str:
    if not path.is_file():
        raise InputError(path, "task file not found")
    fmt = table_format(path)
    if fmt is None:
        raise InputError(path, f"unknown task file type; use one of {sorted(TABLE_SUFFIXES)}")
    return fmt


def _require_columns(path: Path, found: Sequence[str], required: Sequence[str], rows: int) -> None:
    missing = [c for c in required if c not in found]
    if missing:
        raise InputError(path, f"missing column(s) {missing}; found {list(found)}")
    if rows == 0:
        raise InputError(path, "the task file holds no rows")


# what a column of sequences may be stored as: text, or no value at all
_TEXT_TYPES = (pl.String, pl.Categorical, pl.Enum, pl.Null)


def _require_text(path: Path, frame: pl.DataFrame, columns: Sequence[str]) -> None:
    for column in columns:
        dtype = frame.schema.get(column)
        if dtype is not None and not isinstance(dtype, _TEXT_TYPES):
            raise InputError(
                path, f"column `{column}` holds {dtype}, not text: it must hold strings of bases"
            )


def require_scorable(where: str | Path, reasons: Sequence[str]) -> None:
    """Stop a task none of whose rows can be scored (`reasons`: each row's, "" for a scorable
    row), naming the task file and the commonest reasons, as check_panel stops a panel with
    no row to score: exit 2 and no output, rather than a null headline."""
    if not reasons or any(not reason for reason in reasons):
        return
    top = "; ".join(f"{n} × {reason}" for reason, n in Counter(reasons).most_common(4))
    problem = f"none of the {len(reasons)} rows can be scored ({top}); nothing to score"
    raise InputError(where, problem)


def task_file(table: pl.DataFrame) -> str:
    """The task file a table was read from (its rows' `source` without the row)."""
    return str(table["source"][0]).rsplit(":", 1)[0] if table.height else "the task file"


@dataclass(frozen=True)
class Part:
    """Job `index` (0-based) of the `count` jobs a task's rows are cut into (a task entry's
    `parts`): rows [height * index // count, height * (index + 1) // count), so the parts
    cover every row once, in order, sizes differing by one at most."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Part:
        """`I/N` (0 <= I < N), as `--part` takes it."""
        index, sep, count = text.partition("/")
        if not (sep and index.isdigit() and count.isdigit() and int(index) < int(count)):
            raise ValueError(f"--part {text!r}: I/N with 0 <= I < N, e.g. 0/8")
        return cls(int(index), int(count))

    def rows(self, height: int) -> slice:
        return slice(height * self.index // self.count, height * (self.index + 1) // self.count)


def merged_parts(where: str, rows: int, parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The parts' predictions as one table in the task file's order, refused (naming `where`,
    the task file) unless they hold each of its `rows` rows once."""
    merged = pl.concat(parts, how="vertical").sort("row_id")
    require_each_once(
        where,
        list(range(rows)),
        merged["row_id"].to_list(),
        f"the file's {rows} rows",
        "the parts must be the task's I/N shares, every I once",
    )
    return merged


def require_each_once(where: str, expected: list, found: list, of: str, fix: str) -> None:
    """The one check that a job's parts, merged, hold each key of `expected` (a task file's
    row ids, a Genomic-NIAH cell's uids) exactly once: else refused, naming `where`, what the
    parts held against `of`, a few keys missing, and `fix`."""
    if sorted(found) == sorted(expected):
        return
    missing = sorted(set(expected) - set(found))[:3]
    raise InputError(
        where,
        f"the parts hold {len(found)} rows for {of} (missing e.g. {missing}, or some twice): {fix}",
    )


@dataclass
class JobTimes:
    """A job's two times: the engine's start (the model loaded, vLLM's KV cache allocated) and
    the scoring of its rows."""

    engine: str
    began: float = field(default_factory=time.perf_counter)
    ready_at: float | None = None
    done_at: float | None = None
    rows: int = 0

    def ready(self) -> None:
        self.ready_at = time.perf_counter()

    def done(self, rows: int) -> None:
        self.done_at, self.rows = time.perf_counter(), rows

    def record(self) -> dict[str, Any]:
        """rows, start_s, score_s, engine: what the benchmarks read."""
        ready = self.ready_at or self.began
        done = self.done_at or time.perf_counter()
        return {
            "rows": self.rows,
            "start_s": round(ready - self.began, 3),
            "score_s": round(done - ready, 3),
            "engine": self.engine,
        }

    def line(self, where: str) -> str:
        r = self.record()
        return (
            f"{where}: {r['rows']} rows scored in {r['score_s']:.2f} s on {r['engine']} "
            f"after an engine start of {r['start_s']:.2f} s"
        )


@dataclass
class TaskRun:
    """What a task kind's job returns (suite.jobs): its per-row table, its metrics JSON and,
    for a generation task, its times."""

    rows: pl.DataFrame
    metrics: dict[str, Any]
    times: JobTimes | None = None
