"""Scores a user can read: a scan's genome-wide rank scale (PHRED) and context calibration.

Every scanned SNV falls in one calibration cell: its pentanucleotide (the variant's base in the
middle) and alternate base — 1,024 × 4 slots, 3,072 of them real — or, where the
pentanucleotide touches an N or a contig end, its trinucleotide cell, or, where even that does,
the global cell. A scan job counts its SNVs per (cell, score) at the precision the tabix TSV
prints the score with (`score_key`: the rounded score × 10^decimals, an integer), and the
neutral set's score sums per cell; counts from every job add up, so memory is bounded by the
number of cells and score values, never by the genome.

From the summed counts (`Calibration.build`):

- the rank scale: rank(s) = number of SNVs scoring ≥ s (rank 1 = the largest, most damaging
  score; ties share the rank of the last of them, so a tie never claims a better rank than the
  share of SNVs it is tied with) and `phred = −10·log10(rank / total)`, as CADD's scaled score:
  10 = top 10%, 20 = top 1%; the single highest score gets 10·log10(total);
- the context means: the neutral set's mean score per pentanucleotide cell (GPN-Star's
  calibration), falling back to the trinucleotide cell and then to the global mean where a cell
  holds fewer than `min_count` neutral SNVs; `calibrated = score − mean[cell]`, computed at the
  printed precision from the printed score (so anyone can redo it from the TSV and the table);
- the calibrated rank scale: the same ranks over the calibrated scores (`calibrated_phred`).

A calibration is for one model, revision, normalisation, tile geometry and min_context (its
`fingerprint`); applying it to scores made otherwise is an error (`check_fingerprint`). No torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from carbon_vep.atomic import atomic_path
from carbon_vep.errors import InputError

BASES = "ACGT"
_CODE = np.full(256, -1, dtype=np.int64)  # byte -> 0..3 for ACGT, -1 for anything else
for _i, _b in enumerate(BASES):
    _CODE[ord(_b)] = _i
PENTA_CELLS = 4**5 * 4  # (pentanucleotide, alt) slots; the 1,024 with alt == ref stay empty
TRI_OFFSET = PENTA_CELLS  # trinucleotide cells of SNVs whose pentanucleotide is incomplete
GLOBAL_CELL = TRI_OFFSET + 4**3 * 4  # SNVs whose trinucleotide is incomplete
N_CELLS = GLOBAL_CELL + 1
MIN_COUNT = 100  # neutral SNVs a cell needs for its own mean (below: the coarser cell's)
LEVELS = ("pentanucleotide", "trinucleotide", "global")
# what a calibration holds for: a table made under other settings must not be applied
FINGERPRINT_KEYS = ("model", "revision", "normalization", "tile_bp", "min_context", "decimals")


# ---- per-SNV keys -------------------------------------------------------------------------
def rounded_score(score: pl.Expr, decimals: int) -> pl.Expr:
    """The score as the TSV prints it: rounded, -0 written as 0."""
    value = score.round(decimals)
    return pl.when(value == 0).then(pl.lit(0.0, pl.Float32)).otherwise(value)


def score_key(score: pl.Expr, decimals: int) -> pl.Expr:
    """The rounded score as an integer (score × 10^decimals): the unit every count uses."""
    return (rounded_score(score, decimals).cast(pl.Float64) * 10**decimals).round().cast(pl.Int64)


def key_value(key: pl.Expr, decimals: int) -> pl.Expr:
    """An integer key back to the score it stands for (Float64)."""
    return key.cast(pl.Float64) / 10**decimals


def context_cells(sequence: str, offset: int, pos: np.ndarray, alt: np.ndarray) -> np.ndarray:
    """The calibration cell of each SNV at 1-based `pos` with alternate base index `alt` (0-3,
    ACGT), given `sequence` = the contig's bases from 0-based `offset` (upper case; anything not
    ACGT, and anything outside `sequence`, counts as an N)."""
    codes = _CODE[np.frombuffer(sequence.encode(), dtype=np.uint8)]
    index = pos - 1 - offset
    window = np.full((len(pos), 5), -1, dtype=np.int64)
    for j, shift in enumerate(range(-2, 3)):
        at = index + shift
        inside = (at >= 0) & (at < len(codes))
        window[inside, j] = codes[at[inside]]
    tri_ok = (window[:, 1:4] >= 0).all(axis=1)
    penta_ok = tri_ok & (window[:, 0] >= 0) & (window[:, 4] >= 0)
    weights = 4 ** np.arange(4, -1, -1)
    penta = (np.where(window < 0, 0, window) * weights).sum(axis=1)
    tri = (np.where(window[:, 1:4] < 0, 0, window[:, 1:4]) * weights[2:]).sum(axis=1)
    return np.where(
        penta_ok, penta * 4 + alt, np.where(tri_ok, TRI_OFFSET + tri * 4 + alt, GLOBAL_CELL)
    )


def cell_context(cell: int) -> tuple[str, str, str]:
    """(level, context, alt) of a cell id: e.g. ("pentanucleotide", "ACGTA", "T")."""
    if cell == GLOBAL_CELL:
        return "global", "", ""
    level, width, base = (
        ("pentanucleotide", 5, cell)
        if cell < TRI_OFFSET
        else ("trinucleotide", 3, cell - TRI_OFFSET)
    )
    context, alt = divmod(base, 4)
    letters = "".join(BASES[(context >> (2 * (width - 1 - i))) & 3] for i in range(width))
    return level, letters, BASES[alt]


# ---- counting -----------------------------------------------------------------------------
COUNT_SCHEMA = {"cell": pl.Int64, "key": pl.Int64, "n": pl.Int64}
NEUTRAL_SCHEMA = {"cell": pl.Int64, "n": pl.Int64, "key_sum": pl.Int64}


class CalibrationCounts:
    """Counts of one job's SNVs per (cell, score key), and the neutral SNVs' key sums per cell,
    added batch by batch; memory is bounded by cells × score values."""

    def __init__(self) -> None:
        self._counts: list[pl.DataFrame] = []
        self._held = 0
        self.neutral_n = np.zeros(N_CELLS, dtype=np.int64)
        self.neutral_sum = np.zeros(N_CELLS, dtype=np.int64)

    def add(self, cells: np.ndarray, keys: np.ndarray, neutral: np.ndarray | None = None) -> None:
        """SNVs with their cells and score keys; `neutral` marks the neutral set (None: all)."""
        batch = pl.DataFrame(
            {"cell": cells, "key": keys}, schema={"cell": pl.Int64, "key": pl.Int64}
        )
        self._counts.append(batch.group_by("cell", "key").len("n").cast({"n": pl.Int64}))
        self._held += self._counts[-1].height
        if self._held > 4 * N_CELLS:  # fold the partial counts back together now and then
            self._counts = [self.counts()]
            self._held = self._counts[0].height
        mask = slice(None) if neutral is None else neutral
        self.neutral_n += np.bincount(cells[mask], minlength=N_CELLS)
        self.neutral_sum += np.bincount(cells[mask], weights=keys[mask], minlength=N_CELLS).astype(
            np.int64
        )

    def counts(self) -> pl.DataFrame:
        if not self._counts:
            return pl.DataFrame(schema=COUNT_SCHEMA)
        return _summed(pl.concat(self._counts))

    def neutral(self) -> pl.DataFrame:
        used = np.flatnonzero(self.neutral_n)
        return pl.DataFrame(
            {"cell": used, "n": self.neutral_n[used], "key_sum": self.neutral_sum[used]},
            schema=NEUTRAL_SCHEMA,
        )

    def write(self, path: str | Path, meta: Mapping[str, Any]) -> None:
        """One Parquet file: the (cell, key, n) counts, the neutral sums in its metadata."""
        table = self.counts().to_arrow()
        extra = {
            "neutral": self.neutral().write_json(),
            **{k: json.dumps(v) for k, v in meta.items()},
        }
        table = table.replace_schema_metadata({f"carbon_vep.{k}": v for k, v in extra.items()})
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")


def _summed(counts: pl.DataFrame) -> pl.DataFrame:
    return counts.group_by("cell", "key").agg(pl.col("n").sum()).sort("cell", "key")


def read_counts(paths: list[str | Path]) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """Every job's counts summed: (counts, neutral sums, the metadata they share)."""
    counts, neutral, meta = [], [], None
    for path in paths:
        table = pq.read_table(path)
        raw = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        own = {
            k.removeprefix("carbon_vep."): v for k, v in raw.items() if k != "carbon_vep.neutral"
        }
        own = {k: json.loads(v) for k, v in own.items()}
        if meta is None:
            meta = own
        elif own != meta:
            raise InputError(path, f"counts made under other settings ({own} vs {meta})")
        counts.append(pl.from_arrow(table))
        neutral.append(pl.read_json(raw["carbon_vep.neutral"].encode(), schema=NEUTRAL_SCHEMA))
    summed = _summed(pl.concat(counts)) if counts else pl.DataFrame(schema=COUNT_SCHEMA)
    neutral_sums = (
        pl.concat(neutral).group_by("cell").agg(pl.col("n").sum(), pl.col("key_sum").sum())
        if neutral
        else pl.DataFrame(schema=NEUTRAL_SCHEMA)
    )
    return summed, neutral_sums.sort("cell"), meta or {}


