"""Scores a user can read: a scan's genome-wide rank scale (PHRED) and context calibration,
built from the scan's summed counts (`scan.counts`: its SNVs per calibration cell and printed
score, and the neutral set's score sums per cell).

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

The scales and means are made of the SNVs a scan scored with its full left context
(`counts.ranked`: at least its `min_context` bp); the SNVs of bases with less, at a contig start
or after an assembly gap, get no PHRED (`Calibration.annotate`), their scores kept.

A calibration is for one model, revision, dtype, output-layer precision, normalisation, tile
geometry, min_context and printed precision (`counts.FINGERPRINT_KEYS`); applying it to scores
made otherwise is an error (`check_fingerprint`). No torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from carbon_vep import markdown
from carbon_vep.atomic import atomic_path
from carbon_vep.errors import InputError
from carbon_vep.scan import CALIBRATED_TABLE, CONTEXTS_TABLE, RAW_TABLE, SUMMARY_FILE
from carbon_vep.scan.counts import FINGERPRINT_KEYS, UNRANKED, min_context_of, ranked
from carbon_vep.scan.snvs import (
    GLOBAL_CELL,
    N_CELLS,
    TRI_OFFSET,
    cell_context,
    key_value,
    score_key,
)

# PHRED is given to one decimal wherever a row carries it (a 0.1 step is a 2.3% change of rank;
# each further decimal costs ~0.2-0.3 bytes an SNV in the TSV on random scores)
PHRED_DECIMALS = 1
PHRED_COLUMNS = ("phred", "calibrated_phred")
LEVELS = ("pentanucleotide", "trinucleotide", "global")


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
        return 10.0 * np.log10(self.total / self.ranks(keys))  # >= 0, never -0.0

    def table(self, decimals: int) -> pl.DataFrame:
        """score -> n, rank, rank fraction, PHRED: the calibration table of this scale."""
        ranks = self.total - self.below
        return pl.DataFrame(
            {
                "score": self.keys / 10**decimals,
                "n": np.diff(np.concatenate([self.below, [self.total]])),
                "rank": ranks,
                "rank_fraction": ranks / self.total,
                "phred": 10.0 * np.log10(self.total / ranks),
            }
        ).sort("score", descending=True)

    def quantile(self, fraction: float, decimals: int) -> float:
        """The score below which `fraction` of the SNVs fall (the lowest key whose cumulative
        count reaches it), at the printed precision."""
        reached = np.searchsorted(np.append(self.below[1:], self.total), fraction * self.total)
        return float(self.keys[min(int(reached), len(self.keys) - 1)] / 10**decimals)

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

    @property
    def min_context(self) -> int:
        """The left context an SNV's base needs to be on these scales (`ranked`); 0 for a
        calibration whose counts record no unranked SNVs (made before any were left off: its
        scales hold every SNV, and so its PHREDs)."""
        return min_context_of(self.meta) if UNRANKED in self.meta else 0

    @property
    def on_scales(self) -> pl.Expr:
        """Per SNV (or base) with its `context_bp`: whether it is on these scales and so has a
        PHRED (`ranked`; every one, and no column read, for a calibration that ranks all)."""
        return ranked(self.min_context) if self.min_context else pl.lit(True)

    @property
    def unranked(self) -> int:
        """The scan's SNVs left off the scales (their bases had less than min_context)."""
        return int(self.meta.get(UNRANKED, 0))

    def phred(self, keys: np.ndarray) -> np.ndarray:
        """The PHRED of scores given as keys (snvs.score_key), as the TSV prints it."""
        return np.round(self.raw.phred(keys), PHRED_DECIMALS)

    def annotate(self, snvs: pl.DataFrame) -> pl.DataFrame:
        """`snvs` (with `cell`, `key` and, where the scales leave SNVs off, `context_bp`
        columns) with calibrated (at the printed precision), and phred and calibrated_phred (to
        PHRED_DECIMALS) for the SNVs on the scales (`ranked`), null for the others."""
        if self.min_context and "context_bp" not in snvs.columns:
            raise ValueError("Calibration.annotate: the SNVs' context_bp says which are ranked")
        means = self.contexts.select("cell", "mean_key")
        frame = snvs.join(means, on="cell", how="left", maintain_order="left")
        frame = frame.with_columns(
            calibrated_keys(pl.col("key"), pl.col("mean_key")).alias("_ckey")
        )
        keys, ckeys = frame["key"].to_numpy(), frame["_ckey"].to_numpy()
        phred = self.phred(keys)
        calibrated_phred = np.round(self.calibrated.phred(ckeys), PHRED_DECIMALS)
        return (
            frame.with_columns(
                pl.Series("phred", phred, dtype=pl.Float32),
                key_value(pl.col("_ckey"), self.decimals).cast(pl.Float32).alias("calibrated"),
                pl.Series("calibrated_phred", calibrated_phred, dtype=pl.Float32),
            )
            .with_columns(pl.when(self.on_scales).then(pl.col(c)).alias(c) for c in PHRED_COLUMNS)
            .drop("mean_key", "_ckey")
        )

    def header_lines(self, with_calibrated: bool = True) -> list[str]:
        """`##` lines for a file whose rows carry these scales: what PHRED and calibrated mean."""
        phred = (
            f"##phred=-10 log10(rank / total) of the score among the {self.raw.total:,} SNVs of "
            "this scan (rank 1 = the highest score; tied scores share the rank of the last of "
            "them): 10 = top 10%, 20 = top 1%, 30 = top 0.1%"
        )
        if self.min_context:
            phred += (
                f"; the SNVs scored with at least {self.min_context:,} bp of left context (its "
                f"min_context): the {self.unranked:,} with less (a contig start, after a gap) "
                "have . (no PHRED)"
            )
        if not with_calibrated:
            return [phred]
        return [
            phred,
            "##calibrated=score minus the mean score of the neutral SNVs "
            f"({self.meta.get('neutral')}) of its pentanucleotide context and alternate base "
            f"(cells under {self.meta.get('min_count')} neutral SNVs: the trinucleotide's, then "
            "the global mean); calibrated_phred = its PHRED among every SNV",
        ]

    def summary(self) -> dict[str, Any]:
        """Totals, thresholds, and how many cells used their own mean or a fallback."""
        cells = self.contexts.filter(pl.col("level") == "pentanucleotide")
        return {
            "snvs": self.raw.total,
            "unranked_snvs": self.unranked,
            "min_context": self.min_context,
            "neutral": self.meta.get("neutral"),
            "context_min_count": self.meta.get("min_count"),
            "thresholds": self.thresholds(),
            "pentanucleotide_cells_by_mean_used": dict(
                cells.group_by("fallback").len().sort("fallback").iter_rows()
            ),
            "snvs_by_context_level": dict(
                self.contexts.group_by("level")
                .agg(pl.col("n_scored").sum())
                .sort("level")
                .iter_rows()
            ),
        }

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
            RAW_TABLE: self.raw.table(self.decimals),
            CALIBRATED_TABLE: self.calibrated.table(self.decimals),
            CONTEXTS_TABLE: self.contexts.with_columns(
                key_value(pl.col("mean_key"), self.decimals).alias("mean"),
                key_value(pl.col("mean_key_neutral"), self.decimals).alias("mean_neutral"),
            ),
        }
        for name, table in tables.items():
            with atomic_path(folder / name) as tmp:
                table.write_parquet(tmp)
        summary = {**self.meta, "total": self.raw.total, "thresholds": self.thresholds()}
        with atomic_path(folder / SUMMARY_FILE) as tmp:  # last: marks the folder complete
            tmp.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")

    @classmethod
    def read(cls, folder: str | Path) -> Calibration:
        folder = Path(folder)
        path = folder / SUMMARY_FILE
        if not path.is_file():
            raise InputError(folder, f"no {SUMMARY_FILE}: not a scan's calibration folder")
        meta = json.loads(path.read_text())
        total, decimals = meta.pop("total"), meta["decimals"]
        meta.pop("thresholds", None)
        scales = []
        for name in (RAW_TABLE, CALIBRATED_TABLE):
            table = pl.read_parquet(folder / name).sort("score")
            keys = table.select(score_key(pl.col("score"), decimals)).to_series().to_numpy()
            below = total - table["rank"].to_numpy()
            scales.append(RankScale(keys, below, total))
        contexts = pl.read_parquet(folder / CONTEXTS_TABLE).drop("mean", "mean_neutral")
        return cls(scales[0], scales[1], contexts, meta)

    def check_fingerprint(self, expected: Mapping[str, Any], where: str | Path) -> None:
        """Refuse to apply this calibration to scores made under other settings."""
        differs = {
            k: (self.meta.get(k), expected.get(k))
            for k in FINGERPRINT_KEYS
            if k in expected and self.meta.get(k) != expected.get(k)
        }
        if differs:
            detail = "; ".join(
                f"{k}: calibrated for {a!r}, scores made with {b!r}"
                for k, (a, b) in differs.items()
            )
            raise InputError(where, f"calibration made for other scores ({detail})")


