"""Genomic-NIAH cells in, metrics out: the published grid and its config names, the checks a
cell passes before any model loads, and the task's metrics (docs/suite-conventions.md#genomic-niah).

A cell (one task at one context, e.g. the Hub config `niah_neardup_d2_32k`) holds rows with
`uid`, `prompt` (a real-genome haystack holding key -> value pairs, ending with the query key),
`value`, `value_len_bp`, `positive_sequence` (= prompt + value), `negative_sequence` (prompt +
another value) and `context_length_tokens`; `depth` where the builder recorded it. No torch here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.columns import Status
from carbon_vep.config.niah_grid import NIAH_TASKS, niah_config_name, parse_niah_config_name
from carbon_vep.config.stages import EvaluationSettings
from carbon_vep.errors import InputError
from carbon_vep.evaluate.metrics import add_mean_interval, task_metrics
from carbon_vep.suite.tasks import read_task_table

# the columns no row may leave empty, and with the context length, every column a cell needs
NOT_EMPTY = ("uid", "prompt", "value", "value_len_bp", "positive_sequence", "negative_sequence")
REQUIRED = (*NOT_EMPTY, "context_length_tokens")
# the columns of bases (and the rows' task) that must hold text, and those of whole numbers
SEQUENCES = ("prompt", "value", "positive_sequence", "negative_sequence")
COUNTS = ("value_len_bp", "context_length_tokens")
# what score-niah writes per row, in this order (plus `depth` when the cell has one)
ROW_COLUMNS = (
    "uid",
    "task",
    "context_length_tokens",
    "status",
    "reason",
    "pred",
    "gen_exact_match",
    "gen_base_accuracy",
    "target_ll",
    "negative_ll",
    "ll_margin",
    "ll_correct",
)
# the results table's row of a cell: the published headline. ll_correct stays in the metrics as
# a sanity check only: the official evaluation README calls it inflated (the negative value is
# wrong at all 24 bp, so the likelihood gap is easy; ll_correct >= 0.95 with exact match <= 0.1)
HEADLINE = ("gen_exact_match",)
DEFINITIONS = {
    "gen_exact_match": "mean over rows of 1 when the greedy prediction (value_len_bp / 6 new "
    "tokens, special ids suppressed, restricted to the 6-mer block) equals the value exactly, "
    "else 0 (the published headline)",
    "gen_base_accuracy": "mean over rows of (bases of the prediction equal to the value) / "
    "value_len_bp",
    "ll_correct": "mean over rows of 1 when target_ll > negative_ll: target_ll and negative_ll "
    "are the mean full-vocabulary log-probabilities of the value's tokens after the prompt, for "
    "the planted value and for the negative (a distractor's value, or another random value); "
    "a sanity check, not a headline: inflated, as the negative is easy to tell apart",
    "ll_margin": "mean over rows of target_ll - negative_ll (nats per token)",
    "by_depth": "the same means over the rows planted at each depth (fraction of the haystack "
    "before the planted pair), where the cell records `depth`",
}
_ACGT = re.compile(r"^[ACGT]*$")
log = logging.getLogger("carbon_vep")


def cell_task(path: str | Path, columns: Iterable[str], given: str | None) -> str | None:
    """The task of a cell's rows when it has no `task` column (the Hub's cells have none): as
    given, else read from the file's name when that is the cell's config name (niah_4k.parquet,
    niah_neardup_d2_32k.parquet, as the Hub and the workflow name cells). None: a `task` column."""
    if "task" in columns:
        return None
    if given:
        return given
    parsed = parse_niah_config_name(Path(path).name.split(".")[0])
    if parsed is None:
        raise InputError(
            path,
            "the cell has no `task` column and its file name is not a Genomic-NIAH config "
            "name (niah_4k, niah_neardup_d2_32k, ...): name the task (--cell-task)",
        )
    return parsed[0]


def result_name(cell: pl.DataFrame) -> str:
    """What a cell's metrics are filed under by default: its config name (niah_neardup_d2_32k),
    from its rows' task and context."""
    first = cell.select("task", "context_length_tokens").row(0)
    return niah_config_name(first[0], int(first[1]))


