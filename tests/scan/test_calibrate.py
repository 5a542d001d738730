"""Calibration of a scan's scores: ranks and PHRED, context cells and means, the fingerprint."""

from __future__ import annotations

import math
import random

import numpy as np
import polars as pl
import pytest

from carbon_vep.errors import InputError
from carbon_vep.scan import calibrate
from carbon_vep.scan import counts as scan_counts
from carbon_vep.scan.calibrate import Calibration, RankScale
from carbon_vep.scan.counts import CalibrationCounts, read_counts
from carbon_vep.scan.snvs import (
    BASES,
    GLOBAL_CELL,
    TRI_OFFSET,
    cell_context,
    context_cells,
    score_key,
)

# what a scan's counts record (counts_meta): the fingerprint, and the neutral set
META = {
    "model": "m",
    "revision": "r1",
    "normalization": "dna_block",
    "tile_bp": 48,
    "min_context": 12,
    "decimals": 2,
    "neutral": "every scanned SNV",
}


def _direct_ranks(keys: np.ndarray) -> dict[int, int]:
    """rank of a key = how many keys are >= it, by brute force."""
    return {int(k): int((keys >= k).sum()) for k in np.unique(keys)}


def test_ranks_and_phred_equal_a_direct_sort():
    rng = np.random.default_rng(0)
    keys = rng.integers(-300, 300, 5000)  # many ties, as at two decimals
    counts = pl.DataFrame({"key": keys, "n": np.ones(len(keys), dtype=np.int64)})
    scale = RankScale.from_counts(counts)
    direct = _direct_ranks(keys)
    looked_up = scale.ranks(np.array(list(direct)))
    assert dict(zip(direct, looked_up.tolist(), strict=True)) == direct
    phred = scale.phred(np.array(list(direct)))
    expected = [-10 * math.log10(r / len(keys)) for r in direct.values()]
    assert np.allclose(phred, expected)
    table = scale.table(2)
    assert table["n"].sum() == len(keys) and table["rank"][0] == (keys == keys.max()).sum()


def test_the_most_damaging_snv_gets_ten_log10_total_and_phred_is_monotone():
    keys = np.array([5, 3, 3, 2, 2, 2, -1, -7, 900])
    scale = RankScale.from_counts(pl.DataFrame({"key": keys, "n": np.ones(9, dtype=np.int64)}))
    assert scale.phred(np.array([900]))[0] == pytest.approx(10 * math.log10(9))
    assert scale.phred(np.array([-7]))[0] == 0.0  # every SNV scores at least this
    grid = np.arange(-10, 1000)
    phred = scale.phred(grid)
    assert np.all(np.diff(phred) >= 0)  # larger score, never a smaller PHRED
    # ties share the rank of the last of them: the three 2s rank 7th (7 SNVs score >= 2)
    assert scale.ranks(np.array([2]))[0] == 7
    assert scale.ranks(np.array([1000]))[0] == 1  # above every counted key: first, not 0


def test_score_keys_are_the_printed_scores():
    scores = pl.Series([0.004, -0.004, 1.005, -2.345, 12.3456], dtype=pl.Float32)
    frame = pl.DataFrame({"s": scores}).select(
        score_key(pl.col("s"), 2).alias("key"), pl.col("s").round(2).alias("printed")
    )
    assert frame["key"].to_list() == [round(v * 100) for v in frame["printed"].to_list()]


def _context_by_hand(seq: str, pos: int, alt: int) -> int:
    """The cell of an SNV by string slicing (1-based pos)."""
    i = pos - 1

    def code(s: str) -> int | None:
        if any(b not in BASES for b in s):
            return None
        value = 0
        for b in s:
            value = value * 4 + BASES.index(b)
        return value

    penta = code(seq[i - 2 : i + 3]) if i >= 2 and i + 3 <= len(seq) else None
    tri = code(seq[i - 1 : i + 2]) if i >= 1 and i + 2 <= len(seq) else None
    if penta is not None:
        return penta * 4 + alt
    if tri is not None:
        return TRI_OFFSET + tri * 4 + alt
    return GLOBAL_CELL


def test_context_cells_at_gaps_and_contig_ends_match_string_slicing():
    rng = random.Random(1)
    seq = "".join(rng.choice("ACGT") for _ in range(60))
    seq = seq[:20] + "NN" + seq[22:40] + "N" + seq[41:]
    positions = [p for p in range(1, len(seq) + 1) if seq[p - 1] in BASES]
    pos = np.array(positions * 3)
    alt = np.array([(BASES.index(seq[p - 1]) + k) % 4 for k in (1, 2, 3) for p in positions])
    cells = context_cells(seq, 0, pos, alt)
    assert cells.tolist() == [_context_by_hand(seq, p, a) for p, a in zip(pos, alt, strict=True)]
    # the same from a slice of the contig (offset): cells depend on the genome, not the slice
    part = context_cells(seq[10:50], 10, pos, alt)
    inside = (pos >= 13) & (pos <= 48)
    assert part[inside].tolist() == cells[inside].tolist()
    levels = {cell_context(int(c))[0] for c in cells}
    assert levels == {"pentanucleotide", "trinucleotide", "global"}  # pos 1, 19, 23 ...
    assert cell_context(int(cells[0]))[0] == "global"  # position 1: no left neighbour
    assert cell_context(int(cells[1]))[0] == "trinucleotide"  # position 2


