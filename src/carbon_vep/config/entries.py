"""The entries of a workflow config, one class a section (datasets, scans, Genomic-NIAH, Hub
files, downloads; tasks in config.task_entry), each nesting the stage settings of
`config.stages`, and `SECTIONS`, the top-level sections that hold them. `RunConfig`
(config.run) reads a whole config into them. No torch here."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, get_args

from carbon_vep.config.fields import ConfigError, group, setting
from carbon_vep.config.niah_grid import NIAH_CONTEXTS, NIAH_TASKS, niah_config_name
from carbon_vep.config.stages import (
    CalibrationSettings,
    EvaluationSettings,
    LabelSettings,
    MetricSettings,
    ModelSettings,
    NiahSettings,
    PanelSettings,
    RecipeSettings,
    ScanChunkSettings,
    ShardSettings,
    TileSettings,
)
from carbon_vep.config.task_entry import TaskConfig, kind_titles
from carbon_vep.genome.builds import UCSC_GENOMES, ucsc_genome

ENTRY_KEY = r"^[A-Za-z0-9_.-]+$"


@dataclass(frozen=True)
class DatasetConfig:
    panel: str = setting(help="variant panel: VCF/BCF, Parquet, TSV or CSV")
    reference: str = setting(
        help="genome of this dataset's build: FASTA (plain or bgzipped; a missing .fai/.gzi "
        "is built next to it) or a GENERator-style Parquet with columns ID, Sequence"
    )
    models: tuple[str, ...] | None = setting(
        None, help="model keys to score this dataset with (default all)"
    )
    export_vcf: bool = setting(
        True, help="write the results as results.vcf.gz (scores in INFO, tabix-indexed)"
    )
    checks: PanelSettings = group(PanelSettings)
    labels: LabelSettings = group(LabelSettings)
    scoring: RecipeSettings = group(RecipeSettings)
    shards: ShardSettings = group(ShardSettings)
    metrics: MetricSettings = group(MetricSettings)

    @property
    def build(self) -> str:
        return self.checks.build


TrackReference = Literal["auto", "genome", "relative", "copy"]
TRACK_REFERENCES = get_args(TrackReference)  # how a scan's IGV sessions name the reference


@dataclass(frozen=True)
class ScanConfig:
    reference: str = setting(help="genome FASTA (or GENERator Parquet)")
    build: str = setting(help="genome build of the reference (e.g. hg38)")
    regions: tuple[str, ...] = setting(
        single=True,
        help="what to scan: `all` (every contig of the reference), a list of contig names and "
        "CHROM:START-END (1-based inclusive), or the path of a BED file (overlapping and "
        "adjacent intervals merged); contig names are matched through the panel aliases "
        "(chr1 = 1 = NC_000001.11)",
    )
    models: tuple[str, ...] | None = setting(None, help="model keys to scan with (default all)")
    tracks: bool = setting(
        False,
        help="also write genome-browser tracks of the scan (bigWig per alternative base, "
        "PHRED, max, surprise; a UCSC track hub and IGV sessions: docs/tracks.md) into "
        "scans/<scan>/<model>/tracks/",
    )
    tracks_reference: TrackReference = setting(
        "auto",
        help="how the tracks' IGV sessions name the reference (no absolute path, so the "
        "folder can be published or sent): genome (the build's id: hg19, hg38, mm10, ...), "
        "relative (the FASTA by a path relative to the tracks folder), copy (the FASTA and its "
        "index put into the tracks folder, hard-linked where possible); auto: genome for a "
        "build IGV and UCSC host, else relative (docs/tracks.md)",
    )
    tiles: TileSettings = group(TileSettings)
    chunks: ScanChunkSettings = group(ScanChunkSettings)
    calibration: CalibrationSettings = group(CalibrationSettings)

    def check(self, key: str) -> None:
        """What the last jobs would refuse, refused when the config is read: IGV sessions
        naming the build's genome id need a build IGV and UCSC host; the tiles must leave
        bases to score."""
        try:
            self.tiles.check()
        except ConfigError as err:
            raise ConfigError(f"scans.{key}: {err}") from None
        if self.tracks and self.tracks_reference == "genome" and ucsc_genome(self.build) is None:
            hosted = ", ".join(sorted({*UCSC_GENOMES, *UCSC_GENOMES.values()}))
            raise ConfigError(
                f"scans.{key}: tracks_reference: genome names the build's IGV / UCSC genome id, "
                f"but build {self.build!r} is none they host ({hosted}); set tracks_reference: "
                "relative (the FASTA by a relative path) or copy (the FASTA put into the "
                "tracks folder), or auto (relative for this build)"
            )


# The Genomic-NIAH dataset as its card declares it: each config's test split at
# data/<config>/test-*.parquet (the card's `configs:` block at this commit, "Initial Genome-NIAH
# release: 4 tasks x 6 ctxs = 24 configs, 12000 rows"; docs/suite-conventions.md#genomic-niah).
# The official script's default id, HuggingFaceBio/genome-niah, has no card in our sources.
NIAH_REPO = "HuggingFaceBio/genomic-niah"
NIAH_REVISION = "f286afed98bc4ce34c5250c558ae97439e30cc4e"
NIAH_FILES = "data/{config}/test-*.parquet"


@dataclass(frozen=True)
class NiahCell:
    """One cell of a Genomic-NIAH entry: a task at a context (the Hub config name)."""

    name: str
    task: str
    ctx: int


@dataclass(frozen=True)
class NiahConfig:
    tasks: tuple[str, ...] = setting(
        NIAH_TASKS,
        help=f"Genomic-NIAH tasks to run, of {', '.join(NIAH_TASKS)}",
        item_pattern=f"^({'|'.join(NIAH_TASKS)})$",
    )
    contexts: tuple[int, ...] = setting(
        NIAH_CONTEXTS, help="contexts in tokens (the published grid: 4,096 ... 131,072)"
    )
    source: Literal["hub", "build"] = setting(
        "hub",
        help="hub: each cell is the Hub dataset's config of that name (niah_4k, "
        "niah_neardup_d2_32k, ...), fetched on the head node; build: built from `reference` "
        "(build-niah)",
    )
    repo_id: str = setting(NIAH_REPO, help="Hub dataset of the cells (source hub)")
    revision: str | None = setting(
        NIAH_REVISION,
        help="commit of the Hub dataset (source hub; the default is the release whose layout "
        "`filename` follows)",
    )
    filename: str = setting(
        NIAH_FILES,
        help="the split's Parquet file(s) of a config in the Hub repository ({config} = the "
        "cell's config name; a glob is fetched and joined, `*` within one folder)",
    )
    reference: str | None = setting(None, help="source build: the genome haystacks come from")
    rows: int = setting(
        500,
        minimum=1,
        help="rows a cell (the Hub's cells hold 500: a fetched cell holding other than `rows` "
        "stops the run before its jobs; source build: rows built)",
    )
    seed: int = setting(0, help="source build: the builder's seed")
    rows_per_job: int = setting(
        100, minimum=1, help="rows a score_niah job scores (a cell's rows are cut into jobs)"
    )
    models: tuple[str, ...] | None = setting(None, help="model keys to run (default all)")
    niah: NiahSettings = group(NiahSettings)
    evaluation: EvaluationSettings = group(EvaluationSettings)

    def cells(self) -> list[NiahCell]:
        return [
            NiahCell(niah_config_name(task, ctx), task, ctx)
            for task in self.tasks
            for ctx in self.contexts
        ]

    def cell(self, name: str) -> NiahCell:
        return next(c for c in self.cells() if c.name == name)

    def build_args(self, name: str) -> list[str]:
        """build-niah's options for a cell of a `source: build` entry (but the reference)."""
        cell = self.cell(name)
        return [
            "--task",
            cell.task,
            "--ctx",
            str(cell.ctx),
            "--rows",
            str(self.rows),
            "--seed",
            str(self.seed),
        ]

    def parameters(self, name: str) -> dict[str, Any]:
        """What a cell's metrics record about how it was scored."""
        cell = self.cell(name)
        items = {"task": cell.task, "context_tokens": cell.ctx, "source": self.source}
        return items | dataclasses.asdict(self.niah)

    def row_ranges(self) -> list[tuple[int, int]]:
        """[start, end) of each job's rows."""
        return [
            (lo, min(lo + self.rows_per_job, self.rows))
            for lo in range(0, self.rows, self.rows_per_job)
        ]

    def hub_file(self, cell: NiahCell, out: str) -> HubFileConfig:
        """What fetch-hub fetches for a cell of a Hub entry."""
        filename = self.filename.format(config=cell.name)
        return HubFileConfig(self.repo_id, filename, out, self.revision, "dataset")

    def check(self, key: str) -> None:
        unknown = sorted(set(self.tasks) - set(NIAH_TASKS))
        if unknown:
            raise ConfigError(f"niah.{key}: unknown task(s) {unknown}; of {list(NIAH_TASKS)}")
        if self.source == "build" and not self.reference:
            raise ConfigError(f"niah.{key}: source build needs `reference` (a genome FASTA)")
        if self.source == "hub" and self.reference:
            raise ConfigError(f"niah.{key}: `reference` applies to source build only")


