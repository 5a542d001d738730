"""Genomic-NIAH without a model: the builder's properties, the cell checks, the metrics."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.columns import Status
from carbon_vep.config.stages import EvaluationSettings
from carbon_vep.config.stages import niah_config_name as config_name
from carbon_vep.errors import InputError
from carbon_vep.suite.niah_build import DEPTHS, CellSpec, occurrences, write_cell
from carbon_vep.suite.niah_cells import niah_metrics, read_cell


@pytest.fixture
def gappy_genome(tmp_path: Path) -> Path:
    """Two contigs with N runs and soft-masked stretches: haystacks must avoid the Ns."""
    a = random_dna(9000, 11)
    a = a[:3000] + "N" * 50 + a[3000:5000].lower() + a[5000:]
    b = random_dna(8000, 12)
    b = b[:200] + "NNNN" + b[200:]
    return write_fasta(tmp_path / "g.fa", {"chrA": a, "chrB": b})


def _cell(tmp_path: Path, genome: Path, task: str, ctx: int = 512, rows: int = 12, seed: int = 3):
    out = tmp_path / f"{task}_{seed}.parquet"
    write_cell(CellSpec(task, ctx, rows, seed), genome, out)
    return pl.read_parquet(out)


def _hamming(a: str, b: str) -> int:
    return sum(x != y for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("task", ["niah", "neardup_d4", "neardup_d2", "neardup_d1"])
def test_built_cell_has_the_published_schema_and_geometry(tmp_path, gappy_genome, task):
    cell = _cell(tmp_path, gappy_genome, task)
    assert cell.height == 12
    for row in cell.iter_rows(named=True):
        prompt, value, key = row["prompt"], row["value"], row["key"]
        assert set(prompt + value) <= set("ACGT")
        assert row["positive_sequence"] == prompt + value
        assert row["negative_sequence"].startswith(prompt)
        negative = row["negative_sequence"][len(prompt) :]
        assert len(negative) == len(value) == row["value_len_bp"] == 24 and negative != value
        # prefix + prompt + value fill the context exactly, in whole tokens
        assert len(prompt) % 6 == 0 and 1 + (len(prompt) + len(value)) // 6 == 512
        assert prompt.endswith(key)
        assert occurrences(prompt, key) == 2  # planted once + the query
        assert occurrences(prompt, key + value) == 1
        assert row["depth"] in DEPTHS
        assert prompt.index(key + value) % 6 == 0  # at a token boundary
        assert row["haystack_chrom"] in ("chrA", "chrB")
    if task == "niah":
        return
    k = int(task[-1])
    for row in cell.iter_rows(named=True):
        prompt, key, value = row["prompt"], row["key"], row["value"]
        body = prompt[: -len(key)]
        # every planted pair: 24 bp key + 24 bp value at token boundaries
        distractors = [
            body[i : i + 24]
            for i in range(0, len(body) - 47, 6)
            if body[i : i + 24] != key and _hamming(body[i : i + 24], key) == k
        ]
        assert len(set(distractors)) >= 8
        negative = row["negative_sequence"][len(prompt) :]
        # the negative is a distractor's value: it follows one of the distractor keys
        assert any(body[body.index(d) + 24 : body.index(d) + 48] == negative for d in distractors)


def test_builder_is_deterministic_and_seeds_differ(tmp_path, gappy_genome):
    a = _cell(tmp_path / "a", gappy_genome, "neardup_d2", seed=5)
    b = _cell(tmp_path / "b", gappy_genome, "neardup_d2", seed=5)
    c = _cell(tmp_path / "c", gappy_genome, "neardup_d2", seed=6)
    assert a.equals(b)
    assert not a["prompt"].equals(c["prompt"])


def test_haystack_is_real_genome_without_n(tmp_path, gappy_genome):
    import pysam

    fasta = pysam.FastaFile(str(gappy_genome))
    cell = _cell(tmp_path, gappy_genome, "niah", ctx=400)
    for row in cell.iter_rows(named=True):
        prompt, key, value = row["prompt"], row["key"], row["value"]
        at = row["needle_offset_bp"]
        haystack = prompt[:at] + prompt[at + 48 : -len(key)]
        start = row["haystack_start"]
        expected = fasta.fetch(row["haystack_chrom"], start, start + len(haystack)).upper()
        assert haystack == expected and "N" not in expected
        assert prompt[at : at + 48] == key + value


def test_depth_cycles_through_the_grid(tmp_path, gappy_genome):
    cell = _cell(tmp_path, gappy_genome, "niah", rows=len(DEPTHS) + 2)
    assert cell["depth"].to_list() == [*DEPTHS, DEPTHS[0], DEPTHS[1]]
    first, last = cell.row(0, named=True), cell.row(len(DEPTHS) - 1, named=True)
    assert first["needle_offset_bp"] == 0  # depth 0: the pair opens the prompt
    assert first["prompt"].startswith(first["key"] + first["value"])
    # depth 1: the pair closes the haystack, right before the query key
    assert last["prompt"].endswith(last["key"] + last["value"] + last["key"])


def test_genome_too_short_for_the_context_is_named(tmp_path):
    fasta = write_fasta(tmp_path / "small.fa", {"c": random_dna(300, 1) + "N" + random_dna(300, 2)})
    with pytest.raises(InputError, match=r"small\.fa.*no stretch of .* ACGT.*longest is 300"):
        write_cell(CellSpec("niah", 512, 2, 0), fasta, tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (CellSpec("niah", 512, 2, 0, key_bp=25), "--key-bp 25"),
        (CellSpec("niah", 512, 2, 0, value_bp=0), "--value-bp 0"),
        (CellSpec("neardup_d2", 512, 2, 0, distractors=3), "at least 8"),
        (CellSpec("niah", 10, 2, 0), "no haystack"),
        (CellSpec("neardup_d3", 512, 2, 0), "one of niah"),
    ],
)
def test_bad_cell_geometry_is_refused(tmp_path, gappy_genome, spec, message):
    with pytest.raises(ValueError, match=message):
        write_cell(spec, gappy_genome, tmp_path / "x.parquet")


def test_config_names_are_the_hub_names():
    assert config_name("niah", 4096) == "niah_4k"
    assert config_name("neardup_d4", 131072) == "niah_neardup_d4_128k"


# ---- the cell checks ------------------------------------------------------------------------
def _write(tmp_path: Path, frame: pl.DataFrame) -> Path:
    path = tmp_path / "cell.parquet"
    frame.write_parquet(path)
    return path


@pytest.fixture
def good_cell(tmp_path, gappy_genome) -> pl.DataFrame:
    return _cell(tmp_path, gappy_genome, "niah", ctx=300, rows=3)


def test_a_built_cell_reads_back(tmp_path, good_cell):
    cell = read_cell(_write(tmp_path, good_cell))
    assert cell.height == 3
    assert cell["negative_value"].to_list() == [
        s[len(p) :]
        for s, p in zip(good_cell["negative_sequence"], good_cell["prompt"], strict=True)
    ]


def _bad(good: pl.DataFrame, column: str, value) -> pl.DataFrame:
    values = good[column].to_list()
    values[1] = value
    return good.with_columns(pl.Series(column, values, dtype=good[column].dtype))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda g: g.drop("value_len_bp"), r"missing column\(s\) \['value_len_bp'\]"),
        (lambda g: _bad(g, "prompt", "ACGTNN" + g["prompt"][1][6:]), "row 2 .* other than"),
        (lambda g: _bad(g, "value_len_bp", 18), r"do not share one value_len_bp \(\[18, 24\]\)"),
        (lambda g: g.with_columns(pl.lit(25).alias("value_len_bp")), "not a positive multiple"),
        (lambda g: _bad(g, "prompt", g["prompt"][1][1:]), "does not tokenize into whole 6-mers"),
        (lambda g: _bad(g, "uid", g["uid"][0]), "is not unique"),
        (lambda g: _bad(g, "positive_sequence", g["prompt"][1] + "A" * 24), "not prompt \\+ value"),
        (lambda g: _bad(g, "negative_sequence", g["prompt"][1] + "A" * 18), "negative_sequence"),
    ],
)
def test_bad_cells_are_refused_naming_file_and_row(tmp_path, good_cell, mutate, message):
    with pytest.raises(InputError, match=rf"cell\.parquet.*{message}"):
        read_cell(_write(tmp_path, mutate(good_cell)))


# ---- metrics --------------------------------------------------------------------------------
def test_metrics_are_means_with_depth_breakdown_and_failed_rows_counted():
    rows = pl.DataFrame(
        {
            "uid": ["a", "b", "c", "d"],
            "task": ["niah"] * 4,
            "context_length_tokens": [4096] * 4,
            "status": [Status.SCORED.value] * 3 + [Status.FAILED.value],
            "gen_exact_match": [1, 0, 1, None],
            "gen_base_accuracy": [1.0, 0.5, 1.0, None],
            "target_ll": [-1.0, -2.0, -1.0, None],
            "negative_ll": [-2.0, -1.0, -3.0, None],
            "ll_margin": [1.0, -1.0, 2.0, None],
            "ll_correct": [True, False, True, None],
            "depth": [0.0, 0.0, 0.5, 0.5],
        }
    )
    result = niah_metrics(rows, EvaluationSettings(bootstrap=50))
    assert result["metrics"]["gen_exact_match"] == pytest.approx(2 / 3)
    assert result["metrics"]["ll_correct"] == pytest.approx(2 / 3)
    assert result["metrics"]["ll_margin"] == pytest.approx(2 / 3)
    assert result["status_counts"] == {"failed": 1, "scored": 3}
    assert result["by_depth"] == [
        {"depth": 0.0, "n": 2, "gen_exact_match": 0.5, "gen_base_accuracy": 0.75,
         "ll_correct": 0.5, "ll_margin": 0.0},
        {"depth": 0.5, "n": 1, "gen_exact_match": 1.0, "gen_base_accuracy": 1.0,
         "ll_correct": 1.0, "ll_margin": 2.0},
    ]  # fmt: skip
    assert set(result["definitions"]) >= {"gen_exact_match", "gen_base_accuracy", "ll_correct"}
    assert result["warnings"] and np.isfinite(
        result["confidence_intervals"]["gen_exact_match"]["low"]
    )
