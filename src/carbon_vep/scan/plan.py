"""Plan a scan: which job scores each base of its targets, and which file holds it (no torch).

`plan_scan` packs the targets' ACGT runs (scan.targets: N runs of assembly gaps and other
non-ACGT bases skipped and counted, never tiled) into chunks of at most `chunk_bp` scored
bases, one GPU job each, in reference order. Every ACGT base of the targets lands in exactly
one chunk.

It also decides the output files (`output_files`): a contig with at least `group_bp` scored
bases has its own Parquet file and tabix TSV; smaller ones (unplaced scaffolds, decoys, HLA
alleles, a draft assembly's contigs) share files, consecutive in reference order, up to
`group_bp` scored bases a file, so that a genome of thousands of contigs is merged by a few
dozen jobs. File names are the contig names encoded (`genome.contigs.encode_name`: `@XX` for
each byte other than letters, digits and `._-`); a file of several contigs is named
`<first contig>+<how many more>`; names that differ in case alone (ctg1, CTG1: one file on a
case-insensitive file system) get `+c<digest>` (output_files).

The plan also carries the estimates printed before any model job: SNVs, jobs, GPU-hours per GPU
class for each model (arithmetic, docs/performance.md#the-recipes-at-the-ceiling: FLOPs per
token of Carbon's shapes at an assumed 50% of each GPU's bf16 peak) and output bytes (per-SNV sizes
measured on the demo genome, docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from carbon_vep import markdown
from carbon_vep.atomic import TBI_MAX_POSITION, index_suffix
from carbon_vep.config.gpus import (
    ASSUMED_EFFICIENCY,
    GPU_CLASSES,
    MODEL_SHAPES,
    attention_flops,
    body_flops,
    model_shape,
    output_flops,
)
from carbon_vep.config.stages import ScanChunkSettings, TileSettings
from carbon_vep.errors import InputError
from carbon_vep.genome.contigs import encode_name
from carbon_vep.genome.reference import Reference
from carbon_vep.model.context import check_models_context, positions_needed
from carbon_vep.scan.targets import K, Piece, target_pieces

# ---- the cost model (estimates: docs/performance.md#cost-per-token) -------------------------
# FLOPs a token from Carbon's shapes (config.gpus): the body, the 4,096 DNA rows of the output
# layer, and attention over the tokens before it (half a tile's on average)
DNA_ROWS = 4**K
GPU_PEAK_TFLOPS = {name: gpu.bf16_tflops for name, gpu in GPU_CLASSES.items()}  # bf16, dense
# bytes per SNV of the outputs (measured on the demo genome with the demo model, tsv_decimals 2;
# docs/benchmarks.md): the Parquet dataset of per-base marginals, the tabix TSV (+ index)
BYTES_PER_SNV = {"parquet": 2.6, "tabix_tsv": 3.2}


def scan_flops(bases: float, tiles: TileSettings, dims: Mapping[str, int]) -> float:
    """Matmul FLOPs of scanning `bases` with this tiling, for a model of shape `dims`."""
    window = tiles.tile_bp - tiles.tile_bp % K
    stride = max(K, window - tiles.min_context)
    tokens = bases / K * window / stride  # every scored base is read window/stride times
    per_token = body_flops(dims) + output_flops(dims, DNA_ROWS)
    per_token += attention_flops(dims) * window / K / 2
    return tokens * per_token


def gpu_hours(bases: int, tiles: TileSettings, shape: str, gpu: str) -> float:
    """Estimated GPU-hours to scan `bases` with this tiling for a model of `shape` (a
    MODEL_SHAPES name; arithmetic, not a measurement)."""
    flops = scan_flops(bases, tiles, MODEL_SHAPES[shape])
    return flops / (GPU_PEAK_TFLOPS[gpu] * 1e12 * ASSUMED_EFFICIENCY) / 3600


def plan_scan(
    reference: Reference,
    targets: Mapping[str, list[tuple[int, int]]],
    tiles: TileSettings,
    chunks: ScanChunkSettings,
    models: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
    demo_models: Collection[str] = (),
) -> dict[str, Any]:
    """The scan's plan: chunks of pieces (JSON-ready), per-contig counts, totals, estimates
    for each of `models` (key: path; those in `demo_models` the run builds, build_demo).
    A tile longer than a model's context is refused here (check_tile_context), before any
    model job; `notes` (the models not checked, the neutral BED's contigs ignored) are kept
    in the plan and printed with it."""
    tiles.check()
    notes = [*check_tile_context(tiles, models or {}, demo_models), *notes]
    plan_chunks: list[list[Piece]] = [[]]
    filled = 0
    pieces, per_contig = target_pieces(reference, targets)
    for piece in pieces:
        start = piece.start
        while start < piece.end:
            if filled >= chunks.chunk_bp:
                plan_chunks.append([])
                filled = 0
            end = min(piece.end, start + chunks.chunk_bp - filled)
            plan_chunks[-1].append(
                Piece(piece.chrom, start, end, piece.seg_start, piece.seg_end, piece.start)
            )
            filled += end - start
            start = end
    for index, chunk in enumerate(plan_chunks):
        for chrom in dict.fromkeys(p.chrom for p in chunk):
            per_contig[chrom].chunks.append(index)
    totals = {
        name: sum(getattr(c, name) for c in per_contig.values())
        for name in ("targeted_bp", "scored_bp", "skipped_non_acgt_bp", "n_runs", "unscorable_bp")
    }
    totals["snvs"] = 3 * totals["scored_bp"]
    totals["chunks"] = len(plan_chunks)
    totals["tiles"] = sum(len(p.tiles(tiles)) for chunk in plan_chunks for p in chunk)
    contigs = {c: asdict(n) for c, n in per_contig.items() if n.scored_bp or n.targeted_bp}
    files = output_files({c: n.scored_bp for c, n in per_contig.items()}, chunks.group_bp)
    for entry in files:
        entry["chunks"] = sorted({i for c in entry["contigs"] for i in per_contig[c].chunks})
        # the TSV's index: a .tbi, or a .csi where a contig passes 2^29 bp (write_tsv decides
        # the same from the reference; the workflow's index_scan_tsv writes the one named here)
        longest = max(per_contig[c].length for c in entry["contigs"])
        entry["index"] = index_suffix(longest).lstrip(".")
        for contig in entry["contigs"]:
            contigs[contig]["file"] = entry["name"]
    totals["files"] = len(files)
    return {
        "reference": str(reference.path),
        "tile_bp": tiles.tile_bp,
        "min_context": tiles.min_context,
        "chunk_bp": chunks.chunk_bp,
        "group_bp": chunks.group_bp,
        "totals": totals,
        "contigs": contigs,
        "files": files,
        "chunks": [[asdict(p) for p in chunk] for chunk in plan_chunks],
        "estimates": estimates(totals, tiles, models or {}, demo_models),
        "notes": notes,
    }


def tile_tokens(tiles: TileSettings) -> int:
    """Positions a full tile takes: its whole 6-mers and the `<dna>` prefix."""
    return positions_needed(tiles.tile_bp, K)


def check_tile_context(
    tiles: TileSettings, models: Mapping[str, str], demo_models: Collection[str] = ()
) -> list[str]:
    """Refuse a tile longer than a model's context (model.context, as the engine refuses it at
    load); the models it cannot check yet as notes (their chunk jobs check when they load
    them)."""
    return check_models_context(
        tiles.tile_bp, K, models, demo_models, what="scan tiles", setting="tile_bp"
    )


def chunk_pieces(plan: Mapping[str, Any], index: int) -> list[Piece]:
    return [Piece(**p) for p in plan["chunks"][index]]


# ---- output files ------------------------------------------------------------------------------
MAX_STEM = 200  # characters of an encoded name in a file name (file systems allow 255 bytes)


def output_files(scored_bp: Mapping[str, int], group_bp: int) -> list[dict[str, Any]]:
    """The merge's output files, in reference order: a contig with at least `group_bp` scored
    bases alone; runs of smaller contigs packed together up to `group_bp` scored bases a file
    (a contig is never split). Contigs without a scored base get no file."""
    groups: list[list[str]] = []
    pending: list[str] = []
    held = 0
    for contig, bases in scored_bp.items():
        if not bases:
            continue
        if bases >= group_bp or (pending and held + bases > group_bp):
            groups += [pending] if pending else []
            pending, held = [], 0
        if bases >= group_bp:
            groups.append([contig])
        else:
            pending.append(contig)
            held += bases
    groups += [pending] if pending else []
    files = [
        {"name": file_stem(g), "contigs": g, "scored_bp": sum(scored_bp[c] for c in g)}
        for g in groups
    ]
    # names that differ in case alone (contigs ctg1 and CTG1) are one file on a case-insensitive
    # file system (macOS, Windows): those, and only those, get `+c` and 8 hex digits of the
    # SHA-1 of their contigs' names (`+` never occurs in an encoded name)
    folded = Counter(f["name"].lower() for f in files)
    for entry in files:
        if folded[entry["name"].lower()] > 1:
            digest = hashlib.sha1("\n".join(entry["contigs"]).encode()).hexdigest()[:8]
            entry["name"] += f"+c{digest}"
    names = [f["name"].lower() for f in files]
    if len(set(names)) != len(names):  # only through a hash collision
        raise InputError("scan plan", f"two output files would share a name: {names}")
    return files


def file_stem(contigs: Sequence[str]) -> str:
    """The file-name stem of a file holding `contigs`: the first one's name encoded
    (`genome.contigs.encode_name`), then `+N` when N more contigs share the file. `+` never
    occurs in an encoded name, so a shared file's name differs from every contig's; a name
    longer than MAX_STEM is cut and ends `+h<12 hex digits of its SHA-1>`."""
    stem = encode_name(contigs[0])
    if len(stem) > MAX_STEM:
        digest = hashlib.sha1(contigs[0].encode()).hexdigest()[:12]
        stem = re.sub(r"@[0-9A-F]?$", "", stem[: MAX_STEM - 20]) + f"+h{digest}"
    return stem if len(contigs) == 1 else f"{stem}+{len(contigs) - 1}"


def plan_file(plan: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The plan's output file called `name` (its contigs, scored bases, chunks)."""
    for entry in plan["files"]:
        if entry["name"] == name:
            return entry
    raise InputError("scan plan", f"no output file {name!r} in the plan")


