"""How many items a run's inputs hold before anything is fetched or checked (the estimate's
counts): a local file's own row count (Parquet metadata; the lines of a small text file), else
the documented count of the Hub file it is fetched from. The documented counts live here, each
with its source, and nowhere else in the package. No torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from carbon_vep.config.run import RunConfig
from carbon_vep.errors import InputError


@dataclass(frozen=True)
class Count:
    rows: int
    source: str  # where the figure comes from, as the estimate prints it
    sequence_bp: int | None = None  # a task's longest scored sequence (a bound), when known


_DOCS = "documented (docs/suite-conventions.md)"
# the perturbation bench's card (dataset_info): num_examples, and num_bytes / rows / 2 as a bound
# on each of a row's two sequences (its metadata columns are counted in, hence an upper bound)
_BENCH = "the dataset card (bp <= its bytes a row / 2)"
# Hub file (repo, filename) -> its documented count
HUB_COUNTS: dict[tuple[str, str], Count] = {
    ("HuggingFaceBio/brca2-vep", "brca2_vep.parquet"): Count(6_836, _DOCS),
    ("HuggingFaceBio/traitgym", "mendelian_traits_vep.parquet"): Count(3_380, _DOCS),
    ("HuggingFaceBio/clinvar-vep-final", "coding/clinvar_coding.parquet"): Count(39_473, _DOCS),
    ("HuggingFaceBio/clinvar-vep-final", "non_coding/clinvar_non_coding.parquet"): Count(
        15_258, _DOCS
    ),
    ("GenerTeam/sequence-recovery", "eukaryote/test.parquet"): Count(30_000, _DOCS),
    # 333,515,725 and 335,904,126 bytes for 20,000 rows (motif_human, syn_human)
    ("HuggingFaceBio/perturbation-bench", "motif_human/test-*"): Count(20_000, _BENCH, 8_338),
    ("HuggingFaceBio/perturbation-bench", "syn_human/test-*"): Count(20_000, _BENCH, 8_398),
    # syn_mouse's byte count is not in our sources: its bound is syn_human's (same script)
    ("HuggingFaceBio/perturbation-bench", "syn_mouse/test-*"): Count(
        20_000, "the dataset card (rows; bp assumed as syn_human)", 8_398
    ),
}
# ACGT bases of a whole genome, by canonical build (a scan of `regions: all`)
GENOME_BASES: dict[str, Count] = {
    "GRCh38": Count(2_900_000_000, "hg38's ACGT bases (docs/gpu.md)"),
}
SMALL_FILE = 16 * 2**20  # text files read line by line, and task files read whole, up to this


def input_count(path: str, run: RunConfig) -> Count | None:
    """The rows of the panel or task file at `path`: the file's own count when it is here, else
    the documented count of the Hub file fetched to (or named like) it; None when unknown."""
    documented = hub_count(path, run)
    rows = local_rows(path)
    if rows is None:
        return documented
    bp = local_sequence_bp(path)
    bp = bp if bp is not None else documented.sequence_bp if documented else None
    return Count(rows, "the file here", bp)


def hub_count(path: str, run: RunConfig) -> Count | None:
    """The documented count of the Hub file a `hub_files` entry fetches to `path`, else of the
    known Hub file with the same name (the shipped configs put a downloaded copy there)."""
    for hub in run.hub_files.values():
        if hub.out == path and (hub.repo_id, hub.filename) in HUB_COUNTS:
            count = HUB_COUNTS[hub.repo_id, hub.filename]
            return count
    for (repo, filename), count in HUB_COUNTS.items():
        if os.path.basename(filename) == os.path.basename(path):
            return replace(count, source=f"{count.source}, assumed: {repo} {filename}")
    return None


def local_rows(path: str) -> int | None:
    """Rows of a local Parquet file (its metadata), the data lines of a small plain TSV / CSV,
    or the ALT alleles of a small plain VCF's records (a multi-allelic record becomes one row per
    ALT, as ingest splits it); None when the file is absent, compressed, large or unreadable
    (the bill never stops a run: the checks that read the file name its problem)."""
    if not os.path.isfile(path):
        return None
    if path.endswith(".parquet"):
        import polars as pl

        try:
            return int(pl.scan_parquet(path).select(pl.len()).collect().item())
        except (pl.exceptions.PolarsError, OSError):
            return None
    if not path.endswith((".vcf", ".tsv", ".csv", ".txt")) or os.path.getsize(path) > SMALL_FILE:
        return None
    try:
        with open(path, errors="replace") as handle:
            lines = [line for line in handle if line.strip()]
    except OSError:
        return None
    if path.endswith(".vcf"):
        return sum(vcf_alt_count(line) for line in lines if not line.startswith("#"))
    return max(0, len(lines) - 1)  # a table's header


def vcf_alt_count(line: str) -> int:
    """The rows a VCF data line becomes: its ALT alleles (column 5, comma-separated; `.` or a
    line too short to have one is still one row, which the checks then name)."""
    fields = line.split("\t", 5)
    return fields[4].count(",") + 1 if len(fields) > 4 else 1


def local_sequence_bp(path: str) -> int | None:
    """The longest sequence of a small local task file (its `sequence` and `original_sequence`
    columns); None for a large or unreadable file, or one without them."""
    if not os.path.isfile(path) or os.path.getsize(path) > SMALL_FILE:
        return None
    from carbon_vep.suite.tasks import read_task_table

    try:
        table = read_task_table(path, [])
    except (InputError, OSError, ValueError):
        return None
    columns = [c for c in ("sequence", "original_sequence") if c in table.columns]
    lengths = [table[c].cast(str).str.len_bytes().max() for c in columns]
    return max((int(n) for n in lengths if n is not None), default=None)


def genome_bases(build: str) -> Count | None:
    from carbon_vep.genome.builds import canonical_build

    return GENOME_BASES.get(canonical_build(build))
