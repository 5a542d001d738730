"""The suite: task files, the results table, Hub fetches (offline) and the workflow's rules."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from carbon_vep.cli import main
from carbon_vep.errors import InputError
from carbon_vep.report.results_table import load_results, results_markdown, results_table
from carbon_vep.suite.tasks import count_task_rows, read_task_table

ROOT = Path(__file__).resolve().parents[2]


def test_read_task_table_tsv_and_parquet(tmp_path):
    tsv = tmp_path / "rec.tsv"
    tsv.write_text("sequence\tlabel\ttype\nACGT\tAC\tx\nGGCC\tTT\ty\n")
    table = read_task_table(tsv, ["sequence", "label"])
    assert table["row_id"].to_list() == [0, 1]
    assert table["source"].to_list() == [f"{tsv}:line 2", f"{tsv}:line 3"]
    table.drop("row_id", "source").write_parquet(tmp_path / "rec.parquet")
    assert read_task_table(tmp_path / "rec.parquet", ["type"])["source"][1].endswith("row 2")


def test_task_files_take_the_panel_readers_names_gzip_included(tmp_path):
    """Task files are read by the panel reader's table code: a gzipped TSV or CSV works (it
    used to be refused as an unknown type), every column stays text (leading zeros kept)."""
    rows = "sequence\tlabel\ttype\nACGT\t007\tx\nGGCC\tTT\ty\n"
    with gzip.open(tmp_path / "rec.tsv.gz", "wt") as handle:
        handle.write(rows)
    with gzip.open(tmp_path / "rec.csv.gz", "wt") as handle:
        handle.write(rows.replace("\t", ","))
    for name in ("rec.tsv.gz", "rec.csv.gz"):
        table = read_task_table(tmp_path / name, ["sequence", "label"])
        assert table["label"].to_list() == ["007", "TT"]
        assert table["source"][1] == f"{tmp_path / name}:line 3"


def test_read_task_table_errors_name_the_file_and_problem(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("original\tsequence\nACGT\tACGA\n")
    with pytest.raises(
        InputError, match=r"pairs\.tsv: missing column\(s\) \['original_sequence'\]"
    ):
        read_task_table(tsv, ["original_sequence", "sequence"])
    empty = tmp_path / "empty.csv"
    empty.write_text("sequence,label\n")
    with pytest.raises(InputError, match="no rows"):
        read_task_table(empty, ["sequence"])
    with pytest.raises(InputError, match="not found"):
        read_task_table(tmp_path / "nope.tsv", ["sequence"])
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InputError, match="unknown task file type"):
        read_task_table(tmp_path / "x.json", ["sequence"])
    for path, required in (
        (tsv, ["original_sequence", "sequence"]),
        (empty, ["sequence"]),
        (tmp_path / "nope.tsv", ["sequence"]),
        (tmp_path / "x.json", ["sequence"]),
    ):  # the count merge-recovery takes refuses each file as the reader does
        with pytest.raises(InputError) as read:
            read_task_table(path, required)
        with pytest.raises(InputError) as counted:
            count_task_rows(path, required)
        assert str(counted.value) == str(read.value)


@pytest.mark.parametrize(
    ("column", "values", "dtype"),
    [("sequence", [["A", "C"], ["G"]], "List"), ("label", [12345, 678], "Int64")],
)
def test_a_parquet_sequence_column_of_another_type_is_refused_naming_it(
    tmp_path, column, values, dtype
):
    """A sequence column stored as a list or as numbers is refused naming the column and its
    type (it was a polars traceback, or numbers read as a label of digits)."""
    table = {"sequence": ["ACGTAC", "GGCCAA"], "label": ["AC", "TT"], column: values}
    path = tmp_path / "rec.parquet"
    pl.DataFrame(table).write_parquet(path)
    refused = rf"rec\.parquet: column `{column}` holds {dtype}.*not text"
    with pytest.raises(InputError, match=refused):
        read_task_table(path, ["sequence", "label"])
    pl.DataFrame(table).with_columns(pl.lit(None).alias(column)).write_parquet(path)
    assert read_task_table(path, ["sequence", "label"]).height == 2  # all null: no value, read


# Text tables polars reads with more or fewer rows than lines: blank lines (after the header a
# row of nulls, even at the end; before it skipped), `##` comments, CRLF, a missing last line
# end, quoted fields spanning lines (CSV, and a TSV whose header is quoted: in another TSV a
# quote is a character), a `##` inside
# a quoted field (text, not a comment), a header that is not on line 1
TEXT_TABLES = {  # name: (text, rows as polars reads them)
    "plain.tsv": ("sequence\tlabel\nACGT\tAC\nGGCC\tTT\n", 2),
    "unended.tsv": ("sequence\tlabel\nACGT\tAC\nGGCC\tTT", 2),
    "blank_lines.tsv": ("\n\r\nsequence\tlabel\nACGT\tAC\n\nGGCC\tTT\n\n\n", 5),
    "comments.tsv": ("##meta\nsequence\tlabel\n##x\nACGT\tAC\r\n\r\nGGCC\tTT\r\n", 3),
    "quotes.tsv": ('sequence\tlabel\n"ACGT\tAC\nGGCC\tTT"\n', 2),
    # every header name quoted (R's write.table): quotes enclose fields, as a CSV's do
    "r_quoted.tsv": ('"sequence"\t"label"\n"AC\nGT"\t"AC"\n"GG""CC"\t"T\tT"\n', 2),
    "quotes.csv": ('sequence,label\n"AC\nGT",AC\n"GG""\n##CC",TT\nAAAA,"T\n\nT"\n\n', 4),
}


@pytest.mark.parametrize("name", sorted(TEXT_TABLES))
@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_the_row_count_is_the_readers(tmp_path, name, gzipped):
    """count_task_rows (merge-recovery's, which reads no row's values) counts the rows
    read_task_table reads, on every text table above, gzipped too, and from a Parquet file's
    footer."""
    text, expected = TEXT_TABLES[name]
    path = tmp_path / (name + (".gz" if gzipped else ""))
    with gzip.open(path, "wt", newline="") if gzipped else open(path, "w", newline="") as out:
        out.write(text)
    rows = read_task_table(path, ["sequence", "label"]).height
    assert count_task_rows(path, ["sequence", "label"]) == rows == expected
    parquet = tmp_path / "t.parquet"
    read_task_table(path, ["sequence"]).drop("row_id", "source").write_parquet(parquet)
    assert count_task_rows(parquet, ["sequence", "label"]) == rows


def _result(task, model, metric, value, ci=None, kind="vep"):
    return {
        "kind": kind,
        "task": task,
        "model_key": model,
        "headline_metrics": [metric],
        "metrics": {metric: value},
        "definitions": {metric: f"the {metric}"},
        "confidence_intervals": {metric: {"low": ci[0], "high": ci[1]}} if ci else {},
        "n_labelled": 10,
    }


RESULTS = [
    _result("brca2", "carbon3b", "auroc", 0.8463, (0.82, 0.87)),
    _result("brca2", "generator", "auroc", 0.8193),
    _result("cag", "carbon3b", "accuracy", 0.852, kind="perturbation"),
]


def test_results_table_rows_are_tasks_and_metrics_columns_are_models():
    table = results_table(RESULTS)
    assert table.columns == ["task", "metric", "carbon3b", "generator"]
    assert table.rows() == [("brca2", "auroc", 0.8463, 0.8193), ("cag", "accuracy", 0.852, None)]


def test_results_markdown_is_x100_with_intervals_and_definitions():
    text = results_markdown(RESULTS)
    assert "| brca2 | auroc | 84.63 [82.0, 87.0] | 81.93 |" in text
    assert "| cag | accuracy | 85.20 | — |" in text
    assert "- `auroc` (vep): the auroc" in text and "- `accuracy` (perturbation)" in text


def test_load_results_refuses_json_without_names(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"metrics": {}}))
    with pytest.raises(InputError, match="lacks"):
        load_results([path])


# ---- the workflow ------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def _snakemake(workdir: Path, config: dict, *extra: str) -> subprocess.CompletedProcess:
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(path),
        "--cores",
        "2",
        *extra,
    ]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)


@pytest.mark.workflow
def test_published_suite_config_plans_hub_fetches_and_every_suite_rule(tmp_path):
    """`config/suite.yaml` dry-run: head-node fetch rules feed the datasets and tasks."""
    config = yaml.safe_load((ROOT / "config/suite.yaml").read_text())
    hg19 = tmp_path / config["datasets"]["brca2"]["reference"]
    hg19.parent.mkdir(parents=True)
    hg19.write_text(">chr13\nACGT\n")  # the one file users bring themselves
    result = _snakemake(tmp_path, config, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    for name in config["hub_files"]:
        assert f"rule fetch_hub_{name}:" in result.stdout
    for rule in (
        "score_recovery",
        "merge_recovery",
        "score_perturbation",
        "merge_perturbation",
        "make_results_table",
        "write_run_report",
        "check_panel",
    ):
        assert f"rule {rule}:" in result.stdout
    assert "checkpoint export_vcf:" in result.stdout  # its index asked for once it has run


def test_task_commands_name_their_results(tmp_path, demo_model_dir):
    """What the suite rules run: per-row predictions plus a named, defined metrics JSON."""
    (tmp_path / "rec.tsv").write_text("sequence\tlabel\ttype\n" + "ACGTTG" * 8 + "\tACGTTGA\tx\n")
    pair = "ACGTTGCAT" * 6
    (tmp_path / "pairs.tsv").write_text(f"original_sequence\tsequence\n{pair}\t{pair[::-1]}\n")
    common = [
        "--model",
        str(demo_model_dir),
        "--trust-remote-code",
        "--model-key",
        "demo",
        "--bootstrap",
        "20",
        "--provenance",
        "model=org/demo",
        "--provenance",
        "revision=abc",
    ]
    assert (
        main(
            [
                "score-recovery",
                "--tasks-file",
                str(tmp_path / "rec.tsv"),
                "--task",
                "rec",
                "--decoder",
                "fns_conditional",
                "--label-source",  # auto would take the sequence's tail: the label is 7 bp
                "dataset",
                "--out",
                str(tmp_path / "rec.parquet"),
                "--metrics",
                str(tmp_path / "rec.json"),
                *common,
            ]
        )
        == 0
    )
    recovery = json.loads((tmp_path / "rec.json").read_text())
    assert recovery["kind"] == "sequence_recovery" and recovery["task"] == "rec"
    assert recovery["model_key"] == "demo" and recovery["headline_metrics"] == ["accuracy"]
    assert recovery["parameters"]["decoder"] == "fns_conditional"
    assert recovery["provenance"] == {"model": "org/demo", "revision": "abc"}
    assert pl.read_parquet(tmp_path / "rec.parquet")["label"].to_list() == ["ACGTTGA"]
    assert (
        main(
            [
                "score-perturbation",
                "--tasks-file",
                str(tmp_path / "pairs.tsv"),
                "--task",
                "pairs",
                "--scoring",
                "bp",
                "--out",
                str(tmp_path / "pairs.parquet"),
                "--metrics",
                str(tmp_path / "pairs.json"),
                *common,
            ]
        )
        == 0
    )
    pairs = json.loads((tmp_path / "pairs.json").read_text())
    assert pairs["parameters"] == {"scoring": "bp", "normalization": "dna_block"}
    assert pairs["n_scored"] == 1 and pairs["task"] == "pairs"
    # by hand, without --task / --model-key: the tasks file's and the model directory's names
    unnamed = ["score-perturbation", "--tasks-file", str(tmp_path / "pairs.tsv")]
    unnamed += ["--model", str(demo_model_dir), "--trust-remote-code", "--scoring", "bp"]
    unnamed += ["--out", str(tmp_path / "u.parquet"), "--metrics", str(tmp_path / "u.json")]
    assert main(unnamed) == 0
    named = json.loads((tmp_path / "u.json").read_text())
    assert (named["task"], named["model_key"]) == ("pairs", demo_model_dir.name)
    assert (
        main(
            [
                "results-table",
                "--metrics",
                str(tmp_path / "rec.json"),
                str(tmp_path / "pairs.json"),
                "--out-parquet",
                str(tmp_path / "t.parquet"),
                "--out-tsv",
                str(tmp_path / "t.tsv"),
                "--out-md",
                str(tmp_path / "t.md"),
            ]
        )
        == 0
    )
    assert pl.read_csv(tmp_path / "t.tsv", separator="\t")["task"].to_list() == ["rec", "pairs"]
    missing = [
        "score-recovery",
        "--tasks-file",
        str(tmp_path / "pairs.tsv"),
        "--task",
        "x",
        "--out",
        str(tmp_path / "x.parquet"),
        "--metrics",
        str(tmp_path / "x.json"),
        *common,
    ]
    assert main(missing) == 2  # a task file without its columns: a named error, exit 2
    assert not (tmp_path / "x.json").exists()
