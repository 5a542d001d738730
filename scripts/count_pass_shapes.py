"""How many forward passes the centered recipe's window groups make, and how many of them have a
shape the job has not seen before (each new shape costs a cuDNN attention plan on a GPU; docs/
gpu.md, the prefix-sharing section). No model runs: the groups are encoded and batched by the
package's own code (`encode_group`, `run_sorted`) at a GPU profile's token budget.

    .venv/bin/python scripts/count_pass_shapes.py [--batch-tokens 131072]

Panels: the GPU check's product panel (36 and 72 variants, as product_setup lays them out) and a
random panel of ~420 SNVs at 184 sites, 1-3 alternates a site, on a random 2 Mbp contig.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import types
from pathlib import Path

import numpy as np
import pysam

from carbon_vep.benchmark.gpu import product_setup
from carbon_vep.benchmark.synthetic import random_acgt
from carbon_vep.genome.windows import centered_window
from carbon_vep.model.batching import run_sorted
from carbon_vep.model.demo import make_tokenizer
from carbon_vep.model.tokens import dna_vocab
from carbon_vep.model.window_groups import encode_group

WINDOW_BP = 8192  # the centered recipe's window (config/suite.yaml)
K = 6


def window_groups(contig: str, variants: list[tuple[int, str, str]]) -> dict[str, list[str]]:
    """Reference window -> its distinct alternate windows, as scoring.shard.score_windows
    builds them (variants in the contig's last partial 6-mer left out)."""
    groups: dict[str, list[str]] = {}
    for pos, _, alt in variants:
        window = centered_window(pos, len(contig), WINDOW_BP)
        seq = contig[window.start : window.end]
        usable, i = len(seq) - len(seq) % K, window.variant_index
        if i >= usable:
            continue
        ref_seq, alt_seq = seq[:usable], (seq[:i] + alt + seq[i + 1 :])[:usable]
        alts = groups.setdefault(ref_seq, [])
        if alt_seq not in alts:
            alts.append(alt_seq)
    return groups


def pass_shapes(engine, groups: dict[str, list[str]], batch_tokens: int) -> list[tuple]:
    """Every pass window_groups_scores would run, as (kind, rows, query tokens, key tokens)."""
    encoded = [encode_group(engine, ref, alts) for ref, alts in groups.items()]
    passes: list[tuple] = []

    def work(batch):
        by_shape: dict[tuple, int] = {}
        for group in batch:
            by_shape[group.shape] = by_shape.get(group.shape, 0) + 1
        for (tokens, split, alleles), count in by_shape.items():
            passes.append(("prefix", count, split, split))
            passes.append(("suffix", count * alleles, tokens - split, tokens))
        return [None] * len(batch)

    run_sorted(encoded, work, 8, [g.ids.size for g in encoded], None, "groups", batch_tokens)
    return passes


def report(name: str, engine, groups: dict[str, list[str]], jobs: int, batch_tokens: int) -> None:
    items = list(groups.items())
    per_job = -(-len(items) // jobs)
    passes = new = 0
    for j in range(jobs):
        shapes = pass_shapes(engine, dict(items[j * per_job : (j + 1) * per_job]), batch_tokens)
        passes, new = passes + len(shapes), new + len(set(shapes))
    print(f"{name}: {len(groups)} groups in {jobs} job(s): {passes} passes, {new} new shapes")


def product_panel(sites: int, folder: Path) -> tuple[str, list[tuple[int, str, str]]]:
    sizes = product_setup.ProductSizes(sites=sites)
    inputs = product_setup.write_inputs(folder, sizes)
    contig = pysam.FastaFile(str(inputs.genome)).fetch("panel")
    records = pysam.VariantFile(str(inputs.panel))
    return contig, [(r.pos, r.ref, alt) for r in records for alt in r.alts]


def random_panel(sites: int, seed: int = 1) -> tuple[str, list[tuple[int, str, str]]]:
    rng = random.Random(seed)
    contig = random_acgt(2_000_000, np.random.default_rng(seed))
    variants = []
    for _ in range(sites):
        pos = rng.randrange(WINDOW_BP, len(contig) - WINDOW_BP)
        ref = contig[pos - 1]
        for alt in rng.sample([b for b in "ACGT" if b != ref], rng.choice([1, 2, 3, 3])):
            variants.append((pos, ref, alt))
    return contig, variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-tokens", type=int, default=131_072)
    args = parser.parse_args()
    engine = types.SimpleNamespace(vocab=dna_vocab(make_tokenizer()), k=K)
    with tempfile.TemporaryDirectory() as tmp:
        for sites in (12, 24):
            contig, variants = product_panel(sites, Path(tmp) / str(sites))
            name = f"product panel, {len(variants)} variants"
            report(name, engine, window_groups(contig, variants), 2, args.batch_tokens)
    contig, variants = random_panel(184)
    groups = window_groups(contig, variants)
    for jobs in (1, 2):
        name = f"random panel, {len(variants)} variants"
        report(name, engine, groups, jobs, args.batch_tokens)


if __name__ == "__main__":
    main()
