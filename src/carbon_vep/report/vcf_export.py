"""A panel's scores as a VCF for the annotation tools users already run.

`write_results_vcf`: one VCF record per panel row (ALT) that has CHROM, POS and REF, with the
panel's ID, QUAL, FILTER and requested INFO fields, scores in INFO fields with
Number/Type/Description, `##contig` lines from the reference (records on the reference's contig
names); rows that were not scored keep their status (and reason) and carry no score. Every INFO
key and FILTER written is declared. Bgzipped and tabix-indexed when the name ends in `.gz`
(Ensembl VEP `--custom ...,format=vcf`). `export_vcf`: the merged scores and their panel
through it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import polars as pl
import pysam

from carbon_vep import columns
from carbon_vep.atomic import VCF_TABIX, index_suffix, indexed_bgzf, indexed_file
from carbon_vep.config.stages import PanelSettings
from carbon_vep.genome.reference import open_reference
from carbon_vep.report.exports import KEY_COLUMNS, scan_table
from carbon_vep.report.vcf_lines import RecordLines, row_filters
from carbon_vep.report.vcf_records import sorted_batches, survey
from carbon_vep.variants.panel import panel_declarations
from carbon_vep.variants.panel_columns import ALL_INFO, carry_name
from carbon_vep.variants.panel_vcf import VcfDeclarations
from carbon_vep.variants.panel_vcf_info import InfoSpec

log = logging.getLogger("carbon_vep")
_VCF_TYPES = {pl.Float64: "Float", pl.Float32: "Float", pl.Boolean: "Flag"}


# VCF 4.x reserved INFO key: htslib (pysam) writes END on every record with a symbolic ALT
END_INFO = {
    "ID": "END",
    "Number": "1",
    "Type": "Integer",
    "Description": "End position of the variant described in this record",
}


def info_header(name: str, dtype: pl.DataType, description: str) -> dict[str, str]:
    kind = next((v for k, v in _VCF_TYPES.items() if dtype == k), None)
    if kind is None:
        kind = "Integer" if dtype.is_integer() else "String"
    return {
        "ID": name,
        "Number": "0" if kind == "Flag" else "A",
        "Type": kind,
        "Description": description,
    }


def _info_id(name: str) -> str:
    """A column name as an INFO key (`[A-Za-z_][0-9A-Za-z_.]*`, VCF 4.3)."""
    key = re.sub(r"[^0-9A-Za-z_.]", "_", name)
    return key if re.match(r"[A-Za-z_]", key) else f"_{key}"


def _carried_header(
    name: str, dtype: pl.DataType, spec: InfoSpec | None, description: str
) -> dict[str, str]:
    """The declaration of a carried INFO field: the panel header's where the column holds the
    value as declared (a Flag; Number 1 or A of its Type), else Number=. String (other lists,
    held as their comma-joined text; values read as raw text; fields the header does not
    declare); a table panel's columns (no header declares them) Number=1 of their dtype's Type
    (a Flag Number=0)."""
    text = description or f"{name}, carried from the panel"
    if spec is None:
        if name == "END" and dtype.is_integer():
            return dict(END_INFO)
        kind = info_header(name, dtype, text)["Type"]  # Flag, Float, Integer or String
        number = "0" if kind == "Flag" else "1"
        return {"ID": _info_id(name), "Number": number, "Type": kind, "Description": text}
    if spec.declared and spec.kind == "Flag" and dtype == pl.Boolean:
        return {"ID": name, "Number": "0", "Type": "Flag", "Description": text}
    held_as_declared = {
        "Integer": dtype.is_integer(),
        "Float": dtype.is_float(),
        "String": dtype == pl.Utf8,
        "Character": dtype == pl.Utf8,
    }
    if spec.declared and spec.number in ("1", "A") and held_as_declared.get(spec.kind):
        if name == "END":
            return dict(END_INFO)
        return {"ID": name, "Number": spec.number, "Type": spec.kind, "Description": text}
    if spec.declared:
        text += f" (declared Number={spec.number},Type={spec.kind}; carried as text)"
    key = "panel_END" if name == "END" else name  # END must be an Integer
    return {"ID": key, "Number": ".", "Type": "String", "Description": text}


def carried_infos(
    frame: pl.DataFrame | pl.LazyFrame,
    info_fields: Sequence[str],
    declarations: VcfDeclarations | None,
) -> dict[str, dict[str, str]]:
    """Column -> INFO declaration of each requested panel INFO field the table holds, under
    its own key (`_carried_header`). `declarations`: the VCF panel's header (None for a table
    panel: its columns named in `info_fields`, or with `*` every column that is not one of the
    pipeline's (`columns.PIPELINE`), each declared Number=1 with the Type of its dtype: Float,
    Integer (values within VCF's 32-bit range), Flag for booleans, else String)."""
    names = frame.lazy().collect_schema().names()
    if declarations is not None:
        carried = [(c.column, c.spec.name, c.spec, c.description) for c in declarations.info]
    else:
        named = [name for name in dict.fromkeys(info_fields) if name != ALL_INFO]
        if ALL_INFO in info_fields:
            named += [c for c in names if c not in columns.PIPELINE and c not in named]
        carried = [(name, name, None, "") for name in named]
    carried = [entry for entry in carried if entry[0] in names]
    dtypes = _vcf_dtypes(frame.lazy(), [column for column, *_ in carried])
    return {
        column: _carried_header(name, dtypes[column], spec, description)
        for column, name, spec, description in carried
    }


_INT32 = (-(2**31) + 8, 2**31 - 1)  # VCF Integer (htslib reserves the lowest values)


def _vcf_dtypes(table: pl.LazyFrame, names: Sequence[str]) -> dict[str, pl.DataType]:
    """Each column's dtype, Utf8 for integers a VCF Integer cannot hold (written as text):
    their least and greatest values, read in one pass."""
    schema = table.collect_schema()
    dtypes = {name: schema[name] for name in names}
    integers = [name for name, dtype in dtypes.items() if dtype.is_integer()]
    if integers:
        ranges = table.select(
            *(pl.col(c).min().alias(f"{i}min") for i, c in enumerate(integers)),
            *(pl.col(c).max().alias(f"{i}max") for i, c in enumerate(integers)),
        ).collect(engine="streaming")
        for i, name in enumerate(integers):
            low, high = ranges[f"{i}min"].item(), ranges[f"{i}max"].item()
            if low is not None and (low < _INT32[0] or high > _INT32[1]):
                dtypes[name] = pl.Utf8()
    return dtypes


def _vcf_header(
    contigs: Sequence[tuple[str, int | None]],
    infos: Sequence[Mapping[str, str]],
    filters: Mapping[str, str],
    source: str,
) -> pysam.VariantHeader:
    header = pysam.VariantHeader()
    header.add_meta("source", source)
    for contig, length in contigs:
        header.contigs.add(contig, length=length)
    for name, description in filters.items():
        header.filters.add(name, None, None, description)
    for info in infos:
        header.add_meta("INFO", items=list(info.items()))
    return header


SCORE_FIELDS = {
    "score": "carbon-vep score, larger = more damaging (recipe: ##carbon_vep_recipe)",
    "delta": "LL(alt window) - LL(ref window), mean per token or base (centered, fns)",
    "delta_rc": "the same delta on the reverse-complement windows (rc_average)",
    "ref_ll": "log-likelihood of the reference window, or log P(ref base) (nexttoken, scan)",
    "alt_ll": "log-likelihood of the alternate window, or log P(alt base) (nexttoken, scan)",
    "p_ref": "P(ref base) at the variant (nexttoken, scan)",
    "p_alt": "P(alt base) at the variant (nexttoken, scan)",
    "label_conflict": "the panel gives this variant conflicting labels (left out of metrics)",
    # a scan's scales (recipe from_scan): as the scan's TSV and calibration tables define them
    **{c.name: c.description for c in columns.CALIBRATED},
}


def default_fields(frame: pl.DataFrame | pl.LazyFrame) -> dict[str, str]:
    """The score columns of `frame` that hold at least one value, with their descriptions."""
    table = frame.lazy()
    present = [c for c in SCORE_FIELDS if c in table.collect_schema()]
    held = table.select(pl.col(present).is_not_null().any()).collect(engine="streaming")
    return {column: SCORE_FIELDS[column] for column in present if held[column].item()}


def _longest(end: int | None, contigs: Sequence[tuple[str, int | None]]) -> int:
    """The longest `##contig` length (the reference's contigs), or the last position a record
    reaches (POS + len(REF) - 1) where that is further: a VCF's index is a .csi where it
    passes what a .tbi holds (`atomic.index_suffix`). All the header's contigs, not only the
    records': the workflow decides the index from the header (`vcf_index_suffix`)."""
    lengths = [n for _, n in contigs if n]
    return max([int(end or 0), *lengths])


def vcf_index_suffix(path: str | Path) -> str:
    """The index `write_results_vcf` gives a bgzipped VCF, from its header alone: `.csi` where
    a `##contig` length passes what a .tbi holds (`atomic.index_suffix`), else `.tbi`. The
    workflow asks for it once export_vcf (a checkpoint) has written the file without one (a
    record past 2^29 bp on a contig the reference lacks: `atomic.index_tabix` refuses the
    .tbi, naming it)."""
    with pysam.VariantFile(str(path)) as vcf:
        lengths = [contig.length or 0 for contig in vcf.header.contigs.values()]
    return index_suffix(max(lengths, default=0))


def _filter_lines(used_texts: Sequence[object], declared: Mapping[str, str]) -> dict[str, str]:
    """A `##FILTER` line for every FILTER value the records carry (PASS is built in), in the
    order they first carry them, with the panel header's description."""
    used = dict.fromkeys(f for v in used_texts for f in row_filters(v))
    return {
        name: declared.get(name) or f"{name}, carried from the panel"
        for name in used
        if name != "PASS"
    }


def _carry_keys(
    infos: dict[str, dict[str, str]], carried: Mapping[str, Mapping[str, str]], prefix: str
) -> str:
    """Add the `carried` declarations to `infos`, each under its own key unless a key already
    there has it or it starts with the scores' `prefix` (a panel annotated with an earlier
    results.vcf.gz holds `CVEP_SCORE`, and `CVEP_DELTA` of a recipe this run may not have):
    then `panel_<key>`, as a table panel's column the pipeline uses becomes `panel_<name>`
    (`carry_name`). Returns the renames as `CVEP_SCORE->panel_CVEP_SCORE,...` ('' if none)."""
    taken = {info["ID"] for info in infos.values()}
    renames = []
    for column, info in carried.items():
        if column in infos:
            continue
        ours = {info["ID"]} if prefix and info["ID"].startswith(prefix) else set()
        key = carry_name(info["ID"], taken, reserved=ours)
        if key != info["ID"]:
            renames.append(f"{info['ID']}->{key}")
            info = {
                **info,
                "ID": key,
                "Description": f"{info['Description']} (panel's {info['ID']})",
            }
        infos[column] = dict(info)
        taken.add(key)
    return ",".join(renames)


def write_results_vcf(
    merged: pl.DataFrame | pl.LazyFrame,
    contig_lengths: Mapping[str, int],
    out_path: str | Path,
    fields: Mapping[str, str] | None = None,
    prefix: str = "CVEP_",
    source: str = "carbon-vep",
    carried: Mapping[str, Mapping[str, str]] | None = None,
    filters: Mapping[str, str] | None = None,
    index: bool = True,
) -> int:
    """Write every row of a merged scores table as a VCF record, scores in INFO (a `.gz` name:
    bgzipped and tabix-indexed; `index=False`: without its index, which the workflow's
    index_vcf job writes).

    `fields` maps a column to its INFO description (default: the score columns present, see
    `SCORE_FIELDS`); INFO ids are `prefix` + column in upper case. `carried` maps a panel
    column to its own INFO declaration (`carried_infos`: the panel's INFO fields under their
    own keys; a key starting with `prefix`, such as a `CVEP_SCORE` the panel held, becomes
    `panel_<key>`, listed in `##carbon_vep_panel_info_renamed`). ID, QUAL and FILTER are the
    panel's (columns `id`, `qual`, `filter`) where it had them; each FILTER value gets a
    `##FILTER` line, described as in `filters` (the panel header's). The recipe and
    normalisation of the scored rows go in `##carbon_vep_recipe` / `_normalization` lines.
    `status` and `reason` are always written, so unscored rows say why. Every INFO key a
    record holds is declared (END, reserved in VCF 4.x, where a record has a symbolic ALT:
    htslib writes it on such records).

    Records use the reference contig (`ref_chrom`, else the panel's `chrom`) in reference
    order, as the `##contig` lines and the tabix index do; panel contigs written under the
    reference's name are listed in `##carbon_vep_panel_contigs` (`17->chr17`). Contigs not in
    the reference (status `unknown_contig`) get a header line without a length and come last.
    Records are the panel's own POS, REF and ALT (a padded SNV as written, not its trimmed
    form). Rows that cannot be VCF records (`vcf_records.placed_rows`: no CHROM/POS/REF, a
    POS outside the contig, alleles that are not VCF's) are counted in a
    `##carbon_vep_rows_not_written` header line and the count is returned.

    `merged` may be a lazy scan (`export_vcf`'s): the header comes from one pass over it a slice
    at a time, the records from batches read back in the VCF's order (`vcf_records`), so the
    memory does not follow the table's size.
    """
    out_path = Path(out_path)
    table = merged.lazy()
    schema = table.collect_schema()
    all_fields = {
        "status": "carbon-vep row status (scored, ref_mismatch, skipped, ...)",
        "reason": "why the row was not scored (absent when scored)",
        **(default_fields(table) if fields is None else fields),
    }
    carried = dict(carried or {})
    missing = [c for c in (*KEY_COLUMNS, *all_fields, *carried) if c not in schema]
    if missing:
        raise ValueError(f"columns {missing} missing from the table to export")
    written = [*all_fields, *carried, "id", "qual", "filter"]
    placed = survey(table, contig_lengths)
    n_unwritable = placed.n_rows - placed.n_placed
    infos = {c: info_header(prefix + c.upper(), schema[c], t) for c, t in all_fields.items()}
    renamed_infos = _carry_keys(infos, carried, prefix)
    keys = [info["ID"] for info in infos.values()]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"INFO key(s) {repeated} would be declared twice")
    declared = list(infos.values())
    if "END" not in keys and placed.symbolic:
        declared.insert(0, END_INFO)
    filter_lines = _filter_lines(placed.filters, filters or {})
    header = _vcf_header(placed.contigs, declared, filter_lines, source)
    if placed.renamed:
        renamed = ",".join(f"{a}->{b}" for a, b in placed.renamed)
        header.add_meta("carbon_vep_panel_contigs", renamed)
    if renamed_infos:
        header.add_meta("carbon_vep_panel_info_renamed", renamed_infos)
    if n_unwritable:
        header.add_meta("carbon_vep_rows_not_written", f"{n_unwritable}")
    for column in ("recipe", "normalization"):
        if column in schema:
            held = table.select(pl.col(column).drop_nulls().unique()).collect(engine="streaming")
            if held.height:
                header.add_meta(f"carbon_vep_{column}", ",".join(sorted(held[column].to_list())))

    with _vcf_file(out_path, _longest(placed.end, placed.contigs), index) as vcf:
        vcf.write(str(header).encode())
        lines = RecordLines(header, infos)
        for batch in sorted_batches(table, contig_lengths, written, placed, out_path):
            vcf.write(lines(batch))
    return n_unwritable