# ---- the scales ---------------------------------------------------------------------------
def half_up(value: pl.Expr) -> pl.Expr:
    """Round half up to an integer: one rule wherever a calibrated key is made."""
    return (value + 0.5).floor().cast(pl.Int64)


@dataclass(frozen=True)
class RankScale:
    """score key -> rank (SNVs scoring at least as high) and PHRED, over `total` SNVs."""

    keys: np.ndarray  # distinct keys, ascending
    below: np.ndarray  # SNVs with a smaller key than keys[i]
    total: int

    @classmethod
    def from_counts(cls, counts: pl.DataFrame) -> RankScale:
        """`counts`: one row per (key, n); keys may repeat (they are summed)."""
        summed = counts.group_by("key").agg(pl.col("n").sum()).sort("key")
        n = summed["n"].to_numpy()
        below = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
        return cls(summed["key"].to_numpy(), below, int(n.sum()))

    def ranks(self, keys: np.ndarray) -> np.ndarray:
        """Rank of each key: the SNVs scoring ≥ it (at least 1: a key above every counted one
        ranks first)."""
        i = np.searchsorted(self.keys, keys, side="left")
        below = np.where(
            i < len(self.keys), self.below[np.minimum(i, len(self.keys) - 1)], self.total
        )
        return np.maximum(self.total - below, 1)

    def phred(self, keys: np.ndarray) -> np.ndarray:
        return -10.0 * np.log10(self.ranks(keys) / self.total)

    def table(self, decimals: int) -> pl.DataFrame:
        """score -> n, rank, rank fraction, PHRED: the calibration table of this scale."""
        ranks = self.total - self.below
        return pl.DataFrame(
            {
                "score": self.keys / 10**decimals,
                "n": np.diff(np.concatenate([self.below, [self.total]])),
                "rank": ranks,
                "rank_fraction": ranks / self.total,
                "phred": -10.0 * np.log10(ranks / self.total),
            }
        ).sort("score", descending=True)

    def score_at(self, phred: float, decimals: int) -> float | None:
        """The lowest score whose PHRED reaches `phred` (None when none does)."""
        table = self.table(decimals).filter(pl.col("phred") >= phred)
        return None if table.is_empty() else float(table["score"].min())


