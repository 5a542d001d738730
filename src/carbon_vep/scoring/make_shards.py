"""`carbon-vep make-shards` in bounded memory, by a distribution sort. The checked panel's `ok`
rows are counted by bin (`BIN_BP` of a contig; one polars query), and the bins, in key order,
are cut into buckets: runs of bins of about `BUCKET_ROWS` rows, so each bucket holds a range of
the sorted keys. One pass over the panel (`BATCH_ROWS` rows at a time) writes each `ok` row's
key to its bucket's spill file (`carbon_vep.spill`); then, bucket by bucket in key order, its
distinct keys are sorted (`windows.unique_variants`), given their recipe's windows a batch at a
time, and cut into shards, each written once complete (`windows.stream_shards`: a site's
alleles stay in one shard across a batch or bucket boundary). Held at once: a bucket's keys and
their sort, a batch and a shard, and the bin counts, not the panel's keys (a sort of every key,
even sunk to a file by polars, held ~190 bytes a key: 800 MB at 3.8 M keys)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from carbon_vep import atomic
from carbon_vep.columns import VARIANT_KEY, Status
from carbon_vep.errors import reading_parquet
from carbon_vep.genome.windows import UNIQUE_VARIANT_INPUT, stream_shards, unique_variants
from carbon_vep.spill import SpillFiles

# checked rows read, and sorted variants given windows, at a time
BATCH_ROWS = 100_000
# `ok` rows a bucket holds (past this, a bucket ends with the bin that crosses it)
BUCKET_ROWS = 250_000
# bp a bin spans: buckets start at bin starts, so a bucket holds at most one bin more
BIN_BP = 100_000
_BIN, _BUCKET = "_bin", "_bucket"
# the buckets' files (`SpillFiles`), in the output's temporary folder: removed before it is
# renamed into place
BUCKETS_DIR = ".buckets"


def write_shards(
    checked: str | Path,
    outdir: str | Path,
    add_windows: Callable[[pl.DataFrame], pl.DataFrame],
    shard_size: int,
) -> tuple[int, int]:
    """The shard files of a checked panel in `outdir` (`shard_00000.parquet`, ...: an empty
    panel gives one empty shard), the folder renamed into place once complete; the variants
    and the shards written. `add_windows`: a batch of sorted variants with their windows."""
    variants = shards = 0
    with atomic.atomic_dir(outdir) as tmp, SpillFiles(tmp / BUCKETS_DIR) as buckets:
        split_into_buckets(checked, buckets)
        with reading_parquet(checked):
            no_rows = pl.scan_parquet(checked).select(VARIANT_KEY).clear().collect()
        batches = (add_windows(batch) for batch in sorted_batches(buckets, no_rows))
        for number, shard in enumerate(stream_shards(batches, shard_size)):
            shard.write_parquet(tmp / f"shard_{number:05d}.parquet")
            variants, shards = variants + shard.height, number + 1
    return variants, shards


def _bin() -> pl.Expr:
    return (pl.col("pos") // BIN_BP).alias(_BIN)


_IS_OK = pl.col("status") == Status.OK


def bin_counts(checked: str | Path) -> pl.DataFrame:
    """The `ok` rows a bin (ref_chrom, `_BIN`) holds (`len`), in key order: one row a bin
    that holds any, not one a row."""
    query = pl.scan_parquet(checked).filter(_IS_OK).group_by("ref_chrom", _bin()).len()
    return query.sort("ref_chrom", _BIN).collect()


def bucket_bins(counts: pl.DataFrame, bucket_rows: int) -> pl.DataFrame:
    """Each bin's bucket (`_BUCKET`, from 0): the bins of `bin_counts` in key order, a bucket
    starting at the first bin that starts past a multiple of `bucket_rows` rows."""
    rows_before = pl.col("len").cast(pl.Int64).cum_sum() - pl.col("len")
    return counts.select("ref_chrom", _BIN, (rows_before // bucket_rows).alias(_BUCKET))


def split_into_buckets(checked: str | Path, buckets: SpillFiles) -> None:
    """The `ok` rows' `status` and key, each appended to its bucket (one pass, a batch at a
    time); a panel with no `ok` row fills none."""
    with reading_parquet(checked):
        bins = bucket_bins(bin_counts(checked), BUCKET_ROWS)
    for batch in _checked_batches(checked):
        for bucket, part in _by_bucket(batch, bins):
            buckets.append(bucket, part)


def _checked_batches(checked: str | Path) -> Iterator[pl.DataFrame]:
    """The checked panel's `status` and key, `BATCH_ROWS` rows at a time (a read error names
    the file; one of the caller's, writing, is its own)."""
    # pre_buffer off: it reads whole row groups ahead, ~40 MB more at 4.2 M rows (measured)
    with reading_parquet(checked), pq.ParquetFile(checked, pre_buffer=False) as file:
        for batch in file.iter_batches(BATCH_ROWS, columns=list(UNIQUE_VARIANT_INPUT)):
            yield pl.from_arrow(batch)


def _by_bucket(batch: pl.DataFrame, bins: pl.DataFrame) -> Iterator[tuple[int, pl.DataFrame]]:
    """The `ok` rows of a batch of checked rows (`status` and the key) by bucket."""
    ok = batch.filter(_IS_OK).with_columns(_bin())
    tagged = ok.join(bins, on=["ref_chrom", _BIN], how="left", nulls_equal=True).drop(_BIN)
    for (bucket,), part in tagged.partition_by(_BUCKET, include_key=False, as_dict=True).items():
        yield bucket, part


def sorted_batches(buckets: SpillFiles, no_rows: pl.DataFrame) -> Iterator[pl.DataFrame]:
    """The distinct `ok` keys of the buckets (in key order), sorted, `BATCH_ROWS` at a time;
    no bucket: `no_rows` (the key's columns, no row), so that an empty panel still gives its
    one empty shard."""
    numbers = buckets.numbers()
    for number in numbers:
        variants = unique_variants(buckets.read(number))
        for start in range(0, variants.height, BATCH_ROWS):
            yield variants.slice(start, BATCH_ROWS)
    if not numbers:
        yield no_rows