def test_cell_names_round_trip():
    level, context, alt = cell_context(((0b00_01_10_11_00) * 4) + 3)  # ACGTA > T
    assert (level, context, alt) == ("pentanucleotide", "ACGTA", "T")
    assert cell_context(TRI_OFFSET + 0b01_00_10 * 4 + 0) == ("trinucleotide", "CAG", "A")


def test_an_empty_neutral_set_is_an_error():
    counts = CalibrationCounts()
    counts.add(np.array([5, 6]), np.array([1, 2]), np.array([False, False]))
    with pytest.raises(ValueError, match="neutral set holds no scanned SNV"):
        Calibration.build(counts.counts(), counts.neutral(), META, min_count=1)


def test_a_scan_with_nothing_to_rank_is_refused_with_its_reason(tmp_path):
    """Counts with no SNV on the scales (no base had min_context of left context: a genome of
    contigs all shorter), or none in the neutral set, are refused naming the counts folder and
    the setting to change; no calibration folder is written."""
    from carbon_vep.config.stages import CalibrationSettings
    from carbon_vep.scan.jobs import calibrate as calibrate_job

    folder = tmp_path / "counts"
    folder.mkdir()
    short = CalibrationCounts()
    short.unranked = 600
    short.write(folder / "short.parquet", META)
    out = tmp_path / "calibration"
    with pytest.raises(
        InputError,
        match=r"no SNV to rank: none of the scan's 600 scored SNVs "
        r"had its min_context \(12 bp\).*lower the scan's min_context",
    ) as err:
        calibrate_job([str(folder / "short.parquet")], CalibrationSettings(), str(out))
    assert err.value.path == str(folder) and not out.exists()
    outside = CalibrationCounts()
    outside.add(np.array([5, 6]), np.array([1, 2]), np.array([False, False]))
    outside.write(folder / "outside.parquet", META)
    with pytest.raises(InputError, match="neutral set .* holds none of the scan's SNVs"):
        calibrate_job([str(folder / "outside.parquet")], CalibrationSettings(), str(out))
    assert not out.exists()


