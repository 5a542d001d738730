"""Per-SNV values of a scan, from its per-base rows: the score, the score's key at the printed
precision, the calibration cell (pentanucleotide context and alternate base) and whether the SNV
is in the neutral set. No torch.

Cells: an SNV whose pentanucleotide (its base in the middle) is all ACGT on the reference is in
cell `penta * 4 + alt` (1,024 × 4 slots, 3,072 of them real: alt differs from the middle base);
one within 2 bp of an N or a contig end is in its trinucleotide cell (`TRI_OFFSET + tri * 4 +
alt`), or, next to one, in `GLOBAL_CELL`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from carbon_vep.columns import SCAN_BASES
from carbon_vep.errors import InputError

BASES = "ACGT"
_CODE = np.full(256, -1, dtype=np.int64)  # byte -> 0..3 for ACGT, -1 for anything else
for _i, _b in enumerate(BASES):
    _CODE[ord(_b)] = _i
PENTA_CELLS = 4**5 * 4  # (pentanucleotide, alt) slots; the 1,024 with alt == ref stay empty
TRI_OFFSET = PENTA_CELLS  # trinucleotide cells of SNVs whose pentanucleotide is incomplete
GLOBAL_CELL = TRI_OFFSET + 4**3 * 4  # SNVs whose trinucleotide is incomplete
N_CELLS = GLOBAL_CELL + 1
SNV_BATCH_BASES = 1 << 18  # bases whose SNVs are counted or written at a time (memory per job)


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


def at_base(base: pl.Expr, column: str) -> pl.Expr:
    """Each row's value of a per-base column for the base in `base`: `column` is a template
    (`log_fns_{}`) of the four columns of one quantity, one per base."""
    return pl.coalesce([pl.when(base == b).then(pl.col(column.format(b))) for b in SCAN_BASES])


def snv_rows(bases: pl.DataFrame) -> pl.DataFrame:
    """Three SNVs per base: chrom, pos, ref, alt, score (float32) from the log-marginals (and
    the base's context_bp, where the bases have it), in the bases' order (contig by contig in a
    shared file), then by alt."""
    lp = {b: pl.col(f"log_fns_{b}").cast(pl.Float32) for b in SCAN_BASES}
    lp_ref = at_base(pl.col("ref"), "log_fns_{}").cast(pl.Float32)
    numbered = bases.with_row_index("base_index")
    parts = [
        numbered.filter(pl.col("ref") != alt).select(
            "base_index",
            "chrom",
            "pos",
            "ref",
            pl.lit(alt).alias("alt"),
            (lp_ref - lp[alt]).alias("score"),
            *(["context_bp"] if "context_bp" in bases.columns else []),
        )
        for alt in SCAN_BASES
    ]
    return pl.concat(parts).sort("base_index", "alt").drop("base_index")


class NeutralRegions:
    """0-based half-open intervals per reference contig (merged): which SNVs are neutral."""

    def __init__(self, intervals: Mapping[str, Sequence[tuple[int, int]]]) -> None:
        self.spans = {
            contig: (np.array([s for s, _ in v], dtype=np.int64), np.array([e for _, e in v]))
            for contig, v in intervals.items()
        }

    def contains(self, contig: str, pos: np.ndarray) -> np.ndarray:
        """For 1-based positions: inside an interval of `contig`."""
        if contig not in self.spans:
            return np.zeros(len(pos), dtype=bool)
        starts, ends = self.spans[contig]
        i = np.searchsorted(starts, pos - 1, side="right") - 1
        return (i >= 0) & (pos - 1 < ends[np.maximum(i, 0)])


def _check_bases(sequence: str, offset: int, part: pl.DataFrame, reference) -> None:
    """The scan's bases are the reference's: contexts read from another genome would be wrong."""
    genome = np.frombuffer(sequence.encode(), dtype=np.uint8)[part["pos"].to_numpy() - 1 - offset]
    scanned = np.frombuffer("".join(part["ref"].to_list()).encode(), dtype=np.uint8)
    differs = np.flatnonzero(genome != scanned)
    if len(differs):
        i = int(differs[0])
        raise InputError(
            reference.path,
            f"{part['chrom'][i]}:{part['pos'][i]} is {chr(genome[i])} in this reference but "
            f"{part['ref'][i]} in the scan: not the genome the scan read",
        )


def with_cells(snvs: pl.DataFrame, reference, decimals: int, neutral: NeutralRegions | None):
    """`snvs` (chrom, pos, ref, alt, score) with `key` (the printed score's key), `cell` and
    `neutral` (every SNV when `neutral` is None), the contexts read from `reference`."""
    keyed = snvs.with_columns(score_key(pl.col("score"), decimals).alias("key"))
    parts = []
    for (contig,), part in keyed.partition_by("chrom", as_dict=True, maintain_order=True).items():
        pos = part["pos"].to_numpy()
        lo, hi = max(int(pos.min()) - 3, 0), int(pos.max()) + 2
        sequence = reference.fetch(contig, lo, hi)
        _check_bases(sequence, lo, part, reference)
        alt = part["alt"].replace_strict({b: i for i, b in enumerate(BASES)}, return_dtype=pl.Int64)
        cells = context_cells(sequence, lo, pos, alt.to_numpy())
        flags = np.ones(len(pos), dtype=bool) if neutral is None else neutral.contains(contig, pos)
        parts.append(part.with_columns(pl.Series("cell", cells), pl.Series("neutral", flags)))
    if not parts:
        return keyed.with_columns(cell=pl.lit(None, pl.Int64), neutral=pl.lit(None, pl.Boolean))
    return pl.concat(parts)
