"""Build a Genomic-NIAH cell from any genome (build-niah) the way the published dataset is built:
the published schema, a real-genome haystack, one planted key -> value pair at one of five
depths, near-duplicate distractor keys (docs/suite-conventions.md#building-a-cell).

Sources: the Carbon technical report §6.5 and huggingface/carbon evaluation/README.md §5. The
haystack is real genome, contiguous at 4k-16k tokens and stitched (ACGT runs concatenated) at
32k-128k; each config's 500 rows are stratified across five needle depths, 10%, 25%, 50%, 75%
and 90% of the haystack's length; key and value are 24 bp; neardup_dK has eight distractor pairs
whose keys are the target key with K single-base mutations. How the published negative sequence
is built is not documented: ours is below.

Per row, with token length k (6) and `ctx` the cell's context in tokens:
- the positive sequence fills the context exactly: prefix token + prompt + value = ctx tokens,
  so prompt_bp = (ctx - 1 - value_bp / k) * k;
- the haystack holds only ACGT (soft-masked bases upper-cased, never an N). `contiguous`: one
  stretch of the reference drawn uniformly among all such stretches. `stitched`: the genome's
  ACGT runs of at least MIN_PIECE_BP are put in a random order and read as one circular
  sequence; the haystack is a window of it at a uniformly random base, so it is a partial run,
  whole runs, and a partial run, each base at most once (a fragmented assembly fills any
  context its ACGT bases can). `auto` (the default) stitches from STITCH_FROM_TOKENS on, as
  published. The row records haystack_mode, the first piece (haystack_chrom, haystack_start)
  and every piece (haystack_pieces: "chrom:start-end,...", 0-based half-open);
- the target pair (key + value) is inserted at a token boundary at `depth` x the haystack
  (depths cycle through DEPTHS by row); in `neardup_dK` tasks `distractors` more pairs are
  inserted at other random token boundaries, each key at Hamming distance exactly K from the
  query key and each with its own value; the prompt ends with the query key;
- the query key occurs exactly twice in the prompt (planted, and the query at its end): a key
  that also occurs anywhere else, across an insertion's edges included, is drawn again;
- the negative sequence is prompt + a distractor's value (neardup tasks) or prompt + the value
  changed at every base (niah: "24 bp wrong", never a partial match).
Everything comes from one numpy generator seeded with `seed`: a seed gives the same cell.
Rows are written to Parquet 16 at a time, so memory holds one contig (while the runs are
listed), the runs' coordinates, and a few rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from carbon_vep import atomic
from carbon_vep.config.fields import ConfigError
from carbon_vep.config.niah_grid import NIAH_TASKS as TASKS
from carbon_vep.config.niah_grid import niah_config_name as config_name
from carbon_vep.errors import InputError
from carbon_vep.genome.reference import open_reference
from carbon_vep.scan.targets import contig_acgt_runs

BASES = np.array(list("ACGT"))
DEPTHS = (0.10, 0.25, 0.50, 0.75, 0.90)  # the published five needle depths (report §6.5)
STITCH_FROM_TOKENS = 32_768  # published: contiguous at 4k-16k tokens, stitched at 32k-128k
HAYSTACK_MODES = ("auto", "contiguous", "stitched")
# stitched haystacks skip shorter runs: slivers between gaps would add junctions, not sequence
MIN_PIECE_BP = 1_000
ROWS_PER_WRITE = 16
MAX_DRAWS = 1000


@dataclass(frozen=True)
class CellSpec:
    """What a built cell is: task, context, rows, seed, the pair geometry and the haystack."""

    task: str
    ctx: int
    rows: int
    seed: int
    key_bp: int = 24
    value_bp: int = 24
    distractors: int = 8
    k: int = 6
    haystack: str = "auto"

    @property
    def hamming(self) -> int:
        """K of a neardup_dK task; 0 for niah."""
        return int(self.task.removeprefix("neardup_d")) if self.task != "niah" else 0

    @property
    def n_distractors(self) -> int:
        return self.distractors if self.hamming else 0

    @property
    def prompt_bp(self) -> int:
        return (self.ctx - 1 - self.value_bp // self.k) * self.k

    @property
    def haystack_bp(self) -> int:
        pairs = 1 + self.n_distractors
        return self.prompt_bp - self.key_bp - pairs * (self.key_bp + self.value_bp)

    @property
    def haystack_mode(self) -> str:
        """`contiguous` or `stitched`; `auto` picks as the published cells do, by context."""
        if self.haystack != "auto":
            return self.haystack
        return "stitched" if self.ctx >= STITCH_FROM_TOKENS else "contiguous"

    def check(self) -> None:
        """Refuse geometry the task cannot have, naming the flag (ConfigError: the command
        line cannot mean what it says; the CLI prints it on one line and exits 2)."""
        if self.task not in TASKS:
            raise ConfigError(f"--task {self.task!r}: one of {', '.join(TASKS)}")
        if self.haystack not in HAYSTACK_MODES:
            raise ConfigError(f"--haystack {self.haystack!r}: one of {', '.join(HAYSTACK_MODES)}")
        for name, bp in (("--key-bp", self.key_bp), ("--value-bp", self.value_bp)):
            if bp <= 0 or bp % self.k:
                raise ConfigError(f"{name} {bp}: a positive multiple of {self.k} (whole tokens)")
        if self.hamming > self.key_bp:
            raise ConfigError(f"--task {self.task}: Hamming distance above --key-bp")
        if self.hamming and self.distractors < 8:
            raise ConfigError(f"--distractors {self.distractors}: at least 8 in neardup tasks")
        if self.haystack_bp < self.k:
            raise ConfigError(f"--ctx {self.ctx} leaves no haystack for the planted pairs")
        if self.rows < 1:
            raise ConfigError("--rows must be at least 1")


@dataclass(frozen=True)
class Piece:
    """Bases [start, end) of `contig` (0-based), one piece of a haystack."""

    contig: str
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.contig}:{self.start}-{self.end}"


class HaystackSampler:
    """Draws of ACGT-only haystacks of one length; subclasses choose the pieces. Only the
    runs' coordinates stay in memory; a draw fetches just its pieces' bases."""

    mode = ""

    def __init__(self, reference_path: str | Path, length: int, min_run: int) -> None:
        self.path, self.length = Path(reference_path), length
        self.reference = open_reference(reference_path)
        names, contig, starts, sizes, self.longest = [], [], [], [], 0
        for name in self.reference.lengths:  # read in blocks: not a whole chr1 in memory
            for start, end in contig_acgt_runs(self.reference, name):
                self.longest = max(self.longest, end - start)
                if end - start >= min_run:
                    contig.append(len(names))
                    starts.append(start)
                    sizes.append(end - start)
            names.append(name)
        self.names, self.contig = names, np.array(contig, dtype=np.int64)
        self.starts, self.sizes = np.array(starts, np.int64), np.array(sizes, np.int64)

    def piece(self, run: int, offset: int, size: int) -> Piece:
        start = int(self.starts[run]) + offset
        return Piece(self.names[self.contig[run]], start, start + size)

    def pieces(self, rng: np.random.Generator) -> list[Piece]:
        raise NotImplementedError

    def draw(self, rng: np.random.Generator) -> tuple[list[Piece], str]:
        """The pieces of one haystack and its upper-cased bases."""
        pieces = self.pieces(rng)
        return pieces, "".join(self.reference.fetch(p.contig, p.start, p.end) for p in pieces)

    def close(self) -> None:
        self.reference.close()


class ContiguousSampler(HaystackSampler):
    """One stretch, drawn uniformly among every ACGT-only stretch of the length."""

    mode = "contiguous"

    def __init__(self, reference_path: str | Path, length: int) -> None:
        super().__init__(reference_path, length, min_run=length)
        if not len(self.sizes):
            self.close()
            raise InputError(
                reference_path,
                f"no stretch of {length:,} ACGT bases without N (the longest is "
                f"{self.longest:,} bp): the haystack of this context does not fit; lower --ctx, "
                "use a larger genome or --haystack stitched",
            )
        self.cumulative = np.cumsum(self.sizes - length + 1)

    def pieces(self, rng: np.random.Generator) -> list[Piece]:
        index = int(rng.integers(self.cumulative[-1]))
        run = int(np.searchsorted(self.cumulative, index, side="right"))
        before = int(self.cumulative[run - 1]) if run else 0
        return [self.piece(run, index - before, self.length)]


class StitchedSampler(HaystackSampler):
    """A window of the ACGT runs (of MIN_PIECE_BP or more) in a random order, read as one
    circular sequence from a uniformly random base: each base at most once per haystack."""

    mode = "stitched"

    def __init__(self, reference_path: str | Path, length: int) -> None:
        super().__init__(reference_path, length, min_run=MIN_PIECE_BP)
        self.total = int(self.sizes.sum())
        if self.total < length:
            self.close()
            raise InputError(
                reference_path,
                f"{self.total:,} ACGT bases in runs of at least {MIN_PIECE_BP:,} bp, fewer than "
                f"the haystack's {length:,}: this context does not fit; lower --ctx or use a "
                "larger genome",
            )

    def pieces(self, rng: np.random.Generator) -> list[Piece]:
        order = rng.permutation(len(self.sizes))
        ends = np.cumsum(self.sizes[order])
        at = int(rng.integers(self.total))
        i = int(np.searchsorted(ends, at, side="right"))
        offset, need, out = at - int(ends[i] - self.sizes[order[i]]), self.length, []
        while need:  # wraps past the last run to the first; total >= length, so no base twice
            run = int(order[i % len(order)])
            take = min(need, int(self.sizes[run]) - offset)
            out.append(self.piece(run, offset, take))
            need, offset, i = need - take, 0, i + 1
        return out


SAMPLERS = {"contiguous": ContiguousSampler, "stitched": StitchedSampler}


def random_bases(rng: np.random.Generator, n: int) -> str:
    return "".join(BASES[rng.integers(4, size=n)])


def hamming_neighbours(rng: np.random.Generator, key: str, distance: int, n: int) -> list[str]:
    """`n` distinct keys, each at Hamming distance exactly `distance` from `key`."""
    out: list[str] = []
    while len(out) < n:
        chars = list(key)
        for position in rng.choice(len(key), size=distance, replace=False):
            chars[position] = str(rng.choice([b for b in "ACGT" if b != key[position]]))
        candidate = "".join(chars)
        if candidate not in out:
            out.append(candidate)
    return out


def occurrences(text: str, word: str) -> int:
    """Occurrences of `word` in `text`, overlapping ones included."""
    count, at = 0, text.find(word)
    while at >= 0:
        count, at = count + 1, text.find(word, at + 1)
    return count


def _distinct_values(rng: np.random.Generator, n: int, bp: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        value = random_bases(rng, bp)
        if value not in out:
            out.append(value)
    return out


def wrong_everywhere(rng: np.random.Generator, value: str) -> str:
    """`value` with every base changed to one of the three others: the niah negative is then
    wrong at all of its bases, so no share of it can match the value by chance."""
    codes = np.array(["ACGT".index(b) for b in value])
    return "".join(BASES[(codes + rng.integers(1, 4, size=len(codes))) % 4])


def plant(
    spec: CellSpec, haystack: str, target_at: int, rng: np.random.Generator, i: int
) -> tuple[str, str, list[str]]:
    """(prompt, key, values): the target pair at `target_at`, the distractors at other random
    token boundaries, the query key at the end; drawn again until the key occurs twice."""
    tokens = spec.haystack_bp // spec.k
    others = (
        rng.choice(
            [t for t in range(tokens + 1) if t * spec.k != target_at],
            spec.n_distractors,
            replace=False,
        )
        * spec.k
    )
    for _ in range(MAX_DRAWS):
        key = random_bases(rng, spec.key_bp)
        keys = [key, *hamming_neighbours(rng, key, spec.hamming, spec.n_distractors)]
        values = _distinct_values(rng, len(keys), spec.value_bp)
        inserts = sorted(zip([target_at, *others.tolist()], keys, values, strict=True))
        pieces, last = [], 0
        for at, k_, v in inserts:
            pieces += [haystack[last:at], k_, v]
            last = at
        prompt = "".join([*pieces, haystack[last:], key])
        if occurrences(prompt, key) == 2:
            return prompt, key, values
    raise RuntimeError(f"no key planted exactly once after {MAX_DRAWS} draws (row {i})")


def build_row(spec: CellSpec, sampler: HaystackSampler, rng: np.random.Generator, i: int) -> dict:
    """One row of the cell (the task's columns plus where it came from)."""
    pieces, haystack = sampler.draw(rng)
    depth = DEPTHS[i % len(DEPTHS)]
    target_at = int(round(depth * (spec.haystack_bp // spec.k))) * spec.k
    prompt, key, values = plant(spec, haystack, target_at, rng, i)
    negative = values[1] if spec.n_distractors else wrong_everywhere(rng, values[0])
    return {
        "uid": f"{config_name(spec.task, spec.ctx)}_s{spec.seed}_{i:05d}",
        "task": spec.task,
        "context_length_tokens": spec.ctx,
        "prompt": prompt,
        "value": values[0],
        "value_len_bp": spec.value_bp,
        "positive_sequence": prompt + values[0],
        "negative_sequence": prompt + negative,
        "depth": depth,  # the grid value; the offset is needle_offset_bp
        "key": key,
        "needle_offset_bp": target_at,
        "haystack_mode": sampler.mode,
        "haystack_chrom": pieces[0].contig,  # the first piece; every piece: haystack_pieces
        "haystack_start": pieces[0].start,
        "haystack_pieces": ",".join(map(str, pieces)),
    }


def build_rows(spec: CellSpec, reference: str | Path) -> Iterator[dict]:
    spec.check()
    rng = np.random.default_rng(spec.seed)
    sampler = SAMPLERS[spec.haystack_mode](reference, spec.haystack_bp)
    try:
        for i in range(spec.rows):
            yield build_row(spec, sampler, rng, i)
    finally:
        sampler.close()


def write_cell(spec: CellSpec, reference: str | Path, out: str | Path) -> int:
    """Write the cell to Parquet (atomically), ROWS_PER_WRITE rows at a time; rows written."""
    rows, written = [], 0
    with atomic.atomic_path(out) as tmp:
        writer = None
        for row in build_rows(spec, reference):
            rows.append(row)
            if len(rows) == ROWS_PER_WRITE:
                writer = _write(writer, tmp, rows)
                written, rows = written + len(rows), []
        if rows:
            writer = _write(writer, tmp, rows)
            written += len(rows)
        writer.close()
    return written


def _write(writer: pq.ParquetWriter | None, path: Path, rows: list[dict]) -> pq.ParquetWriter:
    table = pa.Table.from_pylist(rows)
    if writer is None:
        writer = pq.ParquetWriter(path, table.schema)
    writer.write_table(table)
    return writer
