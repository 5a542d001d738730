"""Every Markdown table of the package comes from carbon_vep.markdown.table."""

from carbon_vep import markdown


def test_a_cell_with_a_pipe_or_a_newline_cannot_break_its_row():
    text = markdown.table(["contig", "n"], [["tig00000001|arrow", 3], ["two\nlines", 4]])
    assert text.splitlines() == [
        "| contig | n |",
        "|---|---|",
        "| tig00000001\\|arrow | 3 |",
        "| two lines | 4 |",
    ]
    assert markdown.table(["a"], []) == "| a |\n|---|"  # no rows: the header alone