def read_cell(path: str | Path, k: int = 6, task: str | None = None) -> pl.DataFrame:
    """A checked cell: uid, prompt, value, negative_value, value_len_bp, context_length_tokens,
    task, depth (when present), row_id, source. `task`: the rows' task when the cell has no
    `task` column (default: from the file name, `cell_task`). Raises InputError naming the file,
    the row and the problem; the full positive / negative sequences are not kept (prompt +
    value)."""
    frame = read_task_table(path, REQUIRED, text=(*SEQUENCES, "task"))
    given, task = task, cell_task(path, frame.columns, task)
    _check_counts(frame, Path(path))
    _check_tasks(frame, Path(path), given)
    frame = frame.with_columns(
        *(pl.col(c).cast(pl.Int64, strict=False) for c in COUNTS),
        *(pl.col(c).cast(pl.Utf8) for c in ("uid", *SEQUENCES)),
    )
    frame = _upper_cased(frame, Path(path))
    _check_cell(frame, Path(path), k)
    if "task" not in frame.columns:
        frame = frame.with_columns(pl.lit(task, pl.Utf8).alias("task"))
    depth = ["depth"] if "depth" in frame.columns else []
    keep = [
        "uid",
        "prompt",
        "value",
        "negative_value",
        "value_len_bp",
        "context_length_tokens",
        "task",
        *depth,
        "row_id",
        "source",
    ]
    return frame.with_columns(
        pl.col("negative_sequence")
        .str.slice(pl.col("prompt").str.len_chars())
        .alias("negative_value"),
        pl.col("task").cast(pl.Utf8) if "task" in frame.columns else pl.lit(task, pl.Utf8),
    ).select(keep)


def _check_counts(frame: pl.DataFrame, path: Path) -> None:
    """Refuse a value of value_len_bp or context_length_tokens that is not a whole number
    (text such as `24bp`, 24.5), naming its row: cast, it would read as an empty value."""
    for column in COUNTS:
        value = pl.col(column)
        whole = value.cast(pl.Float64, strict=False)
        bad = value.is_not_null() & (whole.is_null() | (whole != whole.floor()))
        row = _first_bad(frame, bad)
        if row:
            shown = frame.filter(bad)[column][0]
            problem = f"`{column}` {shown!r} is not a whole number"
            raise InputError(path, f"{row['source']} (uid {row['uid']}): {problem}")


def _check_tasks(frame: pl.DataFrame, path: Path, given: str | None = None) -> None:
    """Refuse a `task` column holding a value that is no Genomic-NIAH task, or another task
    than the one `given` (--cell-task, which names the task of a cell without the column:
    never silently overridden), naming its row."""
    if "task" not in frame.columns:
        return
    allowed = [given] if given else list(NIAH_TASKS)
    bad = ~pl.col("task").cast(pl.Utf8).is_in(allowed).fill_null(False)
    row = _first_bad(frame, bad)
    if row:
        shown = frame.filter(bad)["task"][0]
        if shown in NIAH_TASKS:  # a task, but not the one given
            raise InputError(
                path,
                f"{row['source']} (uid {row['uid']}): the cell's `task` column says {shown!r}, "
                f"--cell-task {given!r}: the column is the rows' task (drop --cell-task)",
            )
        what = "empty `task`" if shown is None else f"task {shown!r} is not a Genomic-NIAH task"
        raise InputError(
            path, f"{row['source']} (uid {row['uid']}): {what} (one of {', '.join(NIAH_TASKS)})"
        )


def _upper_cased(frame: pl.DataFrame, path: Path) -> pl.DataFrame:
    """The cell with its bases upper-cased, as recovery and perturbation take soft-masked
    (lower-case) sequence; the rows that had any are counted in the log. Other characters stay
    for the checks to refuse, naming the row."""
    columns = ("prompt", "value", "positive_sequence", "negative_sequence")
    soft = pl.any_horizontal(pl.col(c).str.contains("[a-z]").fill_null(False) for c in columns)
    n = frame.select(soft.sum()).item()
    if n:
        log.info("%s: %d rows hold soft-masked (lower-case) bases: upper-cased", path, n)
    return frame.with_columns(pl.col(c).str.to_uppercase() for c in columns)


def _first_bad(frame: pl.DataFrame, bad: pl.Expr) -> dict | None:
    rows = frame.filter(bad).select("uid", "source").head(1).to_dicts()
    return rows[0] if rows else None


def _row_checks(k: int) -> list[tuple[pl.Expr, str]]:
    """The row-level rules of the published task: (a row breaks it, what is wrong)."""
    return [
        (
            ~pl.col("prompt").str.contains(_ACGT.pattern),
            "the prompt holds characters other than A, C, G, T (soft-masked lower case is "
            "upper-cased; the task's prompts are ACGT only)",
        ),
        (
            pl.col("prompt").str.len_chars() % k != 0,
            f"the prompt's length is not a multiple of "
            f"{k}: it does not tokenize into whole {k}-mers",
        ),
        (~pl.col("value").str.contains(_ACGT.pattern), "the value is not ACGT only"),
        (
            pl.col("value").str.len_chars() != pl.col("value_len_bp"),
            "len(value) differs from value_len_bp",
        ),
        (
            pl.col("positive_sequence") != pl.col("prompt") + pl.col("value"),
            "positive_sequence is not prompt + value",
        ),
        (
            ~pl.col("negative_sequence").str.starts_with(pl.col("prompt"))
            | (
                pl.col("negative_sequence").str.len_chars()
                != pl.col("prompt").str.len_chars() + pl.col("value_len_bp")
            ),
            "negative_sequence is not prompt + a value of value_len_bp",
        ),
        (
            ~pl.col("negative_sequence").str.contains(_ACGT.pattern),
            "negative_sequence is not ACGT only",
        ),
    ]


