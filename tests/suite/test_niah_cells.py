"""Genomic-NIAH without a model: the builder's properties, the cell checks, the metrics."""

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from support.files import random_dna, write_fasta

from carbon_vep.cli import build_parser, main
from carbon_vep.columns import Status
from carbon_vep.config.fields import ConfigError
from carbon_vep.config.niah_grid import niah_config_name as config_name
from carbon_vep.config.stages import EvaluationSettings
from carbon_vep.errors import InputError
from carbon_vep.suite.niah_build import (
    DEPTHS,
    HAYSTACK_MODES,
    MIN_PIECE_BP,
    CellSpec,
    StitchedSampler,
    occurrences,
    write_cell,
)
from carbon_vep.suite.niah_cells import niah_metrics, read_cell


@pytest.fixture
def gappy_genome(tmp_path: Path) -> Path:
    """Two contigs with N runs and soft-masked stretches: haystacks must avoid the Ns."""
    a = random_dna(9000, 11)
    a = a[:3000] + "N" * 50 + a[3000:5000].lower() + a[5000:]
    b = random_dna(8000, 12)
    b = b[:200] + "NNNN" + b[200:]
    return write_fasta(tmp_path / "g.fa", {"chrA": a, "chrB": b})


@pytest.fixture(scope="module")
def fragmented_genome(tmp_path_factory) -> Path:
    """300 contigs of 3-20 kbp, every third with an N run: no stretch near a 32k-token haystack
    (~196 kbp), ~3.4 Mbp of ACGT in all, enough to stitch a 128k-token one (~786 kbp)."""
    rng = np.random.default_rng(17)
    contigs = {}
    for i in range(300):
        seq = "".join(np.array(list("ACGT"))[rng.integers(4, size=int(rng.integers(3000, 20000)))])
        if i % 3 == 0:
            at = int(rng.integers(100, len(seq) - 200))
            seq = seq[:at] + "N" * int(rng.integers(1, 100)) + seq[at:].lower()
        contigs[f"ctg{i}"] = seq
    return write_fasta(tmp_path_factory.mktemp("fragmented") / "frag.fa", contigs)


def _cell(
    tmp_path: Path,
    genome: Path,
    task: str,
    ctx: int = 512,
    rows: int = 12,
    seed: int = 3,
    haystack: str = "auto",
):
    out = tmp_path / f"{task}_{seed}.parquet"
    write_cell(CellSpec(task, ctx, rows, seed, haystack=haystack), genome, out)
    return pl.read_parquet(out)


def _pieces(row: dict) -> list[tuple[str, int, int]]:
    """haystack_pieces parsed: (contig, start, end), 0-based half-open."""
    out = []
    for piece in row["haystack_pieces"].split(","):
        contig, _, span = piece.rpartition(":")
        start, end = span.split("-")
        out.append((contig, int(start), int(end)))
    return out


def _haystack(row: dict) -> str:
    """A niah row's prompt without its one planted pair and its query key."""
    prompt, at = row["prompt"], row["needle_offset_bp"]
    return prompt[:at] + prompt[at + 48 : -len(row["key"])]


def _check_geometry(row: dict, ctx: int) -> None:
    prompt, value, key = row["prompt"], row["value"], row["key"]
    assert set(prompt + value) <= set("ACGT")
    assert row["positive_sequence"] == prompt + value
    assert row["negative_sequence"].startswith(prompt)
    assert len(row["negative_sequence"]) == len(row["positive_sequence"])
    # prefix + prompt + value fill the context exactly, in whole tokens
    assert len(prompt) % 6 == 0 and 1 + (len(prompt) + len(value)) // 6 == ctx
    assert prompt.endswith(key) and occurrences(prompt, key) == 2
    assert prompt.index(key + value) == row["needle_offset_bp"]


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
        assert row["haystack_mode"] == "contiguous"  # 512 tokens: contiguous, as published
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


@pytest.mark.parametrize("haystack", ["contiguous", "stitched"])
def test_haystack_is_real_genome_without_n(tmp_path, gappy_genome, haystack):
    import pysam

    fasta = pysam.FastaFile(str(gappy_genome))
    cell = _cell(tmp_path, gappy_genome, "niah", ctx=400, haystack=haystack)
    for row in cell.iter_rows(named=True):
        pieces = _pieces(row)
        expected = "".join(fasta.fetch(c, s, e) for c, s, e in pieces).upper()
        assert _haystack(row) == expected and "N" not in expected
        assert (row["haystack_chrom"], row["haystack_start"]) == pieces[0][:2]
        assert row["haystack_mode"] == haystack
        assert row["prompt"][row["needle_offset_bp"] :].startswith(row["key"] + row["value"])
        if haystack == "contiguous":
            assert len(pieces) == 1


