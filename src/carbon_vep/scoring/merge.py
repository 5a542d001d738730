"""Join shard scores back onto every checked panel row, by key, with the counts verified.

`merge_scores` joins frames in memory (`carbon-vep score`: one process, one shard);
`merge_score_files` does the same from files a slice of the checked table at a time (`carbon-vep
merge`: thousands of score files at ClinVar's size; `carbon-vep annotate`'s lookup scores),
holding the key columns for the checks, then the score files' values, never every column of the
checked table."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from carbon_vep import columns
from carbon_vep.atomic import PendingFile
from carbon_vep.columns import VARIANT_KEY, Status, repeats_previous_key
from carbon_vep.errors import reading_parquet

_SCORE_SCHEMA = columns.schema(columns.SCORE_SHARD)
_KEY = list(VARIANT_KEY)
_IS_OK = pl.col("status") == Status.OK
# the score columns that become the merged table's status and reason
_SCORE_STATUS = ("score_status", "score_reason")
# checked rows read, merged and written at a time by merge_score_files (a row group each)
BATCH_ROWS = 100_000
_SCORE_ROW = "_score_row"  # a score's number in the score files read one after the other
_HASH = "_key_hash"  # a variant key's 64-bit hash (merge_score_files: keys compared after)
# near what polars' write_parquet writes (zstd level 3, plain pages): with pyarrow's dictionary
# pages a 4.2 M-row merge took 296 MB against polars' 226 MB; plain, 247 MB
_WRITE_OPTIONS = {"compression": "zstd", "compression_level": 3, "use_dictionary": False}


class MergeError(RuntimeError):
    pass


def merge_scores(checked: pl.DataFrame, shard_scores: list[pl.DataFrame]) -> pl.DataFrame:
    """One row per checked row (sorted by row_id) with status, reason and the score columns.

    Scores are joined on the variant key, never by row order; every scoreable key must have
    exactly one score and no score may be left over. The scoring status replaces `ok`.
    """
    scores = (
        pl.concat(shard_scores, how="vertical")
        if shard_scores
        else pl.DataFrame(schema=_SCORE_SCHEMA)
    )
    _check_keys(checked.filter(_IS_OK).select(_KEY), scores.select(_KEY))
    # the scores lined up with the checked rows by one left join of the key columns alone, then
    # set beside the checked columns (kept on the `ok` rows only): no copy of the panel's other
    # columns, nor filtered copies, a concatenation and a sort of the whole table (at ClinVar's
    # size those held ~2 kB a row at once)
    lined_up = checked.select(*_KEY, "status", "reason").join(
        scores, on=_KEY, how="left", maintain_order="left"
    )
    if lined_up.height != checked.height:
        raise MergeError(f"merge produced {lined_up.height} rows for {checked.height} panel rows")
    merged = _with_scores(checked, lined_up.drop(_KEY), _added(scores.columns))
    return merged if merged["row_id"].is_sorted() else merged.sort("row_id")


def _check_keys(
    wanted: pl.DataFrame, scores: pl.DataFrame, contig_names: list[str] | None = None
) -> None:
    """MergeError unless every key of `wanted` (the `ok` rows' keys) has exactly one row in
    `scores` (every score's key) and every score matches a wanted key (`contig_names`: the
    names of ref_chrom given as numbers, for the message)."""
    duplicated = _duplicated_rows(scores)
    if duplicated:
        raise MergeError(f"{duplicated} score rows share a key across shards")
    wanted = wanted.unique()
    missing = wanted.join(scores, on=_KEY, how="anti")
    extra = scores.join(wanted, on=_KEY, how="anti")
    if missing.height or extra.height:
        if contig_names is not None:  # the contigs' names, not the numbers they were given
            missing = missing.with_columns(
                pl.col("ref_chrom").replace_strict(
                    range(len(contig_names)), contig_names, default=None, return_dtype=pl.String
                )
            )
        # the first three in key order, the contig's name first: `unique` leaves its rows (and
        # the numbers given to contigs) in no set order, so the message named other keys from
        # one run to the next
        examples = missing.bottom_k(3, by=_KEY).sort(_KEY).to_dicts()
        raise MergeError(
            f"{missing.height} scoreable variants have no score and {extra.height} scores match "
            f"no variant (e.g. missing {examples})"
        )


def _duplicated_rows(keys: pl.DataFrame) -> int:
    """The rows of `keys` whose key another row has too: the keys sorted, each compared with
    its neighbours (`is_duplicated` of the key columns held 0.4 GB more at 3.8 M keys)."""
    repeat = repeats_previous_key()  # _KEY is VARIANT_KEY
    duplicated = repeat | repeat.shift(-1, fill_value=False)
    return keys.select(_KEY).sort(_KEY).select(duplicated.sum()).item()


def _added(score_columns: Sequence[str]) -> list[str]:
    """The score columns set beside the checked ones (the key is the checked rows' own)."""
    return [name for name in score_columns if name not in (*_KEY, *_SCORE_STATUS)]


def _with_scores(checked: pl.DataFrame, lined_up: pl.DataFrame, added: list[str]) -> pl.DataFrame:
    """`checked` with the scores lined up with its rows (`lined_up`: its status and reason, the
    score columns, a row each) kept on its `ok` rows: the scoring status replaces `ok`."""
    status, reason = _SCORE_STATUS
    values = lined_up.select(
        pl.when(_IS_OK).then(pl.col(status)).otherwise(pl.col("status")).alias("status"),
        pl.when(_IS_OK).then(pl.col(reason)).otherwise(pl.col("reason")).alias("reason"),
        *(pl.when(_IS_OK).then(pl.col(name)).otherwise(None).alias(name) for name in added),
    )
    return checked.with_columns(values.get_columns())


def merge_score_files(
    checked: str | Path,
    score_files: Sequence[str | Path],
    out: str | Path,
    renamed: Mapping[str, str] | None = None,
) -> int:
    """`merge_scores` of the checked table and the score files, written to `out` (renamed into
    place once complete); the rows written. The checked table is read a slice of `BATCH_ROWS`
    rows at a time, never whole. Memory, at ClinVar's size: the `ok` rows' and the scores' keys
    as a 64-bit hash and a row number (12 bytes a row each side) for the checks, then a score
    number a checked row (4 bytes) and the score files one slice's rows need. Every key is
    compared itself as its score is set beside its row: two keys with one hash (or a check that
    fails) redo the checks on the keys themselves (~50 bytes a row each side), which say what
    is wrong. A checked table not in row_id order (check-panel writes it in order) is merged in
    memory. `renamed`: checked `ref_chrom` names the scores spell otherwise (annotate's lookup
    in a scan that names the contigs its own way), renamed so in the merged table."""
    table = pl.scan_parquet(checked)
    if renamed:
        table = table.with_columns(pl.col("ref_chrom").replace(dict(renamed)))
    try:
        return _merge_files(checked, table, score_files, out, exact=False)
    except _HashCollision:
        pass  # retried once out of this block: here the traceback still holds the hash pass's keys
    return _merge_files(checked, table, score_files, out, exact=True)


class _HashCollision(Exception):
    """Two variant keys share a 64-bit hash: the checks are redone on the keys themselves."""


def _merge_files(
    checked: str | Path,
    table: pl.LazyFrame,
    score_files: Sequence[str | Path],
    out: str | Path,
    exact: bool,
) -> int:
    contigs: dict[str, int] = {}
    on = _KEY if exact else [_HASH]
    wanted, n_rows = _wanted_keys(checked, table, contigs, on)
    if wanted is None:  # not in row_id order
        merged = merge_scores(_collect(checked, table), [_read(path) for path in score_files])
        return _write_slices(out, [merged], merged.height)
    scores, file_rows, score_schema = _score_keys(score_files, contigs, on)
    if exact:  # what is wrong, said as merge_scores says it, from the keys themselves: before
        # their join (1.3 GB at 4.2 M rows), which a failed check makes needless
        _check_keys(wanted.select(_KEY), scores.select(_KEY), contig_names=list(contigs))
    # each `ok` row's score number, by one join of the keys (or their hashes)
    found = wanted.join(scores, on=on, how="left", maintain_order="left")
    numbers = found[_SCORE_ROW]
    if (
        found.height != wanted.height  # a key scored twice
        or numbers.null_count()  # an `ok` row with no score
        or numbers.n_unique() != scores.height  # a score matching no row
    ):
        if not exact:
            raise _HashCollision
        raise MergeError(f"{scores.height} scores do not match {wanted.height} scoreable rows")
    score_rows = pl.Series(_SCORE_ROW, [None] * n_rows, dtype=pl.UInt32).scatter(
        found["_row"], numbers
    )
    del wanted, scores, found, numbers
    added = _added(score_schema)
    reader = _ScoreRows(
        score_files, file_rows, {n: score_schema[n] for n in (*_KEY, *_SCORE_STATUS, *added)}
    )

    def slices() -> Iterator[pl.DataFrame]:
        for start in range(0, max(n_rows, 1), BATCH_ROWS):  # an empty table: one empty slice
            part = _collect(checked, table.slice(start, BATCH_ROWS))
            lined_up = reader.take(score_rows.slice(start, part.height))
            same_key = pl.all_horizontal(part[k].eq_missing(lined_up[k]) for k in _KEY)
            if not part.select(same_key | ~_IS_OK).to_series().all():
                if not exact:
                    raise _HashCollision
                raise MergeError("a score was joined to a row of another variant")
            lined_up = lined_up.with_columns(part["status"], part["reason"])
            yield _with_scores(part, lined_up, added).cast({n: score_schema[n] for n in added})

    return _write_slices(out, slices(), n_rows)


def _key_hash() -> pl.Expr:
    return pl.struct(_KEY).hash()


def _collect(path: str | Path, frame: pl.LazyFrame) -> pl.DataFrame:
    with reading_parquet(path):
        return frame.collect()


def _read(path: str | Path, columns: list[str] | None = None) -> pl.DataFrame:
    with reading_parquet(path):
        return pl.read_parquet(path, columns=columns)


def _keyed(frame: pl.DataFrame, contigs: dict[str, int], on: list[str]) -> pl.DataFrame:
    """`frame` with ref_chrom as a number (`contigs`, extended with the names it first sees):
    4 bytes a key, not a string's 16; and the key's hash (`_HASH`) where `on` is it."""
    if frame["ref_chrom"].dtype != pl.UInt32:
        for name in frame["ref_chrom"].drop_nulls().unique().to_list():
            contigs.setdefault(name, len(contigs))
        frame = frame.with_columns(
            pl.col("ref_chrom").replace_strict(contigs, default=None, return_dtype=pl.UInt32)
        )
    return frame.with_columns(_key_hash().alias(_HASH)) if _HASH in on else frame


def _wanted_keys(
    path: str | Path, table: pl.LazyFrame, contigs: dict[str, int], on: list[str]
) -> tuple[pl.DataFrame | None, int]:
    """The `ok` rows' keys (`on`: the key columns or their hash) with their row numbers
    (`_row`), read a slice at a time, and the table's rows; None for the keys where row_id is
    not in order."""
    parts, n_rows, last = [], 0, None
    while True:
        part = _collect(path, table.slice(n_rows, BATCH_ROWS).select("row_id", "status", *_KEY))
        if not part.height:
            break
        row_id = part["row_id"]
        if not row_id.is_sorted() or (last is not None and row_id[0] < last):
            return None, 0
        last = row_id[-1]
        ok = part.with_row_index("_row", offset=n_rows).filter(_IS_OK)
        parts.append(_keyed(ok, contigs, on).select("_row", *on))
        n_rows += part.height
    empty = pl.DataFrame(schema={"_row": pl.UInt32, **_CODED})
    wanted = pl.concat(parts) if parts else _keyed(empty, contigs, on).select("_row", *on)
    return wanted, n_rows


_CODED = {**columns.schema(columns.SCORE_SHARD[: len(_KEY)]), "ref_chrom": pl.UInt32}


def _score_keys(
    score_files: Sequence[str | Path], contigs: dict[str, int], on: list[str]
) -> tuple[pl.DataFrame, list[int], pl.Schema]:
    """Every score file's keys (`on`: the key columns or their hash) one after the other,
    numbered (`_SCORE_ROW`), each file's rows, and the score columns' names and types (the
    first file's, or `SCORE_SHARD`'s)."""
    parts, file_rows, schema = [], [], pl.Schema(_SCORE_SCHEMA)
    for number, path in enumerate(score_files):
        if number == 0:
            with reading_parquet(path):
                schema = pl.read_parquet_schema(path)
        keys = _keyed(_read(path, _KEY), contigs, on).select(on)
        parts.append(keys)
        file_rows.append(keys.height)
    scores = pl.concat(parts) if parts else _keyed(pl.DataFrame(schema=_CODED), contigs, on)
    return scores.with_row_index(_SCORE_ROW), file_rows, schema


class _ScoreRows:
    """Score rows by number (`_SCORE_ROW`), read from the score files that hold them; the files
    the last call read are kept for the next (a shard's rows are needed by neighbouring slices
    of a panel in position order: each file is read about once)."""

    def __init__(
        self, files: Sequence[str | Path], file_rows: list[int], schema: dict[str, pl.DataType]
    ) -> None:
        self.files, self.schema = list(files), schema
        self.starts = pl.Series([0, *file_rows]).cum_sum()
        self.kept: dict[int, pl.DataFrame] = {}

    def take(self, numbers: pl.Series) -> pl.DataFrame:
        """The rows `numbers` names, in its order (a null number: a row of nulls)."""
        needed = numbers.drop_nulls().unique().sort()
        file_of = (self.starts.search_sorted(needed, side="right") - 1).unique().sort().to_list()
        self.kept = {f: self._read(f) for f in file_of}
        held = (
            pl.concat([self.kept[f] for f in file_of])
            if file_of
            else pl.DataFrame(schema={**self.schema, _SCORE_ROW: pl.Int64})  # no `ok` row
        )
        wanted = numbers.cast(pl.Int64).to_frame(_SCORE_ROW)
        return wanted.join(held, on=_SCORE_ROW, how="left", maintain_order="left").drop(_SCORE_ROW)

    def _read(self, file: int) -> pl.DataFrame:
        """A score file's columns of `schema` with its rows' numbers."""
        if file in self.kept:
            return self.kept[file]
        rows = _read(self.files[file], list(self.schema))
        start = self.starts[file]
        return rows.with_columns(pl.int_range(start, start + rows.height).alias(_SCORE_ROW))


def _write_slices(out: str | Path, slices: Iterable[pl.DataFrame], n_rows: int) -> int:
    """The frames of `slices`, a row group each, as one Parquet file at `out`, written under a
    temporary name and renamed once complete and of `n_rows` rows (nothing half-written or
    short survives); the rows written."""
    pending = PendingFile(out)
    writer: pq.ParquetWriter | None = None
    written = 0
    try:
        for frame in slices:
            table = frame.to_arrow()
            if writer is None:
                writer = pq.ParquetWriter(pending.tmp, table.schema, **_WRITE_OPTIONS)
            writer.write_table(table, row_group_size=max(table.num_rows, 1))
            written += frame.height
        if writer is not None:
            writer.close()
        writer = None
        if written != n_rows:
            raise MergeError(f"merge wrote {written} rows for {n_rows} panel rows")
        pending.publish()
    finally:
        if writer is not None:
            writer.close()
        pending.discard()
    return written