def _check_cell(frame: pl.DataFrame, path: Path, k: int) -> None:
    """Every cell-level and row-level rule of the published task, first failure reported."""
    for column in NOT_EMPTY:
        row = _first_bad(frame, pl.col(column).is_null())
        if row:
            raise InputError(path, f"{row['source']} (uid {row['uid']}): empty `{column}`")
    lengths = sorted(frame["value_len_bp"].unique().to_list())
    if len(lengths) != 1:
        raise InputError(
            path,
            f"rows do not share one value_len_bp ({lengths}): a cell is one value length, "
            "and the number of generated tokens is value_len_bp / 6",
        )
    if lengths[0] <= 0 or lengths[0] % k:
        raise InputError(
            path,
            f"value_len_bp {lengths[0]} is not a positive multiple of {k}: "
            f"the value must be whole {k}-mer tokens",
        )
    duplicated = frame.filter(pl.col("uid").is_duplicated())["uid"].head(1).to_list()
    if duplicated:
        raise InputError(path, f"uid {duplicated[0]!r} is not unique (rows are keyed by uid)")
    for bad, problem in _row_checks(k):
        row = _first_bad(frame, bad)
        if row:
            raise InputError(path, f"{row['source']} (uid {row['uid']}): {problem}")


def check_row_range(cell: pl.DataFrame, rows: slice, path: str | Path) -> None:
    """Refuse a job's row range (`--row-range`, from a niah entry's `rows`) that reaches past
    the cell's rows, before any model loads: sliced, it would score fewer rows, or none."""
    if rows.stop is not None and rows.stop > cell.height:
        raise InputError(
            path,
            f"row range {rows.start}:{rows.stop} reaches past the cell's {cell.height} rows "
            f"(0:{cell.height}); under the workflow, a niah entry's `rows` must not exceed them",
        )


def prompt_tokens(frame: pl.DataFrame, k: int) -> int:
    """The most tokens a row of the cell needs: prefix + prompt + value (the positive sequence)."""
    longest = frame.select(pl.col("prompt").str.len_chars().max()).item()
    return 1 + (int(longest) + int(frame["value_len_bp"][0])) // k


# ---- per row and metrics ---------------------------------------------------------------------
def base_accuracy(pred: str, value: str) -> float:
    """Equal bases / len(value); a short prediction counts its missing bases as wrong."""
    return sum(a == b for a, b in zip(pred, value, strict=False)) / len(value)


def _means(part: pl.DataFrame) -> dict:
    return {
        "n": part.height,
        **{m: float(part[m].cast(pl.Float64).mean()) for m in DEFINITIONS if m != "by_depth"},
    }


def niah_metrics(
    rows: pl.DataFrame, evaluation: EvaluationSettings | None = None, parameters: dict | None = None
) -> dict:
    """Means of the four row metrics, counts, per-depth means, intervals and definitions."""
    evaluation = evaluation or EvaluationSettings()
    scored = rows.filter(pl.col("status") == Status.SCORED)
    metrics = _means(scored) if scored.height else {"n": 0}
    metrics.pop("n")
    result = task_metrics(
        "genomic_niah",
        rows,
        scored,
        metrics=metrics,
        by_task_context=_groups(scored, ["task", "context_length_tokens"]),
        by_depth=_groups(scored, ["depth"]) if "depth" in scored.columns else [],
        definitions=dict(DEFINITIONS),
        parameters=parameters or {},
    )
    for name in ("gen_exact_match", "ll_correct"):
        values = scored[name].cast(pl.Float64).to_numpy() if scored.height else np.array([])
        add_mean_interval(result, name, values, evaluation)
    failed = rows.height - scored.height
    if failed:
        result["warnings"].append(f"{failed} rows not scored (see their status and reason)")
    return result


def _groups(scored: pl.DataFrame, by: Iterable[str]) -> list[dict]:
    by = list(by)
    if scored.height == 0:
        return []
    return [
        {**dict(zip(by, key, strict=True)), **_means(part)}
        for key, part in sorted(scored.group_by(by), key=lambda g: [(v is None, v) for v in g[0]])
    ]