def test_niah_negative_is_wrong_at_every_base(tmp_path, gappy_genome):
    cell = _cell(tmp_path, gappy_genome, "niah", rows=20)
    for row in cell.iter_rows(named=True):
        negative = row["negative_sequence"][len(row["prompt"]) :]
        assert _hamming(negative, row["value"]) == 24


def test_depth_cycles_through_the_five_published_depths(tmp_path, gappy_genome):
    assert DEPTHS == (0.10, 0.25, 0.50, 0.75, 0.90)
    cell = _cell(tmp_path, gappy_genome, "niah", rows=len(DEPTHS) + 2)
    assert cell["depth"].to_list() == [*DEPTHS, DEPTHS[0], DEPTHS[1]]
    haystack_tokens = CellSpec("niah", 512, 1, 0).haystack_bp // 6
    for row in cell.iter_rows(named=True):
        assert row["needle_offset_bp"] == round(row["depth"] * haystack_tokens) * 6
        assert len(_haystack(row)) == haystack_tokens * 6


def test_haystack_mode_switches_to_stitched_at_32768_tokens():
    assert CellSpec("niah", 16384, 1, 0).haystack_mode == "contiguous"
    assert CellSpec("niah", 32767, 1, 0).haystack_mode == "contiguous"
    assert CellSpec("niah", 32768, 1, 0).haystack_mode == "stitched"
    assert CellSpec("niah", 131072, 1, 0).haystack_mode == "stitched"
    assert CellSpec("niah", 131072, 1, 0, haystack="contiguous").haystack_mode == "contiguous"
    assert CellSpec("niah", 512, 1, 0, haystack="stitched").haystack_mode == "stitched"


def test_fragmented_assembly_holds_a_stitched_32k_cell(tmp_path, fragmented_genome):
    import pysam

    fasta = pysam.FastaFile(str(fragmented_genome))
    cell = _cell(tmp_path, fragmented_genome, "niah", ctx=32768, rows=2)
    assert cell["haystack_mode"].to_list() == ["stitched"] * 2
    for row in cell.iter_rows(named=True):
        _check_geometry(row, 32768)
        pieces = _pieces(row)
        assert len(pieces) > 1 and len({(c, s) for c, s, _ in pieces}) == len(pieces)
        expected = "".join(fasta.fetch(c, s, e) for c, s, e in pieces).upper()
        assert _haystack(row) == expected and set(expected) <= set("ACGT")
    # one base short of the switch the same genome has no stretch for a contiguous haystack
    with pytest.raises(InputError, match="no stretch of .* --haystack stitched"):
        write_cell(CellSpec("niah", 32767, 1, 0), fragmented_genome, tmp_path / "x.parquet")
    with pytest.raises(InputError, match="no stretch of"):
        spec = CellSpec("niah", 32768, 1, 0, haystack="contiguous")
        write_cell(spec, fragmented_genome, tmp_path / "x.parquet")


def test_fragmented_assembly_holds_a_128k_haystack(fragmented_genome):
    length = CellSpec("neardup_d1", 131072, 1, 0).haystack_bp
    sampler = StitchedSampler(fragmented_genome, length)
    try:
        pieces, haystack = sampler.draw(np.random.default_rng(0))
    finally:
        sampler.close()
    assert len(haystack) == length > 780_000 and set(haystack) <= set("ACGT")
    assert sum(p.end - p.start for p in pieces) == length
    assert all(p.end - p.start >= 1 for p in pieces)
    spans = sorted((p.contig, p.start, p.end) for p in pieces)
    # no base twice: pieces of one contig do not overlap
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in zip(spans, spans[1:], strict=False))


def test_stitched_haystack_wraps_around_a_single_run(tmp_path):
    fasta = write_fasta(tmp_path / "one.fa", {"c": random_dna(4000, 5)})
    cell = _cell(tmp_path, fasta, "niah", ctx=600, rows=10, haystack="stitched")
    for row in cell.iter_rows(named=True):
        pieces = _pieces(row)
        assert 1 <= len(pieces) <= 2 and sum(e - s for _, s, e in pieces) == len(_haystack(row))


def test_genome_too_small_for_a_stitched_haystack_is_named(tmp_path):
    short = random_dna(MIN_PIECE_BP - 1, 3)
    fasta = write_fasta(tmp_path / "small.fa", {"a": random_dna(2000, 1), "b": short})
    with pytest.raises(InputError, match=r"small\.fa.*2,000 ACGT bases in runs of at least"):
        write_cell(CellSpec("niah", 512, 2, 0, haystack="stitched"), fasta, tmp_path / "x.pq")
    assert not (tmp_path / "x.pq").exists()


