"""Read a variant panel (VCF/BCF through pysam, Parquet/TSV/CSV through polars) into one table.

Every input variant becomes one row with a stable `row_id` and a `source` (`file:line N` for
text files, `file:row N` for Parquet, `file:record N` for BCF) so that later stages and error
messages can point at it; a multi-allelic VCF record is split into one row per ALT. A panel is
read in batches of rows (`PanelReader`); `load_panel` gathers them into one table. The values
as read are kept in `input_pos` / `input_ref` / `input_alt`; `pos` is the 1-based position as an
integer (null when the file holds something else). Every other column of a table, and the
requested INFO fields of a VCF, is carried through; a user column whose name the pipeline uses
itself (`score`, `status`, ...) is carried as `panel_<name>`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from carbon_vep.columns import PANEL_KEY as KEY
from carbon_vep.config.run import setting_name
from carbon_vep.errors import InputError
from carbon_vep.variants.panel_columns import INPUT_COLUMNS, ReadAgain
from carbon_vep.variants.panel_table import TableChoices, table_batches
from carbon_vep.variants.panel_vcf import VcfDeclarations, vcf_batches, vcf_declarations
from carbon_vep.variants.text_table import table_format

_BATCH_ROWS = 100_000  # rows of a table read and checked at a time
_VCF_SUFFIXES = (".vcf", ".vcf.gz", ".vcf.bgz", ".bcf")


@dataclass
class Panel:
    """A panel as read: one row per variant, plus what the file says about itself."""

    frame: pl.DataFrame
    path: Path
    # contig -> length from a VCF header's ##contig lines (a build fingerprint)
    declared_lengths: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # renamed columns, ignored blank lines, ...


def detect_format(path: str | Path) -> str:
    name = str(path).lower()
    if name.endswith(_VCF_SUFFIXES):
        return "vcf"
    fmt = table_format(path)
    if fmt is not None:
        return fmt
    raise InputError(
        path,
        "cannot tell the panel format from the name (.vcf, .vcf.gz, .bcf, .parquet, .tsv, "
        f".csv, .gz too); set {setting_name('format')}",
    )


def panel_declarations(
    path: str | Path, fmt: str = "auto", info_fields: Sequence[str] = ()
) -> VcfDeclarations | None:
    """What a VCF/BCF panel's header declares of the INFO fields and FILTERs its rows carry
    (`vcf_declarations`); None for a table panel (no header declares its columns)."""
    if (detect_format(path) if fmt == "auto" else fmt) != "vcf":
        return None
    return vcf_declarations(Path(path), info_fields)


def read_panel(
    path: str | Path,
    fmt: str = "auto",
    columns: Mapping[str, str] | None = None,
    info_fields: Sequence[str] = (),
) -> pl.DataFrame:
    """The panel's rows: row_id, source, chrom, pos, ref, alt, input_* and the carried columns."""
    return load_panel(path, fmt, columns, info_fields).frame


def load_panel(
    path: str | Path,
    fmt: str = "auto",
    columns: Mapping[str, str] | None = None,
    info_fields: Sequence[str] = (),
) -> Panel:
    """Read a panel file of any supported format (see the module docstring)."""
    reader = PanelReader(path, fmt, columns, info_fields)
    while True:
        try:
            frames = list(reader.batches())
            break
        except ReadAgain:
            continue
    frame = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
    return Panel(reader.finish(frame), reader.path, reader.declared_lengths, reader.notes)


class PanelReader:
    """A panel file read in batches of consecutive rows, so that a ClinVar-size VCF never has
    to be in memory as a whole.

    `batches()` yields frames with `row_id`, `source`, the key, `input_*` and the carried
    columns; `declared_lengths` is known once the first batch is out, `notes` and
    `null_columns` once the last is. `finish(frame)` gives a frame of all rows the final
    schema (a carried column that no row fills is a Null column, as polars infers it).
    """

    def __init__(
        self,
        path: str | Path,
        fmt: str = "auto",
        columns: Mapping[str, str] | None = None,
        info_fields: Sequence[str] = (),
    ) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise InputError(self.path, "panel file not found")
        if self.path.stat().st_size == 0:
            raise InputError(self.path, "the panel file is empty")
        self.fmt = detect_format(self.path) if fmt == "auto" else fmt
        if self.fmt not in ("vcf", "parquet", "tsv", "csv"):
            raise InputError(
                self.path,
                f"unknown panel format {self.fmt!r} in {setting_name('format')} "
                "(vcf, parquet, tsv, csv or auto)",
            )
        self.columns = dict(columns or {})
        self.info_fields = list(info_fields)
        self.declared_lengths: dict[str, int] = {}
        self.notes: list[str] = []
        self.null_columns: list[str] = []
        self.raw_info: dict[str, str] = {}  # VCF INFO fields read as text, and why
        self.table_choices = TableChoices()  # what a table's rows need, learned from them

    def batches(self) -> Iterator[pl.DataFrame]:
        """The panel's rows in order, a batch at a time (`_BATCH_ROWS` rows of a table,
        `panel_vcf._BATCH_RECORDS` records of a VCF). Raises `ReadAgain` when the caller must start
        over."""
        self.notes, self.null_columns = [], []
        if self.fmt == "vcf":
            source: Iterator[pl.DataFrame] = vcf_batches(self)
        else:
            source = table_batches(
                self.path, self.fmt, self.columns, self.table_choices, self.notes, _BATCH_ROWS
            )
        fixed = ("row_id", "source", *KEY, *INPUT_COLUMNS)
        n_rows = 0
        for batch in source:
            if batch.height:
                yield batch.with_columns(
                    (pl.int_range(pl.len(), dtype=pl.Int64) + n_rows).alias("row_id")
                ).select(*fixed, pl.exclude(*fixed))
                n_rows += batch.height
        if n_rows == 0:
            raise InputError(self.path, "the panel holds no variants")

    def finish(self, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame` (rows of this panel) with the final schema: columns no row fills are Null."""
        empty = [c for c in self.null_columns if c in frame.columns]
        return frame.with_columns(pl.col(empty).cast(pl.Null)) if empty else frame
