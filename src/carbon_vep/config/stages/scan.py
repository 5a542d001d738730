"""How a scan is cut into tiles (`TileSettings`: the scan recipe's too) and into jobs and output
files (`ScanChunkSettings`), and how its scores are calibrated (`CalibrationSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from carbon_vep.config.fields import ConfigError, describe, setting


@dataclass(frozen=True)
class TileSettings:
    """How a scan cuts a region into one-pass tiles."""

    tile_bp: int = setting(
        49146,
        minimum=12,
        help="tile length in bp (8,191 tokens + the prefix = 8,192, Carbon-500M native)",
    )
    min_context: int = setting(
        24000, minimum=0, help="left context guaranteed to every scored base"
    )

    def check(self) -> None:
        """A tile scores the bases after its first `min_context`: at least one 6-mer of them
        (the scan commands and a config's scans refuse it before the plan or a model job; not
        a class invariant, as a dataset whose recipe tiles nothing may set tile_bp alone)."""
        window = self.tile_bp - self.tile_bp % 6  # whole 6-mer tokens
        if window - self.min_context < 6:
            tile_bp, min_context = fields(self)
            raise ConfigError(
                f"{describe(min_context)} = {self.min_context:,} leaves no bases to score in a "
                f"tile of {describe(tile_bp)} = {self.tile_bp:,} ({window:,} bp of whole 6-mers): "
                f"a tile scores the bases after its min_context, at least one 6-mer; lower "
                f"min_context to at most {max(window - 6, 0):,} or raise tile_bp to at least "
                f"{(self.min_context + 6 + 5) // 6 * 6:,}"
            )


@dataclass(frozen=True)
class ScanChunkSettings:
    """How a scan's targets are cut into jobs (plan-scan), and the precision its scores are
    counted (count-scan) and printed at."""

    chunk_bp: int = setting(
        50_000_000,
        scope="run",
        minimum=1_000,
        help="scored bases per scan job: 50 Mbp is ~13 min of Carbon-3B on one A100 at 50% of "
        "bf16 peak (estimate; profiles/slurm-a10 and slurm-h100 set 30 and 150 Mbp)",
    )
    group_bp: int = setting(
        10_000_000,
        minimum=1,
        help="output files: a contig with at least this many scored bases gets its own Parquet "
        "file and tabix TSV (one merge job); smaller contigs (unplaced, decoy, HLA, a draft "
        "assembly's) share files, consecutive in reference order, up to this many scored bases "
        "a file (GRCh38's chromosomes but chrM have their own; its ~3,300 other contigs of the "
        "analysis set share a few dozen)",
    )
    tsv_decimals: int = setting(
        2,
        minimum=1,
        maximum=6,
        help="decimals of the score in the tabix TSV (the Parquet dataset keeps every marginal); "
        "the calibration counts scores at this precision, so a printed score has one PHRED",
    )


@dataclass(frozen=True)
class CalibrationSettings:
    """How a scan's scores are calibrated (count-scan, calibrate-scan, write-scan-tsv)."""

    neutral_regions: str | None = setting(
        None,
        help="BED file of neutral regions (e.g. ancestral repeats): the context means are taken "
        "over the scanned SNVs inside them; default: every scanned SNV. Checked by the plan: "
        "contigs the reference lacks (a UCSC BED's _alt/_fix/_random) are ignored and named; "
        "a BED that overlaps none of the scan's regions is refused",
    )
    context_min_count: int = setting(
        100,
        minimum=1,
        help="neutral SNVs a pentanucleotide cell needs for its own mean; below it the "
        "trinucleotide cell's mean is used, then the global mean",
    )
    tsv_calibrated: bool = setting(
        False,
        help="the tabix TSV also carries `calibrated` and `calibrated_phred` (always in the "
        "calibration tables, annotate and from_scan datasets)",
    )