def _synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """cells of three CpG-like hot cells and many others, with keys shifted per cell."""
    rng = np.random.default_rng(seed)
    real = [c for c in range(0, TRI_OFFSET) if (c >> 6) & 3 != c & 3]  # alt differs from ref
    cells = rng.choice(real[:400], size=n)
    cells[: n // 10] = TRI_OFFSET + 6 * 4 + 3  # some SNVs next to a gap: ACG > T
    cells[n // 10 : n // 10 + 20] = GLOBAL_CELL
    keys = rng.integers(-50, 50, size=n) + (cells % 97)
    return cells.astype(np.int64), keys.astype(np.int64), rng.random(n) < 0.5


def test_the_summary_lists_the_cells_with_their_own_means_or_says_there_are_none():
    """contexts_markdown: the cells with the highest and lowest own means, from the context
    table, largest first; a scan too small for any cell of its own says so instead."""
    cells, keys, _ = _synthetic(20_000, 2)
    counts = CalibrationCounts()
    counts.add(cells, keys)
    calibration = Calibration.build(counts.counts(), counts.neutral(), META, min_count=30)
    text = calibrate.contexts_markdown(calibration, n=3)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[0] == "| context | change | CpG | neutral SNVs | mean score |"
    own = calibration.contexts.filter(pl.col("fallback") == "pentanucleotide")
    means = sorted(own["mean_key"] / 100, reverse=True)
    shown = [float(r.split("|")[5]) for r in rows[1:]]
    assert len(shown) == 6 and shown == pytest.approx(means[:3] + means[-3:], abs=5e-4)
    thin = Calibration.build(counts.counts(), counts.neutral(), META, min_count=10**6)
    assert calibrate.contexts_markdown(thin) == calibrate.NO_OWN_MEANS + "\n"


def test_cell_means_equal_a_direct_group_by_with_fallbacks():
    cells, keys, _ = _synthetic(20_000, 2)
    counts = CalibrationCounts()
    for lo in range(0, len(cells), 3000):  # batches, as a job adds them
        counts.add(cells[lo : lo + 3000], keys[lo : lo + 3000])
    calibration = Calibration.build(counts.counts(), counts.neutral(), META, min_count=60)
    frame = pl.DataFrame({"cell": cells, "key": keys})
    direct = frame.group_by("cell").agg(pl.col("key").mean().alias("mean"), pl.len().alias("n"))
    table = calibration.contexts.join(direct, on="cell", how="inner")
    own = table.filter(pl.col("fallback") == "pentanucleotide")
    assert own.height > 0 and (own["n"] >= 60).all()
    assert np.allclose(own["mean_key"], own["mean"]) and np.allclose(
        own["mean_key_neutral"], own["mean"]
    )
    thin = table.filter((pl.col("level") == "pentanucleotide") & (pl.col("n") < 60))
    assert thin.height > 0 and (thin["fallback"] != "pentanucleotide").all()
    for row in thin.filter(pl.col("fallback") == "trinucleotide").head(5).iter_rows(named=True):
        tri = (row["cell"] >> 4) & 63
        alt = row["cell"] & 3
        sharing = frame.filter(
            (
                (pl.col("cell") < TRI_OFFSET)
                & ((pl.col("cell") // 16 % 64) == tri)
                & ((pl.col("cell") % 4) == alt)
            )
            | (pl.col("cell") == TRI_OFFSET + tri * 4 + alt)
        )
        assert row["mean_key"] == pytest.approx(sharing["key"].mean())
    global_row = calibration.contexts.filter(pl.col("cell") == GLOBAL_CELL)
    assert global_row["mean_key"][0] == pytest.approx(keys.mean())
    assert calibration.contexts["n_scored"].sum() == len(cells)


def _tri_slot(cell: pl.Expr) -> pl.Expr:
    """The trinucleotide cell a pentanucleotide or trinucleotide cell falls back to."""
    penta = (cell // 16 % 64) * 4 + cell % 4
    return pl.when(cell < TRI_OFFSET).then(penta).otherwise(cell - TRI_OFFSET)


def test_calibrated_scores_and_their_scale_equal_a_direct_computation():
    """Means of a neutral half, with thin cells falling back, by group-bys written out here."""
    cells, keys, neutral = _synthetic(8_000, 3)
    min_count = 12
    counts = CalibrationCounts()
    counts.add(cells, keys, neutral)
    calibration = Calibration.build(counts.counts(), counts.neutral(), META, min_count)
    frame = pl.DataFrame({"cell": cells, "key": keys, "neutral": neutral}).with_columns(
        _tri_slot(pl.col("cell")).alias("tri")
    )
    kept = frame.filter("neutral")
    own = kept.group_by("cell").agg(pl.col("key").mean().alias("own"), pl.len().alias("n_own"))
    tri = (
        kept.filter(pl.col("cell") != GLOBAL_CELL)
        .group_by("tri")
        .agg(pl.col("key").mean().alias("tri_mean"), pl.len().alias("n_tri"))
    )
    direct = (
        frame.join(own, on="cell", how="left", maintain_order="left")
        .join(tri, on="tri", how="left", maintain_order="left")
        .with_columns(pl.col("n_own", "n_tri").fill_null(0))
        .select(
            pl.when((pl.col("cell") < TRI_OFFSET) & (pl.col("n_own") >= min_count))
            .then("own")
            .when((pl.col("cell") != GLOBAL_CELL) & (pl.col("n_tri") >= min_count))
            .then("tri_mean")
            .otherwise(pl.lit(float(keys[neutral].mean())))
        )
        .to_series()
        .to_numpy()
    )
    snvs = calibration.annotate(frame.select("cell", "key", context_bp=META["min_context"]))
    ckeys = np.floor(keys - direct + 0.5).astype(np.int64)
    assert np.array_equal(np.round(snvs["calibrated"].to_numpy() * 100).astype(np.int64), ckeys)
    ranks = _direct_ranks(ckeys)
    expected = [-10 * math.log10(ranks[k] / len(ckeys)) for k in ckeys]
    assert np.allclose(snvs["calibrated_phred"].to_numpy(), expected, atol=0.05 + 1e-6)
    raw = _direct_ranks(keys)
    assert np.allclose(  # one decimal, as every row gives PHRED
        snvs["phred"].to_numpy(),
        [-10 * math.log10(raw[k] / len(keys)) for k in keys],
        atol=0.05 + 1e-6,
    )
    used = calibration.contexts["fallback"].value_counts()
    assert set(used["fallback"]) == {"pentanucleotide", "trinucleotide", "global"}


def test_counts_files_add_up_and_calibration_round_trips(tmp_path):
    cells, keys, _ = _synthetic(6_000, 4)
    paths = []
    for i, lo in enumerate(range(0, 6000, 2000)):
        counts = CalibrationCounts()
        counts.add(cells[lo : lo + 2000], keys[lo : lo + 2000])
        paths.append(tmp_path / f"counts_{i}.parquet")
        counts.write(paths[-1], META)
    summed, neutral, meta = read_counts(paths)
    whole = CalibrationCounts()
    whole.add(cells, keys)
    assert summed.equals(whole.counts()) and neutral.equals(whole.neutral())
    assert meta == {**META, "unranked_snvs": 0}
    calibration = Calibration.build(summed, neutral, meta, min_count=50)
    calibration.write(tmp_path / "calibration")
    back = Calibration.read(tmp_path / "calibration")
    probe = pl.DataFrame({"cell": cells[:500], "key": keys[:500], "context_bp": range(500)})
    assert back.annotate(probe).equals(calibration.annotate(probe))
    assert back.meta == calibration.meta


def test_folding_partial_counts_changes_nothing(monkeypatch):
    """Partial counts are folded together as they grow (bounded memory): the same totals."""
    cells, keys, neutral = _synthetic(5_000, 7)
    whole = CalibrationCounts()
    whole.add(cells, keys, neutral)
    monkeypatch.setattr(scan_counts, "FOLD_ROWS", 50)
    folded = CalibrationCounts()
    for lo in range(0, len(cells), 400):
        folded.add(cells[lo : lo + 400], keys[lo : lo + 400], neutral[lo : lo + 400])
    assert len(folded._counts) < 13  # it did fold
    assert folded.counts().equals(whole.counts()) and folded.neutral().equals(whole.neutral())


def test_counts_of_other_settings_do_not_add_up(tmp_path):
    cells, keys, _ = _synthetic(100, 5)
    for name, meta in (("a", META), ("b", {**META, "model": "other"})):
        counts = CalibrationCounts()
        counts.add(cells, keys)
        counts.write(tmp_path / f"{name}.parquet", meta)
    with pytest.raises(InputError, match="other settings"):
        read_counts([tmp_path / "a.parquet", tmp_path / "b.parquet"])


def test_a_calibration_of_another_model_is_refused(tmp_path):
    cells, keys, _ = _synthetic(1000, 6)
    counts = CalibrationCounts()
    counts.add(cells, keys)
    calibration = Calibration.build(counts.counts(), counts.neutral(), META, min_count=10)
    calibration.check_fingerprint(META, "scan")  # its own scores: fine
    with pytest.raises(InputError, match="model: calibrated for 'm', scores made with 'other'"):
        calibration.check_fingerprint({**META, "model": "other"}, "scan")
    with pytest.raises(InputError, match="tile_bp"):
        calibration.check_fingerprint({**META, "tile_bp": 96}, "scan")


def test_only_bases_with_min_context_are_ranked_but_an_older_calibration_ranks_all():
    """Counts that record their unranked SNVs (this version's) rank the SNVs of bases with at
    least min_context bp of left context and give the others no PHRED; a calibration made
    before (no unranked count: its scales hold every SNV) gives every SNV its PHRED."""
    cells, keys, _ = _synthetic(1_000, 8)
    counts = CalibrationCounts()
    counts.add(cells, keys)
    probe = pl.DataFrame({"cell": cells[:100], "key": keys[:100], "context_bp": range(100)})
    now = Calibration.build(counts.counts(), counts.neutral(), {**META, "unranked_snvs": 0}, 10)
    before = Calibration.build(counts.counts(), counts.neutral(), META, 10)
    short = [c < META["min_context"] for c in range(100)]
    for column in ("phred", "calibrated_phred"):
        assert now.annotate(probe)[column].is_null().to_list() == short
        assert before.annotate(probe)[column].null_count() == 0
    assert now.annotate(probe)["calibrated"].null_count() == 0
    with pytest.raises(ValueError, match="context_bp"):
        now.annotate(probe.drop("context_bp"))


def test_counts_of_two_versions_do_not_add_up(tmp_path):
    """Counts made before unranked SNVs were counted rank every SNV: read alone they make a
    calibration that does so (no unranked count); beside this version's they are refused."""
    import pyarrow.parquet as pq

    cells, keys, _ = _synthetic(100, 9)
    counts = CalibrationCounts()
    counts.add(cells, keys)
    counts.write(tmp_path / "now.parquet", META)
    table = pq.read_table(tmp_path / "now.parquet")
    metadata = {k: v for k, v in table.schema.metadata.items() if b"unranked" not in k}
    pq.write_table(table.replace_schema_metadata(metadata), tmp_path / "before.parquet")
    assert read_counts([tmp_path / "now.parquet"])[2]["unranked_snvs"] == 0
    assert "unranked_snvs" not in read_counts([tmp_path / "before.parquet"])[2]
    with pytest.raises(InputError, match="counts of two versions"):
        read_counts([tmp_path / "now.parquet", tmp_path / "before.parquet"])
