"""Plan a scan: which bases of the genome are scored, and which job scores each (no torch).

`resolve_targets` turns a scan's `regions` (`all`, contig names and CHROM:START-END, or a BED
file) into merged 0-based intervals on reference contigs (names aliased as for panels).
`plan_scan` reads the targeted sequence once, splits it into runs of ACGT bases (anything else,
N runs of assembly gaps above all, is skipped and counted, never tiled: the first base after a
gap gets its context back to the gap's end, as at a contig start), and packs the runs into
chunks of at most `chunk_bp` scored bases, one GPU job each, in reference order. Every ACGT base
of the targets lands in exactly one chunk; runs shorter than one 6-mer cannot be scored and are
counted as such.

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

import gzip
import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from carbon_vep import markdown
from carbon_vep.atomic import TBI_MAX_POSITION, index_suffix
from carbon_vep.config.fields import describe
from carbon_vep.config.gpus import (
    ASSUMED_EFFICIENCY,
    CARBON_SHAPES,
    GPU_CLASSES,
    attention_flops,
    body_flops,
    model_shape,
    output_flops,
)
from carbon_vep.config.stages import ScanChunkSettings, TileSettings
from carbon_vep.errors import ContextTooLongError, InputError
from carbon_vep.genome.contigs import alias_candidates, encode_name
from carbon_vep.genome.reference import Reference
from carbon_vep.scan.tiling import parse_region, tile_segment
from carbon_vep.sources.hub import local_positions

K = 6
_ACGT = np.zeros(256, dtype=bool)
_ACGT[list(b"ACGTacgt")] = True
_REGION = re.compile(r"^.+:[0-9,]+-[0-9,]+$")  # the contig name may hold `:` (HLA alleles)

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
    """Estimated GPU-hours to scan `bases` with this tiling (arithmetic, not a measurement)."""
    flops = scan_flops(bases, tiles, CARBON_SHAPES[shape])
    return flops / (GPU_PEAK_TFLOPS[gpu] * 1e12 * ASSUMED_EFFICIENCY) / 3600


# ---- targets -------------------------------------------------------------------------------
def _reference_contig(name: str, contigs: Sequence[str], where: str) -> str:
    if name in contigs:
        return name
    hits = alias_candidates(name, contigs)
    if len(hits) != 1:
        problem = "matches several reference contigs" if hits else "is not in the reference"
        raise InputError(where, f"contig {name!r} {problem} (under any alias)")
    return hits[0]


def _bed_intervals(path: Path) -> Iterator[tuple[str, int, int, str]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip() or line.startswith(("#", "track", "browser")):
                continue
            fields = line.rstrip("\n").split("\t")
            where = f"{path}:line {number}"
            if len(fields) < 3:
                raise InputError(where, "a BED line needs chrom, start and end (tab-separated)")
            try:
                start, end = int(fields[1]), int(fields[2])
            except ValueError:
                bad = f"start/end {fields[1]!r}, {fields[2]!r} not integers"
                raise InputError(where, bad) from None
            if start < 0 or end < start:
                raise InputError(where, f"interval {start}-{end} is negative or reversed")
            yield fields[0], start, end, where


def resolve_targets(
    regions: Sequence[str],
    lengths: Mapping[str, int],
    base_dir: Path | None = None,
    absent: dict[str, int] | None = None,
) -> dict[str, list[tuple[int, int]]]:
    """Merged 0-based half-open intervals per reference contig, in reference order. A contig
    that is not in the reference (under any alias) is refused, or with `absent` counted there
    (name -> intervals) and ignored."""
    contigs = list(lengths)
    raw: list[tuple[str, int, int, str]] = []
    for item in regions:
        path = Path(item) if base_dir is None else base_dir / item
        if item == "all":
            raw += [(c, 0, n, "regions: all") for c, n in lengths.items()]
        elif item in lengths:  # a whole contig, named exactly (before reading it as a region)
            raw.append((item, 0, -1, f"region {item}"))
        elif _REGION.match(item) and not path.is_file():
            chrom, start, end = parse_region(item, "regions (--regions)")
            raw.append((chrom, start, end, f"region {item}"))
        elif item.lower().endswith((".bed", ".bed.gz")) or path.is_file():
            if not path.is_file():
                raise InputError(str(path), "BED file of the scan's regions not found")
            raw += list(_bed_intervals(path))
        else:
            raw.append((item, 0, -1, f"region {item}"))  # a whole contig, by name
    merged: dict[str, list[tuple[int, int]]] = {}
    for chrom, start, end, where in raw:
        if absent is not None and chrom not in lengths and not alias_candidates(chrom, contigs):
            absent[chrom] = absent.get(chrom, 0) + 1
            continue
        contig = _reference_contig(chrom, contigs, where)
        length = lengths[contig]
        end = length if end == -1 else end
        if end > length:
            raise InputError(where, f"end {end} is past the end of {contig} ({length} bp)")
        merged.setdefault(contig, []).append((start, end))
    out = {}
    for contig in contigs:  # reference order; overlapping and adjacent intervals merged
        spans: list[tuple[int, int]] = []
        for start, end in sorted(merged.get(contig, [])):
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], end))
            elif end > start:
                spans.append((start, end))
        if spans:
            out[contig] = spans
    return out


def resolve_neutral(bed: str, lengths: Mapping[str, int]) -> tuple[dict, str | None]:
    """A scan's neutral_regions BED on the reference's contigs, and a note naming the contigs
    it holds that the reference has not (None if none). A UCSC BED routinely holds
    _alt/_fix/_random contigs a no-alt analysis set lacks: no SNV of the scan lies on them, so
    they are ignored, counted and named, not refused. A BED none of whose contigs is in the
    reference (another build's or naming's) is refused, as are bad lines and intervals past a
    contig's end."""
    absent: dict[str, int] = {}
    targets = resolve_targets([bed], lengths, absent=absent)
    if not targets:
        names = ", ".join(list(absent)[:5]) or "none"
        raise InputError(
            bed,
            f"neutral_regions: no interval lies on a contig of the reference (its contigs: "
            f"{names}; the reference's: {', '.join(list(lengths)[:5])}): a BED of another build?",
        )
    if not absent:
        return targets, None
    shown = ", ".join(list(absent)[:8])
    shown += f" and {len(absent) - 8:,} more" if len(absent) > 8 else ""
    note = (
        f"neutral_regions {bed}: {sum(absent.values()):,} intervals on {len(absent):,} contigs "
        f"not in the reference ignored ({shown})"
    )
    return targets, note