@dataclass(frozen=True)
class HubFileConfig:
    repo_id: str = setting(help="Hub repository id")
    filename: str = setting(
        help="file in the repository, or a glob of Parquet files to concatenate (`*` matches "
        "within one folder: `syn_human/test-*` takes that config's shards only)"
    )
    out: str = setting(help="where datasets and tasks read the file")
    revision: str | None = setting(None, help="commit, tag or branch")
    repo_type: Literal["dataset", "model"] = setting("dataset", help="Hub repository type")


@dataclass(frozen=True)
class DownloadConfig:
    url: str = setting(help="where the file is published (https://, or file:// for a local copy)")
    out: str = setting(help="where datasets and tasks read the file")
    sha256: str | None = setting(
        None,
        help="sha256 of the file as published (before gunzip); the download is refused on a "
        "mismatch, and without it (the refusal prints the hash to check and pin)",
        pattern=r"^[0-9a-f]{64}$",
    )
    gunzip: bool = setting(False, help="decompress a gzip download into `out`")


Entry = DatasetConfig | ScanConfig | TaskConfig | NiahConfig

# top-level sections: name -> (entry class, at least one entry required, description)
SECTIONS: dict[str, tuple[type, bool, str]] = {
    "models": (ModelSettings, True, "models by key (keys are used in output paths)"),
    "datasets": (
        DatasetConfig,
        False,
        "variant panels, each scored with a recipe (a config needs datasets, scans or tasks)",
    ),
    "scans": (
        ScanConfig,
        False,
        "regions in which every possible SNV is scored (one pass per tile)",
    ),
    "tasks": (
        TaskConfig,
        False,
        "zero-shot suite tasks other than variant panels: " + kind_titles(),
    ),
    "niah": (
        NiahConfig,
        False,
        "Genomic-NIAH, the suite's long-context task: tasks x contexts, from the Hub or built "
        "from a genome, each cell's rows cut into model jobs",
    ),
    "hub_files": (
        HubFileConfig,
        False,
        "public dataset files fetched from the Hugging Face Hub by head-node rules "
        "(fetch_hub_<name>; needs internet) into `out`, where datasets and tasks read them",
    ),
    "downloads": (
        DownloadConfig,
        False,
        "other public files (a reference genome) fetched by head-node rules (fetch_url_<name>; "
        "needs internet) from a pinned URL, checked against their sha256, into `out`",
    ),
}