def context_means(neutral: pl.DataFrame, min_count: int) -> pl.DataFrame:
    """Per cell: its neutral SNVs' count and mean key, and the mean calibration subtracts — its
    own, or the trinucleotide cell's, or the global one's, whichever first has `min_count`."""
    n = np.zeros(N_CELLS, dtype=np.int64)
    total = np.zeros(N_CELLS, dtype=np.float64)
    n[neutral["cell"].to_numpy()] = neutral["n"].to_numpy()
    total[neutral["cell"].to_numpy()] = neutral["key_sum"].to_numpy()
    if n.sum() == 0:
        raise ValueError("the neutral set holds no scanned SNV: no context means")
    cells = np.arange(N_CELLS)
    is_penta = cells < TRI_OFFSET
    tri_slot = np.where(is_penta, ((cells >> 2 >> 2) & 63) * 4 + (cells & 3), cells - TRI_OFFSET)
    tri_slot[GLOBAL_CELL] = 0  # unused
    tri_n = np.bincount(tri_slot[:GLOBAL_CELL], weights=n[:GLOBAL_CELL], minlength=256)
    tri_sum = np.bincount(tri_slot[:GLOBAL_CELL], weights=total[:GLOBAL_CELL], minlength=256)
    global_mean = total.sum() / n.sum()
    own_ok = n >= min_count
    tri_ok = tri_n[tri_slot] >= min_count
    level = np.where(own_ok & is_penta, 0, np.where(tri_ok & (cells != GLOBAL_CELL), 1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        own_mean = np.where(n > 0, total / np.maximum(n, 1), np.nan)
        tri_mean = tri_sum[tri_slot] / np.maximum(tri_n[tri_slot], 1)
    used = np.select([level == 0, level == 1], [own_mean, tri_mean], default=global_mean)
    described = [cell_context(int(c)) for c in cells]
    frame = pl.DataFrame(
        {
            "cell": cells,
            "level": [d[0] for d in described],
            "context": [d[1] for d in described],
            "ref": [d[1][len(d[1]) // 2] if d[1] else "" for d in described],
            "alt": [d[2] for d in described],
            "n_neutral": n,
            "mean_key_neutral": own_mean,
            "fallback": [LEVELS[i] for i in level],
            "mean_key": used,
        }
    )
    frame = frame.with_columns(pl.col("mean_key_neutral").fill_nan(None))
    return frame.filter((pl.col("ref") != pl.col("alt")) | (pl.col("level") == "global"))


def calibrated_keys(keys: pl.Expr, mean_key: pl.Expr) -> pl.Expr:
    """The calibrated score's key: score − mean at the printed precision (half up)."""
    return half_up(keys.cast(pl.Float64) - mean_key)


@dataclass(frozen=True)
class Calibration:
    """A scan's rank scales and context means, and what they hold for (`meta`)."""

    raw: RankScale
    calibrated: RankScale
    contexts: pl.DataFrame  # context_means(): one row per cell
    meta: dict[str, Any]  # the fingerprint, decimals, min_count, neutral set

    @classmethod
    def build(
        cls, counts: pl.DataFrame, neutral: pl.DataFrame, meta: Mapping[str, Any], min_count: int
    ) -> Calibration:
        contexts = context_means(neutral, min_count)
        shifted = counts.join(contexts.select("cell", "mean_key"), on="cell", how="left")
        if shifted["mean_key"].null_count():
            raise ValueError("counts hold a cell the context table lacks")
        calibrated = shifted.select(
            calibrated_keys(pl.col("key"), pl.col("mean_key")).alias("key"), "n"
        )
        scored = counts.group_by("cell").agg(pl.col("n").sum().alias("n_scored"))
        contexts = contexts.join(scored, on="cell", how="left").with_columns(
            pl.col("n_scored").fill_null(0)
        )
        meta = {**meta, "min_count": min_count}
        return cls(RankScale.from_counts(counts), RankScale.from_counts(calibrated), contexts, meta)

    @property
    def decimals(self) -> int:
        return int(self.meta["decimals"])

    def annotate(self, snvs: pl.DataFrame) -> pl.DataFrame:
        """`snvs` (with `cell` and `key` columns) with phred, calibrated and calibrated_phred."""
        means = self.contexts.select("cell", "mean_key")
        frame = snvs.join(means, on="cell", how="left", maintain_order="left")
        frame = frame.with_columns(
            calibrated_keys(pl.col("key"), pl.col("mean_key")).alias("_ckey")
        )
        keys, ckeys = frame["key"].to_numpy(), frame["_ckey"].to_numpy()
        return frame.with_columns(
            pl.Series("phred", self.raw.phred(keys), dtype=pl.Float32),
            key_value(pl.col("_ckey"), self.decimals).cast(pl.Float32).alias("calibrated"),
            pl.Series("calibrated_phred", self.calibrated.phred(ckeys), dtype=pl.Float32),
        ).drop("mean_key", "_ckey")

    def thresholds(self) -> dict[str, dict[str, float | None]]:
        """The score at PHRED 10 / 20 / 30 on each scale."""
        return {
            name: {f"phred_{p}": scale.score_at(p, self.decimals) for p in (10, 20, 30)}
            for name, scale in (("score", self.raw), ("calibrated", self.calibrated))
        }

    # ---- files ----------------------------------------------------------------------------
    def write(self, folder: str | Path) -> None:
        """calibration.json (what it holds for, totals, thresholds), phred.parquet and
        calibrated_phred.parquet (score -> rank -> PHRED), contexts.parquet (the cell means)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tables = {
            "phred.parquet": self.raw.table(self.decimals),
            "calibrated_phred.parquet": self.calibrated.table(self.decimals),
            "contexts.parquet": self.contexts.with_columns(
                key_value(pl.col("mean_key"), self.decimals).alias("mean"),
                key_value(pl.col("mean_key_neutral"), self.decimals).alias("mean_neutral"),
            ),
        }
        for name, table in tables.items():
            with atomic_path(folder / name) as tmp:
                table.write_parquet(tmp)
        summary = {**self.meta, "total": self.raw.total, "thresholds": self.thresholds()}
        with atomic_path(folder / "calibration.json") as tmp:  # last: marks the folder complete
            tmp.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")

    @classmethod
    def read(cls, folder: str | Path) -> Calibration:
        folder = Path(folder)
        path = folder / "calibration.json"
        if not path.is_file():
            raise InputError(folder, "no calibration.json: not a scan's calibration folder")
        meta = json.loads(path.read_text())
        total, decimals = meta.pop("total"), meta["decimals"]
        meta.pop("thresholds", None)
        scales = []
        for name in ("phred.parquet", "calibrated_phred.parquet"):
            table = pl.read_parquet(folder / name).sort("score")
            keys = (table["score"] * 10**decimals).round().cast(pl.Int64).to_numpy()
            below = total - table["rank"].to_numpy()
            scales.append(RankScale(keys, below, total))
        contexts = pl.read_parquet(folder / "contexts.parquet").drop("mean", "mean_neutral")
        return cls(scales[0], scales[1], contexts, meta)

    def check_fingerprint(self, expected: Mapping[str, Any], where: str | Path) -> None:
        """Refuse to apply this calibration to scores made under other settings."""
        differs = {
            k: (self.meta.get(k), expected.get(k))
            for k in FINGERPRINT_KEYS
            if k in expected and self.meta.get(k) != expected.get(k)
        }
        if differs:
            detail = "; ".join(f"{k}: calibrated for {a!r}, scores made with {b!r}"
                               for k, (a, b) in differs.items())  # fmt: skip
            raise InputError(where, f"calibration made for other scores ({detail})")