@contextmanager
def _vcf_file(out_path: Path, longest: int, index: bool) -> Iterator[BinaryIO]:
    """The VCF's handle: bgzipped and tabix-indexed when the name ends in `.gz` (`index`:
    with its index), else plain text; in place once complete."""
    if out_path.name.endswith(".gz"):
        with indexed_bgzf(out_path, VCF_TABIX, longest, index) as handle:
            yield handle
    else:
        with indexed_file(out_path, None) as work, open(work, "wb") as handle:
            yield handle


def export_vcf(
    merged: str,
    reference: str,
    extra_fields: Mapping[str, str],
    out: str,
    panel: str | None = None,
    settings: PanelSettings | None = None,
    index: bool = True,
) -> None:
    """A panel's merged results (Parquet) as the VCF `out` (`write_results_vcf`), contigs from
    the reference, INFO fields: the score columns present, `extra_fields` (column ->
    description) and the panel's INFO fields named in `settings.info_fields` (declared as the
    `panel`'s header declares them when it is a VCF, else String); FILTER lines described as
    the panel's header describes them."""
    with open_reference(reference) as fasta:
        lengths = dict(fasta.lengths)
    frame, _ = scan_table(merged, (*KEY_COLUMNS, *extra_fields))
    fields = {**default_fields(frame), **extra_fields}
    info_fields = settings.info_fields if settings is not None else ()
    declarations = None
    if panel is not None:
        fmt = settings.format if settings is not None else "auto"
        declarations = panel_declarations(panel, fmt, info_fields)
    carried = carried_infos(frame, info_fields, declarations)
    filters = declarations.filters if declarations is not None else {}
    unwritten = write_results_vcf(
        frame, lengths, out, fields, carried=carried, filters=filters, index=index
    )
    if unwritten:
        log.warning(
            "%d rows cannot be VCF records (no CHROM/POS/REF, a POS outside the contig, or "
            "alleles that are not VCF's); they are in %s with their status",
            unwritten,
            merged,
        )
