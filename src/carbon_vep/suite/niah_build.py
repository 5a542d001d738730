"""Build a Genomic-NIAH cell from any genome (build-niah): the published schema, a real-genome
haystack, one planted key -> value pair at a recorded depth, near-duplicate distractor keys
(docs/suite-conventions.md#building-a-cell).

Per row, with token length k (6) and `ctx` the cell's context in tokens:
- the positive sequence fills the context exactly: prefix token + prompt + value = ctx tokens,
  so prompt_bp = (ctx - 1 - value_bp / k) * k;
- the haystack is one contiguous stretch of the reference with no base other than ACGT
  (soft-masked bases upper-cased; N runs never inside), drawn uniformly among all such
  stretches of the genome;
- the target pair (key + value) is inserted at a token boundary at `depth` x the haystack
  (depths cycle through DEPTHS by row); in `neardup_dK` tasks `distractors` more pairs are
  inserted at other random token boundaries, each key at Hamming distance exactly K from the
  query key and each with its own value; the prompt ends with the query key;
- the query key occurs exactly twice in the prompt (planted, and the query at its end): a key
  that also occurs anywhere else, across an insertion's edges included, is drawn again;
- the negative sequence is prompt + a distractor's value (neardup tasks) or prompt + another
  random value (niah).
Everything comes from one numpy generator seeded with `seed`: a seed gives the same cell.
Rows are written to Parquet 16 at a time, so memory holds one contig and a few rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from carbon_vep import atomic
from carbon_vep.config.stages import NIAH_TASKS as TASKS
from carbon_vep.config.stages import niah_config_name as config_name
from carbon_vep.errors import InputError
from carbon_vep.genome.reference import open_reference
from carbon_vep.scan.plan import acgt_runs

BASES = np.array(list("ACGT"))
DEPTHS = tuple(round(i / 10, 1) for i in range(11))  # 0%, 10%, ..., 100% of the haystack
ROWS_PER_WRITE = 16
MAX_DRAWS = 1000


@dataclass(frozen=True)
class CellSpec:
    """What a built cell is: task, context, rows, seed and the pair geometry."""

    task: str
    ctx: int
    rows: int
    seed: int
    key_bp: int = 24
    value_bp: int = 24
    distractors: int = 8
    k: int = 6

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

    def check(self) -> None:
        """Refuse geometry the task cannot have, naming the flag."""
        if self.task not in TASKS:
            raise ValueError(f"--task {self.task!r}: one of {', '.join(TASKS)}")
        for name, bp in (("--key-bp", self.key_bp), ("--value-bp", self.value_bp)):
            if bp <= 0 or bp % self.k:
                raise ValueError(f"{name} {bp}: a positive multiple of {self.k} (whole tokens)")
        if self.hamming > self.key_bp:
            raise ValueError(f"--task {self.task}: Hamming distance above --key-bp")
        if self.hamming and self.distractors < 8:
            raise ValueError(f"--distractors {self.distractors}: at least 8 in neardup tasks")
        if self.haystack_bp < self.k:
            raise ValueError(f"--ctx {self.ctx} leaves no haystack for the planted pairs")
        if self.rows < 1:
            raise ValueError("--rows must be at least 1")


class HaystackSampler:
    """Uniform draws of ACGT-only stretches of one length from a genome's ACGT runs."""

    def __init__(self, reference_path: str | Path, length: int) -> None:
        self.path, self.length = Path(reference_path), length
        self.reference = open_reference(reference_path)
        runs, longest = [], 0
        for contig, size in self.reference.lengths.items():
            for start, end in acgt_runs(self.reference.fetch(contig, 0, size)):
                longest = max(longest, end - start)
                if end - start >= length:
                    runs.append((contig, start, end - start - length + 1))
        if not runs:
            raise InputError(
                reference_path,
                f"no stretch of {length:,} ACGT bases without N (the longest is {longest:,} bp): "
                "the haystack of this context does not fit; lower --ctx or use a larger genome",
            )
        self.runs = runs
        self.cumulative = np.cumsum([n for _, _, n in runs])

    def draw(self, rng: np.random.Generator) -> tuple[str, int, str]:
        """(contig, 0-based start, upper-cased bases) of one stretch."""
        index = int(rng.integers(self.cumulative[-1]))
        run = int(np.searchsorted(self.cumulative, index, side="right"))
        before = int(self.cumulative[run - 1]) if run else 0
        contig, start, _ = self.runs[run]
        begin = start + index - before
        return contig, begin, self.reference.fetch(contig, begin, begin + self.length)

    def close(self) -> None:
        self.reference.close()


def random_bases(rng: np.random.Generator, n: int) -> str:
    return "".join(BASES[rng.integers(4, size=n)])


def hamming_neighbours(
    rng: np.random.Generator, key: str, distance: int, n: int
) -> list[str]:  # fmt: skip
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


def _distinct_values(rng: np.random.Generator, n: int, bp: int, avoid: set[str]) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        value = random_bases(rng, bp)
        if value not in avoid and value not in out:
            out.append(value)
    return out


def build_row(spec: CellSpec, sampler: HaystackSampler, rng: np.random.Generator, i: int) -> dict:
    """One row of the cell (the task's columns plus where it came from)."""
    contig, start, haystack = sampler.draw(rng)
    depth = DEPTHS[i % len(DEPTHS)]
    tokens = spec.haystack_bp // spec.k
    target_at = int(round(depth * tokens)) * spec.k
    others = rng.choice(
        [t for t in range(tokens + 1) if t * spec.k != target_at], spec.n_distractors,
        replace=False,
    ) * spec.k  # fmt: skip
    for _ in range(MAX_DRAWS):
        key = random_bases(rng, spec.key_bp)
        keys = [key, *hamming_neighbours(rng, key, spec.hamming, spec.n_distractors)]
        values = _distinct_values(rng, len(keys) + 1, spec.value_bp, set())
        inserts = sorted(zip([target_at, *others.tolist()], keys, values[:-1], strict=True))
        pieces, last = [], 0
        for at, k_, v in inserts:
            pieces += [haystack[last:at], k_, v]
            last = at
        prompt = "".join([*pieces, haystack[last:], key])
        if occurrences(prompt, key) == 2:
            break
    else:
        raise RuntimeError(f"no key planted exactly once after {MAX_DRAWS} draws (row {i})")
    negative = values[1] if spec.n_distractors else values[-1]
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
        "haystack_chrom": contig,
        "haystack_start": start,
    }


def build_rows(spec: CellSpec, reference: str | Path) -> Iterator[dict]:
    spec.check()
    rng = np.random.default_rng(spec.seed)
    sampler = HaystackSampler(reference, spec.haystack_bp)
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
