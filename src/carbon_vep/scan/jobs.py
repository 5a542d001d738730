"""Each scan command's work, from its files to its files (cli.scan parses the options and calls
these): a region scanned in one process, the plan, a chunk on the model, one output file's
merge, the calibration, one output file's tabix TSV, the summary with `scan.json`, and every
TSV of a scan in one file. The two model jobs import torch (`tiles`) only once their inputs
are checked."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carbon_vep import atomic
from carbon_vep.config.stages import (
    CalibrationSettings,
    ModelSettings,
    ScanChunkSettings,
    TileSettings,
)
from carbon_vep.errors import InputError
from carbon_vep.genome.reference import open_reference
from carbon_vep.scan.calibrate import Calibration, contexts_markdown
from carbon_vep.scan.counts import (
    UNRANKED,
    count_positions,
    counts_meta,
    min_context_of,
    neutral_regions,
    read_counts,
)
from carbon_vep.scan.plan import (
    check_tile_context,
    chunk_pieces,
    describe_plan,
    plan_file,
    plan_scan,
)
from carbon_vep.scan.positions import merge_plan_file
from carbon_vep.scan.record import read_json, scan_record, summarize, summary_markdown
from carbon_vep.scan.targets import (
    check_neutral_overlaps,
    resolve_neutral,
    resolve_targets,
    skipped_note,
    target_pieces,
)
from carbon_vep.scan.tiling import parse_region
from carbon_vep.scan.tsv import concat_tsv, write_tsv

log = logging.getLogger("carbon_vep")
Paths = Sequence[str | Path]


def scan_region_files(
    model: ModelSettings,
    tiles: TileSettings,
    reference_path: str,
    region: str,
    out: str,
    snv_out: str | None,
) -> None:
    """Every possible SNV of `region`: per-position Parquet at `out`, per-SNV at `snv_out`.
    The region is planned as a workflow scan's targets are (scan.targets.target_pieces: N and
    other non-ACGT bases skipped and logged, context restarting after a gap), and the region,
    the tiles against the model's context and a region without a scorable base are refused
    before the model loads."""
    from carbon_vep.model.job import load_engine

    chrom, start, end = parse_region(region)
    tiles.check()
    for note in check_tile_context(tiles, {"--model": model.path}):
        log.info("%s", note)
    with open_reference(reference_path) as reference:
        if chrom not in reference.lengths:
            raise InputError(reference_path, f"contig {chrom!r} of --region not in the reference")
        length = reference.lengths[chrom]
        if end > length:
            raise InputError("--region", f"{region} ends past the end of {chrom} ({length:,} bp)")
        pieces, counts = target_pieces(reference, {chrom: [(start, end)]})
        note = skipped_note(counts)
        if note:
            log.warning("%s: %s", region, note)
        engine = load_engine(model, region)
        from carbon_vep.scan.tiles import scan_pieces, snv_scores

        positions = scan_pieces(engine, reference, pieces, tiles)
    atomic.write_parquet(positions, out)
    if snv_out:
        atomic.write_parquet(snv_scores(positions), snv_out)
    log.info("scanned %d positions of %s", positions.height, region)


def write_plan(
    reference_path: str,
    regions: Sequence[str],
    tiles: TileSettings,
    chunks: ScanChunkSettings,
    models: Mapping[str, str],
    title: str,
    out: str,
    report: str | None,
    neutral_regions: str | None = None,
    demo_models: Collection[str] = (),
) -> str:
    """The plan of a scan (targets -> chunks, one job each) at `out`, with its counts and
    estimates as Markdown (at `report` too, if given), which is returned. `demo_models`: the
    keys of `models` the run builds (build_demo), estimated at the demo model's shape. The scan's
    neutral_regions BED, if any, is checked against the reference and the targets here, before
    any model job (its contigs the reference lacks noted in the plan; one that overlaps no
    target refused)."""
    with open_reference(reference_path) as reference:
        targets = resolve_targets(regions, reference.lengths)
        notes = []
        if neutral_regions:
            neutral, note = resolve_neutral(neutral_regions, reference.lengths)
            check_neutral_overlaps(neutral_regions, neutral, targets)
            notes += [note] if note else []
        plan = plan_scan(reference, targets, tiles, chunks, models, notes, demo_models)
    check_some_base_ranked(plan)
    for note in plan["notes"]:
        log.warning("%s", note)
    atomic.write_json(plan, out)
    text = describe_plan(plan, f"scan plan: {title}")
    if report:
        atomic.write_text(text, report)
    return text


def check_some_base_ranked(plan: Mapping[str, Any]) -> None:
    """Refuse a plan none of whose bases would be scored with `min_context` bp of left context
    in its tile (a base's `context_bp`): its calibration would have no SNV to rank
    (`calibrate`) and stop after every model job of the scan had run. Read from the plan's own
    tiles, stopping at the first tile with such a base."""
    tiles = TileSettings(plan["tile_bp"], plan["min_context"])
    most = 0  # the largest left context of any base, once every tile is read
    for index in range(len(plan["chunks"])):
        for piece in chunk_pieces(plan, index):
            for tile in piece.tiles(tiles):
                most = max(most, tile.score_end - 1 - tile.start)
                if most >= tiles.min_context:
                    return
    raise InputError(
        plan["reference"],
        f"no SNV of this scan would be ranked (get a PHRED): a base needs min_context "
        f"({tiles.min_context:,} bp) of ACGT left context in its tile, and the scan's bases "
        f"get at most {most:,} (its regions lie near contig starts or assembly gaps); the "
        "calibration would stop after the scan's model jobs. Lower the scan's min_context, or "
        "scan regions further from contig starts and gaps",
    )


def scan_plan_chunk(
    model: ModelSettings, plan_path: str, chunk: int, reference_path: str, out: str, stats_out: str
) -> None:
    """One chunk of a scan plan, streamed to Parquet row groups at `out`; its bases, wall and
    forward-pass seconds at `stats_out`."""
    from carbon_vep.model.job import load_engine

    plan = read_json(plan_path)
    tiles = TileSettings(plan["tile_bp"], plan["min_context"])
    pieces = chunk_pieces(plan, chunk)  # looked up before the model loads
    engine = load_engine(model, f"{plan_path} chunk {chunk}")
    from carbon_vep.scan.tiles import scan_chunk_file

    with open_reference(reference_path) as reference:
        stats = scan_chunk_file(engine, reference, pieces, tiles, out, f"chunk {chunk}")
    atomic.write_json({"chunk": chunk, **stats}, stats_out)
    log.info("chunk %d: %d bases in %.1f s", chunk, stats["bases"], stats["wall_s"])


@dataclass(frozen=True)
class FileJob:
    """A job on one output file of a scan: the plan, the file's name in its `files`, the scan's
    reference (the SNV contexts) and provenance."""

    plan: str
    name: str
    reference: str
    provenance: Mapping[str, Any]


def merge_file(plan: str, name: str, chunks: Paths, out_parquet: str) -> None:
    """The rows of the plan's output file `name` in the chunks -> its Parquet file (counted for
    the calibration from that file: count_file)."""
    entry = plan_file(read_json(plan), name)
    stats = merge_plan_file(entry, chunks, out_parquet)
    log.info("merged %s: %s", name, stats)


def count_file(
    parquet: str,
    reference_path: str,
    provenance: Mapping[str, Any],
    decimals: int,
    calibration: CalibrationSettings,
    out_counts: str,
) -> None:
    """An output file's Parquet (merge-scan) -> its SNVs counted for the calibration, at the
    printed precision `decimals`, the neutral set from `calibration`."""
    meta = counts_meta(provenance, decimals, calibration.neutral_regions)
    with open_reference(reference_path) as reference:
        neutral = neutral_regions(calibration.neutral_regions, reference.lengths)
        stats = count_positions(parquet, out_counts, meta, reference, neutral)
    log.info("counted %s: %s", parquet, stats)


def calibrate(counts_paths: Paths, settings: CalibrationSettings, out: str) -> None:
    """A scan's rank scales (PHRED) and context means from every output file's counts, into the
    calibration folder `out`."""
    counts, neutral, meta = read_counts(list(counts_paths))
    folder = Path(counts_paths[0]).parent if counts_paths else Path(out)
    if counts.is_empty():  # nothing to rank: say why, not the context means' complaint below
        raise InputError(
            folder,
            f"no SNV to rank: none of the scan's {meta.get(UNRANKED, 0):,} scored SNVs had its "
            f"min_context ({min_context_of(meta):,} bp) of left context (every contig and every "
            "ACGT run between gaps is shorter; docs/calibration.md); lower the scan's min_context",
        )
    if neutral.is_empty():
        raise InputError(
            folder,
            f"the neutral set ({meta.get('neutral')}) holds none of the scan's SNVs with a PHRED "
            "(those with min_context of left context): no context means; name regions the scan "
            "covers in neutral_regions",
        )
    calibration = Calibration.build(counts, neutral, meta, settings.context_min_count)
    calibration.write(out)
    log.info("calibrated %s SNVs: %s", f"{calibration.raw.total:,}", calibration.thresholds())


def write_file_tsv(
    job: FileJob,
    parquet: str,
    calibration_dir: str,
    settings: CalibrationSettings,
    out_tsv: str,
    index: bool = True,
) -> None:
    """The file's tabix TSV from its Parquet: score and PHRED of every SNV, with the calibration
    checked to be this scan's (`index=False`: without its index, `write_tsv`)."""
    entry = plan_file(read_json(job.plan), job.name)
    calibration = Calibration.read(calibration_dir)
    calibration.check_fingerprint(job.provenance, calibration_dir)
    with open_reference(job.reference) as reference:
        stats = write_tsv(
            parquet,
            entry["contigs"],
            out_tsv,
            job.provenance,
            calibration,
            reference,
            settings.tsv_calibrated,
            index,
        )
    log.info("wrote %s: %s", out_tsv, stats)


