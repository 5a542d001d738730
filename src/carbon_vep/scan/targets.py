"""What a scan scores: its targets and their ACGT runs (no torch).

`resolve_targets` turns a scan's `regions` (`all`, contig names and CHROM:START-END, or a BED
file) into merged 0-based intervals on reference contigs (names aliased as for panels);
`resolve_neutral` does the same for the calibration's neutral_regions BED. `target_pieces`
reads each targeted contig once, a block at a time, and splits it into runs of ACGT bases
(anything else, N runs of assembly gaps above all, is skipped and counted, never tiled: the
first base after a gap gets its context back to the gap's end, as at a contig start): the one
planning of what a scan scores, for the workflow's plan (scan.plan) and the one-region
`carbon-vep scan` alike. Runs shorter than one 6-mer cannot be scored and are counted as such.
"""

from __future__ import annotations

import bisect
import gzip
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from carbon_vep.config.stages import TileSettings
from carbon_vep.errors import InputError
from carbon_vep.genome.contigs import ContigAliases
from carbon_vep.genome.reference import Reference
from carbon_vep.scan.tiling import parse_region, tile_segment

K = 6
RUN_BLOCK_BP = 16_000_000  # bases of a contig read at a time for its ACGT runs
_ACGT = np.zeros(256, dtype=bool)
_ACGT[list(b"ACGTacgt")] = True
_REGION = re.compile(r"^.+:[0-9,]+-[0-9,]+$")  # the contig name may hold `:` (HLA alleles)


# ---- targets -------------------------------------------------------------------------------
def _reference_contig(
    name: str, aliases: ContigAliases, where: str, may_be_absent: bool
) -> str | None:
    """The reference contig `name` means (None: none, where `may_be_absent`)."""
    hits = aliases.matches(name)
    if len(hits) == 1:
        return hits[0]
    if not hits and may_be_absent:
        return None
    problem = "matches several reference contigs" if hits else "is not in the reference"
    raise InputError(where, f"contig {name!r} {problem} (under any alias)")


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
    aliases = ContigAliases(contigs)
    resolved: dict[str, str | None] = {}  # each name once: a BED repeats it on every line
    for chrom, start, end, where in raw:
        if chrom not in resolved:
            resolved[chrom] = _reference_contig(chrom, aliases, where, absent is not None)
        contig = resolved[chrom]
        if contig is None:
            absent[chrom] = absent.get(chrom, 0) + 1
            continue
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


def describe_targets(targets: Mapping[str, list[tuple[int, int]]]) -> str:
    """The first three target intervals, 1-based inclusive (`chr1:1,001-2,000`), and how many
    more: for messages."""
    spans = [f"{c}:{s + 1:,}-{e:,}" for c, held in targets.items() for s, e in held]
    return ", ".join(spans[:3]) + (f" and {len(spans) - 3:,} more" if len(spans) > 3 else "")


def check_neutral_overlaps(
    bed: str,
    neutral: Mapping[str, list[tuple[int, int]]],
    targets: Mapping[str, list[tuple[int, int]]],
) -> None:
    """Refuse a neutral_regions BED none of whose intervals overlaps the scan's targets (both
    merged, sorted 0-based half-open, as resolve_targets gives them): its calibration would
    find no neutral SNV and stop after every model job of the scan has run."""
    for contig, spans in targets.items():
        held = neutral.get(contig, [])
        starts = [start for start, _ in held]
        for start, end in spans:
            i = bisect.bisect_left(starts, end) - 1  # the last interval starting before `end`
            if i >= 0 and held[i][1] > start:
                return
    raise InputError(
        bed,
        f"neutral_regions: none of its intervals overlaps the scan's regions "
        f"({describe_targets(targets)}), so the calibration would find no neutral SNV and stop "
        "after the scan's model jobs; name regions the scan covers, or leave neutral_regions "
        "unset (every scanned SNV)",
    )


# ---- ACGT runs and chunks ------------------------------------------------------------------
def acgt_runs(seq: str | bytes) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of ACGT (either case) in `seq`."""
    data = seq.encode("ascii") if isinstance(seq, str) else seq
    ok = _ACGT[np.frombuffer(data, dtype=np.uint8)]
    edges = np.flatnonzero(np.diff(np.concatenate(([False], ok, [False])).astype(np.int8)))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def contig_acgt_runs(
    reference: Reference, chrom: str, block_bp: int = RUN_BLOCK_BP
) -> list[tuple[int, int]]:
    """`acgt_runs` of a whole contig, read `block_bp` at a time (a run across a block's edge
    joined): the plan's memory is the blocks', not the largest contig's (chr1 whole took
    ~1.3 GB: its text, its bytes and numpy's masks and edges, ~5 bytes a base)."""
    runs: list[tuple[int, int]] = []
    length = reference.lengths[chrom]
    for lo in range(0, length, block_bp):
        for a, b in acgt_runs(reference.fetch(chrom, lo, min(lo + block_bp, length))):
            if runs and runs[-1][1] == lo + a:
                runs[-1] = (runs[-1][0], lo + b)
            else:
                runs.append((lo + a, lo + b))
    return runs


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
    runs = contig_acgt_runs(reference, chrom)
    run_ends = [b for _, b in runs]  # runs are disjoint and in order: so are their ends
    for start, end in spans:
        counts.targeted_bp += end - start
        # the runs overlapping the span, from the first ending after its start: bisected, as an
        # exome's BED on a draft assembly has thousands of spans and runs a contig
        inside, i = [], bisect.bisect_right(run_ends, start)
        while i < len(runs) and runs[i][0] < end:
            a, b = runs[i]
            inside.append((max(a, start), min(b, end), a, b))
            i += 1
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
        skipped = sum(c.skipped_non_acgt_bp for c in per_contig.values())
        short = sum(c.unscorable_bp for c in per_contig.values())
        raise InputError(
            str(reference.path),
            f"nothing to scan: the targets ({describe_targets(targets)}) hold no run of at least 6 "
            f"ACGT bases ({skipped:,} bp N / non-ACGT, {short:,} ACGT bp in runs shorter than one "
            "6-mer)",
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
