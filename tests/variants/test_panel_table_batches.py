"""A table panel is read a batch of rows at a time (`panel_table.table_batches`): the rows, their
citations, dtypes and notes equal the table read in one batch, whatever the batch size and
wherever the rows that decide a column (an ALT list, a `qual` with text) fall; errors in a late
batch name their own line; and no more than a batch (plus the rows dtypes are inferred from) is
read ahead of the rows handed out."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest

from carbon_vep.errors import InputError
from carbon_vep.variants import panel as panel_module
from carbon_vep.variants import panel_table
from carbon_vep.variants.panel import PanelReader, load_panel

N_ROWS = 40


def _table_lines(sep: str) -> tuple[list[str], dict[int, int]]:
    """The lines of a table of N_ROWS variants (without line ends), and the line each row of
    the panel is read from (row number from 1 -> line number from 1). Comments and blank
    lines fall between the rows; row 31 holds an ALT list (three rows), row 23 a `qual` that
    is text, row 12 a note with a quoted line end (CSV only)."""
    lines = ["##made for a test", sep.join(["chrom", "pos", "id", "ref", "alt", "qual", "note"])]
    cited: dict[int, int] = {}
    row = 0
    for i in range(1, N_ROWS + 1):
        if i % 9 == 0:
            lines.append("")
        if i % 13 == 0:
            lines.append("## a comment between the rows")
        alt = '"T,G,C"' if sep == "," and i == 31 else "T,G,C" if i == 31 else "T"
        qual = "low" if i == 23 else "." if i % 5 == 0 else f"{i}.5"
        note = '"two\nlines"' if sep == "," and i == 12 else f"n{i}"
        lines.append(sep.join(["chr1", str(100 + i), str(7000 + i), "A", alt, qual, note]))
        first = len(lines)  # the line the record starts on
        for _ in range(3 if i == 31 else 1):
            row += 1
            cited[row] = first
        lines[-1:] = lines[-1].split("\n")
    lines += ["", ""]
    return lines, cited


def _write(tmp_path: Path, fmt: str) -> tuple[Path, dict[int, int]]:
    sep = "," if fmt.startswith("csv") else "\t"
    lines, cited = _table_lines(sep)
    text = "\n".join(lines) + "\n"
    path = tmp_path / f"panel.{fmt}"
    if fmt.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path, cited


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int):
    monkeypatch.setattr(panel_module, "_BATCH_ROWS", batch_rows)
    return load_panel(path)


@pytest.mark.parametrize("fmt", ["tsv", "csv", "csv.gz"])
def test_a_text_table_in_batches_reads_as_in_one(tmp_path, monkeypatch, fmt):
    path, cited = _write(tmp_path, fmt)
    whole = _read(path, monkeypatch, 10_000)
    assert whole.frame["source"].to_list() == [f"{path}:line {cited[r]}" for r in range(1, 43)]
    assert whole.frame["row_id"].to_list() == list(range(N_ROWS + 2))
    assert whole.frame.schema["qual"] == pl.Utf8  # row 23's text keeps it as read
    assert whole.frame.schema["id"] == pl.Utf8
    assert whole.frame["alt_index"].to_list()[30:33] == [1, 2, 3]
    assert "6 blank line(s) ignored" in whole.notes
    for batch_rows in (1, 3, 7, 22, 30):
        batched = _read(path, monkeypatch, batch_rows)
        assert batched.frame.equals(whole.frame), batch_rows
        assert batched.frame.schema == whole.frame.schema
        assert batched.notes == whole.notes


def test_a_parquet_table_in_batches_reads_as_in_one(tmp_path, monkeypatch):
    rows = [(f"chr{1 + i % 2}", 100 + i, "A", "T,G" if i == 17 else "C") for i in range(25)]
    path = tmp_path / "p.parquet"
    pl.DataFrame(rows, schema=["chrom", "pos", "ref", "alt"], orient="row").with_columns(
        pl.Series("qual", ["9"] * 20 + ["high"] + ["."] * 4)
    ).write_parquet(path, row_group_size=6)
    whole = _read(path, monkeypatch, 10_000)
    expected_rows = [*range(1, 19), 18, *range(19, 26)]  # row 18 split into two ALTs
    assert whole.frame["source"].to_list() == [f"{path}:row {n}" for n in expected_rows]
    assert whole.frame["qual"][0] == "9"  # row 21's "high" keeps the column as read
    for batch_rows in (1, 4, 6, 13):
        batched = _read(path, monkeypatch, batch_rows)
        assert batched.frame.equals(whole.frame), batch_rows
        assert batched.notes == whole.notes


def test_a_choice_learned_late_starts_over_once(tmp_path, monkeypatch):
    """Row 23's qual and row 31's ALT list are learned in later batches: each makes the read
    start over once (the reader keeps what it learned), then it runs through."""
    path, _ = _write(tmp_path, "tsv")
    monkeypatch.setattr(panel_module, "_BATCH_ROWS", 5)
    starts = []
    reader = PanelReader(path)
    while True:
        starts.append(reader.table_choices.alt_lists + 2 * reader.table_choices.qual_text)
        try:
            n_rows = sum(batch.height for batch in reader.batches())
            break
        except panel_module.ReadAgain:
            continue
    assert starts == [0, 2, 3] and n_rows == N_ROWS + 2


def test_errors_in_a_late_batch_name_their_line(tmp_path, monkeypatch):
    monkeypatch.setattr(panel_module, "_BATCH_ROWS", 4)
    lines, _ = _table_lines("\t")
    for line, broken, expected in [
        (30, "chr1\t130\t7030\tA\tT", r"panel\.tsv:30: 5 fields where the header has 7$"),
        (33, None, r"panel\.tsv:33: not UTF-8 text \(byte 0xe9 at column 4"),
    ]:
        changed = [*lines]
        path = tmp_path / "panel.tsv"
        if broken is None:
            data = "\n".join(changed).encode().split(b"\n")
            data[line - 1] = b"chr\xe9" + data[line - 1][4:]
            path.write_bytes(b"\n".join(data))
        else:
            changed[line - 1] = broken
            path.write_text("\n".join(changed))
        with pytest.raises(InputError, match=expected):
            load_panel(path)
    # a value polars cannot read as the dtype inferred from the first 100 rows
    rows = [f"1\t{10 + i}\tA\tC\t{i % 2}" for i in range(150)]
    rows[120] = "1\t130\tA\tC\tyes"
    path = tmp_path / "labels.tsv"
    path.write_text("chrom\tpos\tref\talt\tlabel\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError, match=r"labels\.tsv: cannot read the tsv panel \(the rows"):
        load_panel(path)


def test_no_more_than_a_batch_is_read_ahead(tmp_path, monkeypatch):
    """When the first batch is handed out, the reader has read its records and the rows the
    dtypes are inferred from, not the table (it read the whole file into polars before)."""
    n_rows = 1_000
    path = tmp_path / "big.tsv"
    body = "".join(f"chr1\t{10 + i}\tA\tC\n" for i in range(n_rows))
    path.write_text("chrom\tpos\tref\talt\n" + body)
    consumed = []
    records = panel_table.text_records

    def counted(*args, **kwargs):
        for record in records(*args, **kwargs):
            consumed.append(record[0])
            yield record

    monkeypatch.setattr(panel_table, "text_records", counted)
    monkeypatch.setattr(panel_module, "_BATCH_ROWS", 50)
    batches = PanelReader(path).batches()
    first = next(batches)
    assert first.height == 50 and len(consumed) <= 1 + panel_table._INFERRED_ROWS + 1
    assert sum(batch.height for batch in batches) == n_rows - 50


def test_a_gzipped_table_cut_short_is_named(tmp_path, monkeypatch):
    """A .tsv.gz whose end is missing (a download cut short) stops the read naming the file,
    wherever the batches stand when the gzip stream ends."""
    body = "".join(f"chr1\t{10 + i}\tA\tC\n" for i in range(20_000))
    data = gzip.compress(("chrom\tpos\tref\talt\n" + body).encode())
    path = tmp_path / "cut.tsv.gz"
    path.write_bytes(data[: len(data) // 2])
    monkeypatch.setattr(panel_module, "_BATCH_ROWS", 1_000)
    with pytest.raises(InputError, match=r"cut\.tsv\.gz: cannot read the table to its end"):
        load_panel(path)