def cpg_site(context: str) -> bool:
    """The middle base of a context is the C or the G of a CpG (on either strand)."""
    middle = len(context) // 2
    return context[middle : middle + 2] == "CG" or context[middle - 1 : middle + 1] == "CG"


def extreme_contexts(calibration: Calibration, n: int = 8) -> pl.DataFrame:
    """The pentanucleotide cells with their own mean, highest and lowest first (the rows a
    reader checks: CpG transitions, the commonest mutations, usually score low)."""
    own = calibration.contexts.filter(
        (pl.col("level") == "pentanucleotide") & (pl.col("fallback") == "pentanucleotide")
    ).with_columns(
        key_value(pl.col("mean_key"), calibration.decimals).alias("mean"),
        pl.col("context").map_elements(cpg_site, return_dtype=pl.Boolean).alias("cpg"),
    )
    by_mean = own.sort("mean", descending=True)
    picked = pl.concat([by_mean.head(n), by_mean.tail(n)]).unique("cell", maintain_order=True)
    return picked.select("context", "ref", "alt", "cpg", "n_neutral", "mean")


NO_OWN_MEANS = (
    "No pentanucleotide cell has its own mean: too few neutral SNVs a cell (each falls back to "
    "a coarser context), as in a small scan."
)


def contexts_markdown(calibration: Calibration, n: int = 8) -> str:
    table = extreme_contexts(calibration, n)
    if table.is_empty():
        return NO_OWN_MEANS + "\n"
    lines = [
        f"Context cells with the highest and lowest mean score ({n} each; CpG: the variant's "
        "base is the C or the G of a CpG):",
        "",
    ]
    rows = [
        [
            r["context"],
            f"{r['ref']}>{r['alt']}",
            "yes" if r["cpg"] else "",
            f"{r['n_neutral']:,}",
            f"{r['mean']:.3f}",
        ]
        for r in table.iter_rows(named=True)
    ]
    header = ["context", "change", "CpG", "neutral SNVs", "mean score"]
    return "\n".join([*lines, markdown.table(header, rows)]) + "\n"