def estimates(
    totals: Mapping[str, int],
    tiles: TileSettings,
    models: Mapping[str, str],
    demo_models: Collection[str] = (),
) -> dict[str, Any]:
    """GPU-hours per GPU class of each model (key: path) at its shape (model_shape; the demo
    model's for those in `demo_models`), and the output bytes."""
    bases, snvs = totals["scored_bp"], totals["snvs"]
    shapes = {key: model_shape(path, key in demo_models) for key, path in models.items()}
    hours = {
        key: {
            "shape": shape,
            "gpu_hours": {
                gpu: round(gpu_hours(bases, tiles, shape, gpu), 3) for gpu in GPU_PEAK_TFLOPS
            },
        }
        for key, shape in shapes.items()
    }
    out_bytes = {name: round(per * snvs) for name, per in BYTES_PER_SNV.items()}
    return {"models": hours, "output_bytes": out_bytes, "assumed_efficiency": ASSUMED_EFFICIENCY}


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000:
            return f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} PB"


def describe_plan(plan: Mapping[str, Any], title: str = "scan plan") -> str:
    """The plan as Markdown: what is scored, how many jobs, estimated GPU-hours and bytes."""
    t = plan["totals"]
    lines = [
        f"## {title}",
        "",
        f"- reference: `{plan['reference']}`; tiles of {plan['tile_bp']:,} bp, "
        f"min_context {plan['min_context']:,} bp, chunk_bp {plan['chunk_bp']:,}",
        f"- bases scored: {t['scored_bp']:,} of {t['targeted_bp']:,} targeted "
        f"({len(plan['contigs'])} contigs); SNVs: {t['snvs']:,}",
        f"- skipped as N / non-ACGT: {t['skipped_non_acgt_bp']:,} bp in {t['n_runs']:,} runs; "
        f"ACGT bases in runs shorter than one 6-mer (not scoreable): {t['unscorable_bp']:,}",
        f"- jobs (chunks): {t['chunks']:,}; tiles (forward passes): {t['tiles']:,}",
        f"- output files: {t['files']:,} Parquet + {t['files']:,} tabix TSV (merge jobs: "
        f"{t['files']:,}; contigs under {plan['group_bp']:,} scored bases share files)",
    ]
    csi = [f["name"] for f in plan["files"] if f.get("index") == "csi"]
    if csi:
        lines.append(
            f"- tabix index: .csi for {len(csi):,} file(s) with a contig over "
            f"{TBI_MAX_POSITION:,} bp, which a .tbi cannot hold ({', '.join(csi[:5])}"
            f"{', ...' if len(csi) > 5 else ''}); .tbi for the others"
        )
    lines += [f"- note: {note}" for note in plan.get("notes", [])]
    est = plan["estimates"]
    out = est["output_bytes"]
    lines.append(
        f"- output size (estimate, bytes/SNV measured on the demo genome): Parquet dataset "
        f"{_size(out['parquet'])}, tabix TSV {_size(out['tabix_tsv'])}"
    )
    if est["models"]:
        gpus = list(GPU_PEAK_TFLOPS)
        lines += [
            "",
            f"Estimated GPU-hours (arithmetic at {est['assumed_efficiency']:.0%} of bf16 peak, "
            "docs/performance.md; not measured):",
            "",
        ]
        rows = [
            [key, row["shape"], *(f"{row['gpu_hours'][g]:,.2f}" for g in gpus)]
            for key, row in est["models"].items()
        ]
        lines.append(markdown.table(["model", "shape", *gpus], rows))
    return "\n".join(lines) + "\n"


def iter_pieces(plan: Mapping[str, Any]) -> Iterable[Piece]:
    for index in range(len(plan["chunks"])):
        yield from chunk_pieces(plan, index)