def test_build_niah_command_forces_the_haystack(tmp_path, gappy_genome):
    out = tmp_path / "cell.parquet"
    code = main(
        [
            "build-niah",
            "--reference",
            str(gappy_genome),
            "--task",
            "niah",
            "--ctx",
            "400",
            "--rows",
            "2",
            "--haystack",
            "stitched",
            "--out",
            str(out),
        ]
    )
    assert code in (0, None)
    assert pl.read_parquet(out)["haystack_mode"].to_list() == ["stitched"] * 2
    args = build_parser().parse_args(
        ["build-niah", "--reference", "g", "--task", "niah", "--ctx", "1", "--out", "o"]
    )
    assert args.haystack == "auto" and HAYSTACK_MODES == ("auto", "contiguous", "stitched")


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
        (CellSpec("niah", 512, 2, 0, haystack="glued"), "--haystack 'glued'"),
    ],
)
def test_bad_cell_geometry_is_refused(tmp_path, gappy_genome, spec, message):
    with pytest.raises(ConfigError, match=message):
        write_cell(spec, gappy_genome, tmp_path / "x.parquet")


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--rows", "0"], "--rows must be at least 1"), (["--value-bp", "25"], "--value-bp 25")],
)
def test_build_niah_refuses_a_bad_flag_in_one_line_with_status_2(
    tmp_path, gappy_genome, caplog, flags, message
):
    """An input error like any other: one ERROR line naming the flag, exit 2, nothing written."""
    out = tmp_path / "cell.parquet"
    argv = ["build-niah", "--reference", str(gappy_genome), "--task", "niah", "--ctx", "400"]
    assert main([*argv, *flags, "--out", str(out)]) == 2
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and message in errors[0].getMessage()
    assert not out.exists()


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


def test_a_cell_task_given_against_the_cells_own_column_is_refused(tmp_path, good_cell):
    """--cell-task names the task of a cell without a `task` column; against a cell that has
    one it was ignored without a word: the same task reads, another is refused."""
    path = _write(tmp_path, good_cell)
    assert read_cell(path, task="niah")["task"].unique().to_list() == ["niah"]
    with pytest.raises(InputError, match=r"row 1 .*says 'niah', --cell-task 'neardup_d2'"):
        read_cell(path, task="neardup_d2")


def test_a_soft_masked_prompt_is_upper_cased_and_counted(tmp_path, good_cell, caplog):
    """Lower-case (soft-masked) bases are read as their bases, as recovery and perturbation
    read them, and counted in the log; the cell is not refused for them."""
    soft = good_cell.with_columns(
        pl.when(pl.int_range(pl.len()) == 1)
        .then(pl.col(c).str.slice(0, 30).str.to_lowercase() + pl.col(c).str.slice(30))
        .otherwise(pl.col(c))
        .alias(c)
        for c in ("prompt", "positive_sequence", "negative_sequence")
    )
    assert soft["prompt"][1] != good_cell["prompt"][1]
    with caplog.at_level("INFO", logger="carbon_vep"):
        cell = read_cell(_write(tmp_path, soft))
    assert cell["prompt"].to_list() == good_cell["prompt"].to_list()
    assert any("1 rows hold soft-masked" in r.getMessage() for r in caplog.records)


def test_a_prompt_with_a_real_non_acgt_base_is_still_refused(tmp_path, good_cell):
    bad = _bad(good_cell, "prompt", "acgtnn" + good_cell["prompt"][1][6:])
    with pytest.raises(InputError, match=r"row 2 .* other than A, C, G, T"):
        read_cell(_write(tmp_path, bad))


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
        (
            lambda g: g.with_columns(pl.col("value_len_bp").cast(pl.Utf8)).pipe(
                _bad, "value_len_bp", "24bp"
            ),
            "row 2 .*`value_len_bp` '24bp' is not a whole number",
        ),
        (lambda g: _bad(g, "task", "needle"), "row 2 .*task 'needle' is not a Genomic-NIAH task"),
        (lambda g: _bad(g, "task", None), "row 2 .*empty `task`"),
        (lambda g: g.with_columns(pl.col("prompt").str.split("")), "`prompt` holds List"),
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
        {
            "depth": 0.0,
            "n": 2,
            "gen_exact_match": 0.5,
            "gen_base_accuracy": 0.75,
            "ll_correct": 0.5,
            "ll_margin": 0.0,
        },
        {
            "depth": 0.5,
            "n": 1,
            "gen_exact_match": 1.0,
            "gen_base_accuracy": 1.0,
            "ll_correct": 1.0,
            "ll_margin": 2.0,
        },
    ]
    assert set(result["definitions"]) >= {"gen_exact_match", "gen_base_accuracy", "ll_correct"}
    assert result["warnings"] and np.isfinite(
        result["confidence_intervals"]["gen_exact_match"]["low"]
    )