@dataclass(frozen=True)
class ScanParts:
    """What a scan's jobs wrote: the plan, each chunk's stats (JSON), each output file's Parquet
    and TSV, and the calibration folder."""

    plan: str
    chunk_stats: Paths
    parquets: Paths
    tsvs: Paths
    calibration: str


def write_summary(
    parts: ScanParts,
    title: str,
    provenance: Mapping[str, Any],
    out_json: str,
    out_md: str,
    out_record: str | None,
) -> None:
    """A scan's final summary, as JSON and Markdown, and its record (`scan.json`, what annotate
    reads) when asked."""
    plan = read_json(parts.plan)
    stats = [read_json(p) for p in parts.chunk_stats]
    calibration = Calibration.read(parts.calibration)
    summary = summarize(plan, stats, parts.parquets, parts.tsvs, calibration)
    if out_record:
        atomic.write_json(scan_record(plan, provenance), out_record)
    atomic.write_json(summary, out_json)
    plan_text = describe_plan(plan, f"scan plan: {title}")
    text = summary_markdown(summary, plan_text, contexts_markdown(calibration))
    atomic.write_text(text, out_md)


def concat_scan_tsv(scan_dir: str, out: str) -> None:
    """Every tabix TSV of a scan in one file, reference order, one header."""
    if not out.endswith(".gz"):
        raise InputError(out, "the output is bgzipped and tabix-indexed: name it *.tsv.gz")
    stats = concat_tsv(scan_dir, out)
    log.info("wrote %s: %s", out, stats)