# ---- ACGT runs and chunks ------------------------------------------------------------------
def acgt_runs(seq: str | bytes) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of ACGT (either case) in `seq`."""
    data = seq.encode("ascii") if isinstance(seq, str) else seq
    ok = _ACGT[np.frombuffer(data, dtype=np.uint8)]
    edges = np.flatnonzero(np.diff(np.concatenate(([False], ok, [False])).astype(np.int8)))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


@dataclass(frozen=True)
class Piece:
    """Bases [start, end) of `chrom`, inside the ACGT run [seg_start, seg_end), tiled from
    `anchor`: where the scan's target begins in that run (None: `start`). A chunk's piece of a
    longer target keeps the target's anchor, so its tiles do not depend on chunk_bp."""

    chrom: str
    start: int
    end: int
    seg_start: int
    seg_end: int
    anchor: int | None = None

    def tiles(self, tiles: TileSettings):
        return tile_segment(
            (self.seg_start, self.seg_end),
            self.start,
            self.end,
            tiles.tile_bp,
            tiles.min_context,
            K,
            anchor=self.anchor,
        )


@dataclass
class ContigCounts:
    length: int = 0  # the contig's length in the reference
    targeted_bp: int = 0  # bases of the targets on this contig
    scored_bp: int = 0  # ACGT bases in runs of >= 6: scored, 3 SNVs each
    skipped_non_acgt_bp: int = 0  # N (assembly gaps) and other non-ACGT bases: not tiled
    n_runs: int = 0  # runs of non-ACGT bases
    unscorable_bp: int = 0  # ACGT bases in runs shorter than one 6-mer
    chunks: list[int] = field(default_factory=list)


def _contig_runs(reference: Reference, chrom: str, spans, counts: ContigCounts):
    """ACGT runs of the contig clipped to the target spans, as Pieces."""
    length = reference.lengths[chrom]
    counts.length = length
    seq = reference.fetch(chrom, 0, length)
    runs = acgt_runs(seq)
    for start, end in spans:
        counts.targeted_bp += end - start
        inside = [(max(a, start), min(b, end), a, b) for a, b in runs if a < end and b > start]
        acgt = sum(e - s for s, e, _, _ in inside)
        counts.skipped_non_acgt_bp += (end - start) - acgt
        edges = [start, *(x for s, e, _, _ in inside for x in (s, e)), end]
        counts.n_runs += sum(a < b for a, b in zip(edges[::2], edges[1::2], strict=True))
        for s, e, a, b in inside:
            if b - a < K:
                counts.unscorable_bp += e - s
                continue
            counts.scored_bp += e - s
            yield Piece(chrom, s, e, a, b)


