"""Benchmark: `carbon-vep export-vcf` and `export-tabix` of a ClinVar-size merged table, ours vs a
baseline commit, the table in position order and scattered (a panel sorted by gene).

The merged table: the ingest benchmark's generated ClinVar-like VCF (`benchmark.ingest`, numpy
seed 13) checked by this tree's check-panel with the ClinVar example's options, each `ok` row
given the score columns a centered run writes (random values, numpy seed 5) and status
`scored`, written in row groups of 100,000 rows as the merge writes it. The scattered copy has
the same rows in blocks of 50 (a gene's variants) in a random order, so every contig's rows
are spread over the whole file. Each export runs in a fresh process, each version in turn
(peak RSS from the kernel's accounting); the versions' files must hold the same text (the
bgzip blocks may be cut elsewhere: the VCF's header was a block of its own).

Usage: python -m carbon_vep.benchmark.exports [--records 3000000] [--baseline d35ac76]
       [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from carbon_vep.benchmark.harness import PROJECT_ROOT, run_command, write_json
from carbon_vep.benchmark.ingest import INFO_FIELDS, baseline_tree, generate, run_check_panel
from carbon_vep.markdown import table as markdown_table

SCORE_SEED = 5
GENE_ROWS = 50  # rows of one block (a gene's variants) of the scattered copy
ROW_GROUP_ROWS = 100_000  # as the merge writes its table
SCORE_COLUMNS = ("score", "ref_ll", "alt_ll", "delta", "delta_rc", "p_ref", "p_alt")
TABIX_COLUMNS = ("score", "delta")


def merged_tables(workdir: Path, n_records: int) -> tuple[Path, Path, Path, Path, int]:
    """The reference, the panel, the merged table in position order and scattered, its rows."""
    fasta, panel, _ = generate(workdir, n_records)
    run_check_panel(PROJECT_ROOT / "src", fasta, panel, workdir)  # checked.parquet there
    table = pl.read_parquet(workdir / "checked.parquet")
    rng = np.random.default_rng(SCORE_SEED)
    ok = pl.col("status") == "ok"
    scores = {name: pl.Series(name, rng.normal(size=table.height)) for name in SCORE_COLUMNS}
    merged = table.with_columns(
        pl.when(ok).then(pl.lit("scored")).otherwise(pl.col("status")).alias("status"),
        *(pl.when(ok).then(pl.lit(values)).alias(name) for name, values in scores.items()),
        pl.when(ok).then(8192).alias("window_bp"),
        pl.when(ok).then(0).alias("window_non_acgt"),
        pl.when(ok).then(pl.lit("centered")).alias("recipe"),
        pl.when(ok).then(pl.lit("full_vocab")).alias("normalization"),
    )
    in_order, scattered = workdir / "merged.parquet", workdir / "merged_by_gene.parquet"
    merged.write_parquet(in_order, row_group_size=ROW_GROUP_ROWS)
    blocks = rng.permutation(-(-merged.height // GENE_ROWS))
    order = (blocks[:, None] * GENE_ROWS + np.arange(GENE_ROWS)[None, :]).ravel()
    merged[order[order < merged.height]].write_parquet(scattered, row_group_size=ROW_GROUP_ROWS)
    return fasta, panel, in_order, scattered, merged.height


def export_command(kind: str, table: Path, fasta: Path, panel: Path, out: Path) -> list[str]:
    command = [sys.executable, "-m", "carbon_vep.cli", f"export-{kind}"]
    if kind == "tabix":
        columns = [a for c in TABIX_COLUMNS for a in ("--column", c)]
        return [
            *command,
            "--scores",
            str(table),
            *columns,
            "--reference",
            str(fasta),
            "--out",
            str(out),
        ]
    fields = ["--info-field", *INFO_FIELDS]
    options = ["--build", "hg38", "--panel", str(panel), *fields]
    return [
        *command,
        "--merged",
        str(table),
        "--reference",
        str(fasta),
        *options,
        "--out",
        str(out),
    ]


def text_digest(path: Path) -> str:
    """The SHA-256 of a bgzipped file's text (read as a stream: gzip.decompress copies what is
    left after each of a bgzf file's thousands of members)."""
    digest = hashlib.sha256()
    with gzip.open(path, "rb") as text:
        while chunk := text.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--baseline", default="d35ac76", help="commit to compare with")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_exports_") as tmp:
        workdir = Path(tmp)
        start = time.perf_counter()
        fasta, panel, in_order, scattered, n_rows = merged_tables(workdir, args.records)
        print(f"merged table of {n_rows:,} rows in {time.perf_counter() - start:.0f} s", flush=True)
        versions = {
            "ours": PROJECT_ROOT / "src",
            args.baseline: baseline_tree(args.baseline, workdir),
        }
        results, rows, same = [], [], True
        for kind in ("vcf", "tabix"):
            for order, table in (("position order", in_order), ("by gene", scattered)):
                texts, measured = {}, {}
                for name, src in versions.items():
                    out = (
                        workdir
                        / f"{name}-{kind}-{table.stem}.{kind if kind == 'vcf' else 'tsv'}.gz"
                    )
                    env = {**os.environ, "PYTHONPATH": str(src), "CARBON_VEP_INTERFACE": "cli"}
                    run = run_command(export_command(kind, table, fasta, panel, out), env=env)
                    measured[name] = run
                    texts[name] = text_digest(out)
                    print(
                        f"export-{kind}, {order}, {name}: {run.seconds:.1f} s, "
                        f"{run.peak_rss_mb:.0f} MB",
                        flush=True,
                    )
                identical = texts["ours"] == texts[args.baseline]
                same = same and identical
                ours, base = measured["ours"], measured[args.baseline]
                results.append(
                    {
                        "export": kind,
                        "order": order,
                        "ours_s": round(ours.seconds, 1),
                        "baseline_s": round(base.seconds, 1),
                        "ours_mb": round(ours.peak_rss_mb),
                        "baseline_mb": round(base.peak_rss_mb),
                        "identical_text": identical,
                    }
                )
                rows.append(
                    [
                        f"export-{kind}",
                        order,
                        f"{base.seconds:.1f} / {base.peak_rss_mb:,.0f}",
                        f"{ours.seconds:.1f} / {ours.peak_rss_mb:,.0f}",
                        f"{base.seconds / ours.seconds:.2f}x",
                        "yes" if identical else "NO",
                    ]
                )
        header = [
            "export",
            "table",
            f"{args.baseline} s / MB",
            "ours s / MB",
            "speed-up",
            "same text",
        ]
        print(f"\n{n_rows:,} rows, {args.records:,} records\n")
        print(markdown_table(header, rows))
        write_json(args.json, {"records": args.records, "rows": n_rows, "results": results})
        if not same:
            sys.exit("the two versions wrote different text")


if __name__ == "__main__":
    main()
