"""How many forward passes the centered recipe's window groups make, and how many of them have a
shape the job has not seen before (each new shape costs a cuDNN attention plan on a GPU; docs/
gpu.md, the prefix-sharing section). No model runs: the panel is cut into jobs, its window
groups built, encoded and batched by the package's own code (`assign_shards`, `add_windows`,
`plan_window_groups`, `encode_group`, `run_sorted`) at a GPU profile's token budget.

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
import polars as pl
import pysam

from carbon_vep.benchmark.gpu import product_setup
from carbon_vep.benchmark.synthetic import random_acgt, write_fasta
from carbon_vep.genome.reference import open_reference
from carbon_vep.genome.windows import add_windows, assign_shards, centered_window
from carbon_vep.model.batching import run_sorted
from carbon_vep.model.demo import make_tokenizer
from carbon_vep.model.tokens import dna_vocab
from carbon_vep.model.window_groups import encode_group
from carbon_vep.scoring.shard import plan_window_groups

WINDOW_BP = 8192  # the centered recipe's window (config/suite.yaml)
K = 6


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


def report(name: str, engine, fasta: Path, variants: pl.DataFrame, shard_size: int, budget: int):
    """The panel cut into score_shard jobs as make-shards cuts it (whole sites, by key), each
    job's window groups as score_windows builds them, and their passes."""
    shards = assign_shards(variants, shard_size)
    passes = new = 0
    with open_reference(fasta) as reference:
        for _, shard in shards.group_by("shard", maintain_order=True):
            shard = add_windows(shard, reference.lengths, centered_window, WINDOW_BP)
            _, groups = plan_window_groups(shard, reference, K, rc_average=False)
            shapes = pass_shapes(engine, groups, budget)
            passes, new = passes + len(shapes), new + len(set(shapes))
    jobs = shards["shard"].n_unique()
    print(f"{name}, {variants.height} variants in {jobs} job(s): {passes} passes, {new} new shapes")


def product_panel(sites: int, folder: Path) -> tuple[Path, pl.DataFrame, int]:
    # 3 variants a site in two shards, as the product step cut its panel in runs 8-12
    sizes = product_setup.ProductSizes(sites=sites, shard_size=sites * 3 // 2)
    inputs = product_setup.write_inputs(folder, sizes)
    records = pysam.VariantFile(str(inputs.panel))
    rows = [(r.chrom, r.pos, r.ref, alt) for r in records for alt in r.alts]
    return inputs.genome, _variants(rows), sizes.shard_size


def random_panel(sites: int, folder: Path, seed: int = 1) -> tuple[Path, pl.DataFrame]:
    rng = random.Random(seed)
    contig = random_acgt(2_000_000, np.random.default_rng(seed))
    rows = []
    for _ in range(sites):
        pos = rng.randrange(WINDOW_BP, len(contig) - WINDOW_BP)
        ref = contig[pos - 1]
        for alt in rng.sample([b for b in "ACGT" if b != ref], rng.choice([1, 2, 3, 3])):
            rows.append(("random", pos, ref, alt))
    return write_fasta(folder / "random.fa", {"random": contig}), _variants(rows)


def _variants(rows: list[tuple[str, int, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["ref_chrom", "pos", "ref", "alt"], orient="row")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-tokens", type=int, default=131_072)
    args = parser.parse_args()
    engine = types.SimpleNamespace(vocab=dna_vocab(make_tokenizer()), k=K)
    with tempfile.TemporaryDirectory() as tmp:
        for sites in (12, 24):
            fasta, variants, shard_size = product_panel(sites, Path(tmp) / str(sites))
            report("product panel", engine, fasta, variants, shard_size, args.batch_tokens)
        fasta, variants = random_panel(184, Path(tmp))
        for jobs in (1, 2):
            shard_size = -(-variants.height // jobs)
            report("random panel", engine, fasta, variants, shard_size, args.batch_tokens)


if __name__ == "__main__":
    main()