def target_pieces(
    reference: Reference, targets: Mapping[str, list[tuple[int, int]]]
) -> tuple[list[Piece], dict[str, ContigCounts]]:
    """The scored pieces of the targets, one per ACGT run of at least one 6-mer (clipped to
    the targets), and each contig's counts: the one planning of what a scan scores, for the
    workflow's plan and the one-region `carbon-vep scan` alike. A target without a scorable
    base is refused."""
    pieces: list[Piece] = []
    per_contig: dict[str, ContigCounts] = {}
    for chrom, spans in targets.items():
        counts = per_contig.setdefault(chrom, ContigCounts())
        pieces += _contig_runs(reference, chrom, spans, counts)
    if not pieces:
        spans = [f"{c}:{s + 1:,}-{e:,}" for c, held in targets.items() for s, e in held]
        what = ", ".join(spans[:3]) + (f" and {len(spans) - 3:,} more" if len(spans) > 3 else "")
        skipped = sum(c.skipped_non_acgt_bp for c in per_contig.values())
        short = sum(c.unscorable_bp for c in per_contig.values())
        raise InputError(
            str(reference.path),
            f"nothing to scan: the targets ({what}) hold no run of at least 6 ACGT bases "
            f"({skipped:,} bp N / non-ACGT, {short:,} ACGT bp in runs shorter than one 6-mer)",
        )
    return pieces, per_contig


def skipped_note(per_contig: Mapping[str, ContigCounts]) -> str | None:
    """What the targets hold that is not scored (N and other non-ACGT bases, ACGT runs shorter
    than one 6-mer), as one line, or None."""
    skipped = sum(c.skipped_non_acgt_bp for c in per_contig.values())
    runs = sum(c.n_runs for c in per_contig.values())
    short = sum(c.unscorable_bp for c in per_contig.values())
    if not skipped and not short:
        return None
    return (
        f"not scored: {skipped:,} N / non-ACGT bases in {runs:,} runs (never fed to the model; "
        f"context restarts after each), {short:,} ACGT bases in runs shorter than one 6-mer"
    )


def plan_scan(
    reference: Reference,
    targets: Mapping[str, list[tuple[int, int]]],
    tiles: TileSettings,
    chunks: ScanChunkSettings,
    models: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The scan's plan: chunks of pieces (JSON-ready), per-contig counts, totals, estimates.
    A tile longer than a model's context is refused here (check_tile_context), before any
    model job; `notes` (the models not checked, the neutral BED's contigs ignored) are kept
    in the plan and printed with it."""
    tiles.check()
    notes = [*check_tile_context(tiles, models or {}), *notes]
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
        # the same from the reference)
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
        "estimates": estimates(totals, tiles, models or {}),
        "notes": notes,
    }


def tile_tokens(tiles: TileSettings) -> int:
    """Positions a full tile takes: its whole 6-mers and the `<dna>` prefix."""
    return (tiles.tile_bp - tiles.tile_bp % K) // K + 1


def check_tile_context(tiles: TileSettings, models: Mapping[str, str]) -> list[str]:
    """Refuse a tile longer than a model's context (ContextTooLongError, as a VEP window is),
    from the positions a local checkpoint's config.json declares (no torch); the models it
    cannot check yet (a Hub id, a model an earlier job builds) as notes: their chunk jobs
    check when they load them."""
    tokens, notes = tile_tokens(tiles), []
    tile_bp = fields(TileSettings)[0]
    for key, path in models.items():
        limit, why = local_positions(path)
        if limit is None:
            notes.append(f"model {key}: tile_bp not checked against its context here: {why}")
        elif tokens > limit:
            raise ContextTooLongError(
                f"model {key} ({path}): tiles of {describe(tile_bp)} {tiles.tile_bp:,} need "
                f"{tokens:,} positions but the model supports {limit:,} (max_position_embeddings "
                f"in its config.json); lower tile_bp to at most {(limit - 1) * K:,} "
                "(and min_context below it)"
            )
    return notes


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


def estimates(totals: Mapping[str, int], tiles: TileSettings, models: Mapping[str, str]):
    bases, snvs = totals["scored_bp"], totals["snvs"]
    hours = {
        key: {
            "shape": model_shape(path),
            "gpu_hours": {
                gpu: round(gpu_hours(bases, tiles, model_shape(path), gpu), 3)
                for gpu in GPU_PEAK_TFLOPS
            },
        }
        for key, path in models.items()
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
