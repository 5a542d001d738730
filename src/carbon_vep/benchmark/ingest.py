"""Benchmark: `carbon-vep check-panel` on a generated ClinVar-size VCF, ours vs a baseline commit.

Generates (deterministically, numpy seed 13) a reference FASTA and a bgzipped ClinVar-like VCF:
sites only, contigs `1`..`N` against a FASTA that names them `chr1`..`chrN` (aliases), ClinVar's
INFO fields (ALLELEID, CLNDN, CLNHGVS, CLNREVSTAT, CLNSIG, CLNVC, CLNVCSO, GENEINFO, MC, ORIGIN,
RS) with CLNSIG drawn from ClinVar's terms, mostly SNVs plus deletions, insertions, MNVs,
multi-allelic records, missing / N alleles and a few REF mismatches. Then runs check-panel on it
twice in the same invocation, each in a fresh process (peak RSS from the kernel's accounting):
the working tree's code and the code of a baseline commit (extracted with `git archive`), with
the options of the ClinVar example config (`label_source: clinvar_clnsig`, four INFO fields).
Reports rows, wall time, peak RSS and the ratios, and checks that both wrote the same
checked.parquet and summary.

With `--panel-format tsv` the same records are written as a TSV panel instead (the key, the
four INFO fields as columns, an ALT list where the VCF has one), checked with the same label
options: a table's read, not a VCF's.

Usage: python -m carbon_vep.benchmark.ingest [--records 3000000] [--baseline 838dcef]
       [--panel-format vcf|tsv] [--json out.json]
       python -m carbon_vep.benchmark.ingest --generate-only --records 300000 --workdir /tmp/ingest
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import pysam

from carbon_vep.benchmark.harness import PROJECT_ROOT, run_command, write_json
from carbon_vep.markdown import table as markdown_table

ROOT = PROJECT_ROOT
SEED = 13
CONTIG_BP = 20_000_000
RECORDS_PER_CONTIG = 500_000  # ~1 record per 40 bp, ClinVar's density in well-covered genes
CLNSIG = [  # ClinVar's terms, roughly at the frequencies of its GRCh38 release
    ("Uncertain_significance", 0.44),
    ("Likely_benign", 0.26),
    ("Benign", 0.07),
    ("Pathogenic", 0.07),
    ("Likely_pathogenic", 0.04),
    ("Conflicting_classifications_of_pathogenicity", 0.06),
    ("Pathogenic/Likely_pathogenic", 0.02),
    ("Benign/Likely_benign", 0.02),
    ("not_provided", 0.01),
    ("Pathogenic|risk_factor", 0.01),
]
CLNDN = [
    "not_provided",
    "Hereditary_cancer-predisposing_syndrome|not_provided",
    "not_specified",
    "Inborn_genetic_diseases",
    "Cardiovascular_phenotype|not_specified",
]
CLNREVSTAT = [
    "criteria_provided,_single_submitter",
    "criteria_provided,_multiple_submitters,_no_conflicts",
    "no_assertion_criteria_provided",
    "reviewed_by_expert_panel",
]
MC = [
    "SO:0001583|missense_variant",
    "SO:0001819|synonymous_variant",
    "SO:0001627|intron_variant",
    "SO:0001587|nonsense",
    "SO:0001589|frameshift_variant",
    "SO:0001624|3_prime_UTR_variant",
]
INFO_FIELDS = ("CLNSIG", "CLNREVSTAT", "GENEINFO", "MC")  # those of the ClinVar example config
LABEL_OPTIONS = ["--build", "hg38", "--label-source", "clinvar_clnsig", "--label-column", "label"]
OPTIONS = [
    "--format",
    "vcf",
    *LABEL_OPTIONS,
    *(option for field in INFO_FIELDS for option in ("--info-field", field)),
]
HEADER = """##fileformat=VCFv4.1
##fileDate=2025-01-05
##source=ClinVar
##reference=GRCh38
##ID=<Description="ClinVar Variation ID">
##INFO=<ID=AF_ESP,Number=1,Type=Float,Description="allele frequencies from GO-ESP">
##INFO=<ID=ALLELEID,Number=1,Type=Integer,Description="the ClinVar Allele ID">
##INFO=<ID=CLNDN,Number=.,Type=String,Description="ClinVar's preferred disease name">
##INFO=<ID=CLNHGVS,Number=.,Type=String,Description="Top-level (primary assembly) HGVS expression.">
##INFO=<ID=CLNREVSTAT,Number=.,Type=String,Description="ClinVar review status">
##INFO=<ID=CLNSIG,Number=.,Type=String,Description="Aggregate germline classification">
##INFO=<ID=CLNVC,Number=1,Type=String,Description="Variant type">
##INFO=<ID=CLNVCSO,Number=1,Type=String,Description="Sequence Ontology id for variant type">
##INFO=<ID=GENEINFO,Number=1,Type=String,Description="Gene(s) for the variant">
##INFO=<ID=MC,Number=.,Type=String,Description="comma separated list of molecular consequence">
##INFO=<ID=ORIGIN,Number=.,Type=String,Description="Allele origin">
##INFO=<ID=RS,Number=.,Type=String,Description="dbSNP ID (i.e. rs number)">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO
"""
_BASES = np.frombuffer(b"ACGT", dtype=np.uint8)


# ---- data ----------------------------------------------------------------------------------
def write_reference(path: Path, n_contigs: int, rng: np.random.Generator) -> list[bytes]:
    """chr1..chrN of random sequence (a soft-masked stretch in each), 60 bases a line."""
    contigs = []
    with open(path, "wb") as out:
        for i in range(n_contigs):
            seq = _BASES[rng.integers(0, 4, CONTIG_BP)]
            seq[1_000_000:1_050_000] += 32  # lowercase: soft-masked repeats
            contigs.append(seq.tobytes().upper())
            full = seq.size // 60 * 60
            lines = seq[:full].reshape(-1, 60)
            out.write(f">chr{i + 1}\n".encode())
            out.write(np.hstack([lines, np.full((lines.shape[0], 1), 10, np.uint8)]).tobytes())
            if full < seq.size:
                out.write(seq[full:].tobytes() + b"\n")
    return contigs


def _other(base: str, k: int) -> str:
    return "ACGT".replace(base, "")[k % 3]


def _record_lines(contig: int, seq: bytes, n: int, rng: np.random.Generator, first_id: int):
    positions = np.unique(rng.integers(100, CONTIG_BP - 1_000, int(n * 1.02)))[:n]
    kinds = rng.choice(
        9, size=positions.size, p=[0.862, 0.05, 0.03, 0.005, 0.03, 0.01, 0.005, 0.004, 0.004]
    )
    draws = rng.integers(0, 1 << 30, size=(positions.size, 6))
    sig_names = [name for name, _ in CLNSIG]
    sig = rng.choice(len(CLNSIG), size=positions.size, p=[w for _, w in CLNSIG])
    text = seq.decode()
    for row, (pos, kind) in enumerate(zip(positions.tolist(), kinds.tolist(), strict=True)):
        d = draws[row].tolist()
        ref = text[pos - 1]
        if kind == 0:  # SNV
            alt, vc = _other(ref, d[0]), "single_nucleotide_variant"
        elif kind == 1:  # deletion, 1-20 bp (a few long ones)
            size = 1 + d[0] % 20 if d[1] % 50 else 200 + d[0] % 300
            ref, alt, vc = text[pos - 1 : pos + size], ref, "Deletion"
        elif kind == 2:  # insertion
            alt = ref + "".join("ACGT"[(d[0] >> (2 * k)) & 3] for k in range(1 + d[1] % 8))
            vc = "Insertion"
        elif kind == 3:  # MNV
            ref = text[pos - 1 : pos + 1]
            alt, vc = _other(ref[0], d[0]) + _other(ref[1], d[1]), "Indel"
        elif kind == 4:  # multi-allelic SNV
            alt = ",".join(_other(ref, d[0] + k) for k in range(2 + d[1] % 2))
            vc = "single_nucleotide_variant"
        elif kind == 5:  # multi-allelic SNV + deletion
            alt, ref = f"{_other(ref, d[0])}{text[pos]},{ref}", text[pos - 1 : pos + 1]
            vc = "Indel"
        elif kind == 6:  # REF differs from the reference
            ref = _other(ref, d[0])
            alt, vc = _other(ref, d[1]), "single_nucleotide_variant"
        elif kind == 7:  # no ALT (ClinVar's deletions of unknown extent)
            alt, vc = ".", "Deletion"
        else:  # an N allele
            alt, vc = "N", "single_nucleotide_variant"
        info = (
            f"ALLELEID={first_id + row + 10_000};CLNDN={CLNDN[d[2] % len(CLNDN)]};"
            f"CLNHGVS=NC_0000{contig:02d}.11:g.{pos}{ref[:1]}>{alt[:1]};"
            f"CLNREVSTAT={CLNREVSTAT[d[3] % len(CLNREVSTAT)]};CLNSIG={sig_names[sig[row]]};"
            f"CLNVC={vc};CLNVCSO=SO:0001483;GENEINFO=GENE{d[4] % 20_000}:{d[4] % 90_000};"
            f"MC={MC[d[5] % len(MC)]};ORIGIN=1;RS={d[5] % 900_000_000}"
        )
        yield f"{contig}\t{pos}\t{first_id + row}\t{ref}\t{alt}\t.\t.\t{info}\n"


def write_panel(path: Path, contigs: list[bytes], n_records: int, rng) -> int:
    """The bgzipped VCF; returns its number of ALTs (rows)."""
    plain = path.with_suffix("")
    per_contig = [n_records // len(contigs)] * len(contigs)
    per_contig[-1] += n_records - sum(per_contig)
    n_alts = 0
    with open(plain, "w") as out:
        out.write(HEADER)
        buffer = io.StringIO()
        first_id = 1
        for i, (seq, n) in enumerate(zip(contigs, per_contig, strict=True)):
            for line in _record_lines(i + 1, seq, n, rng, first_id):
                n_alts += line.split("\t", 5)[4].count(",") + 1
                buffer.write(line)
                if buffer.tell() > 1 << 24:
                    out.write(buffer.getvalue())
                    buffer = io.StringIO()
            first_id += n
        out.write(buffer.getvalue())
    pysam.tabix_compress(str(plain), str(path), force=True)
    plain.unlink()
    return n_alts


def generate(workdir: Path, n_records: int) -> tuple[Path, Path, int]:
    rng = np.random.default_rng(SEED)
    n_contigs = max(1, -(-n_records // RECORDS_PER_CONTIG))
    fasta, panel = workdir / "genome.fa", workdir / "clinvar_like.vcf.gz"
    contigs = write_reference(fasta, n_contigs, rng)
    n_alts = write_panel(panel, contigs, n_records, rng)
    return fasta, panel, n_alts


def write_tsv_panel(vcf: Path, out: Path) -> Path:
    """The VCF's records as a TSV panel: chrom, pos, id, ref, alt and `INFO_FIELDS` as columns."""
    with gzip.open(vcf, "rt") as records, open(out, "w") as table:
        table.write("\t".join(["chrom", "pos", "id", "ref", "alt", *INFO_FIELDS]) + "\n")
        for line in records:
            if line.startswith("#"):
                continue
            chrom, pos, vid, ref, alt, _, _, info = line.rstrip("\n").split("\t")
            values = dict(item.split("=", 1) for item in info.split(";"))
            fields = [chrom, pos, vid, ref, alt, *(values.get(key, "") for key in INFO_FIELDS)]
            table.write("\t".join(fields) + "\n")
    return out


def check_panel_options(panel_format: str) -> list[str]:
    """OPTIONS for the panel's format (a table carries its columns: no INFO fields to ask)."""
    return OPTIONS if panel_format == "vcf" else ["--format", panel_format, *LABEL_OPTIONS]


# ---- measurement ---------------------------------------------------------------------------
def baseline_tree(commit: str, into: Path) -> Path:
    """The package source of `commit`, extracted (git archive) under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def run_check_panel(
    src: Path, fasta: Path, panel: Path, out: Path, options: list[str] = OPTIONS
) -> dict:
    """One check-panel of the package at `src` in a fresh process: wall s, peak RSS MB."""
    env = {**os.environ, "PYTHONPATH": str(src), "CARBON_VEP_INTERFACE": "cli"}
    command = [
        sys.executable,
        "-m",
        "carbon_vep.cli",
        "check-panel",
        "--panel",
        str(panel),
        "--reference",
        str(fasta),
        *options,
        "--out",
        str(out / "checked.parquet"),
        "--summary",
        str(out / "summary.json"),
    ]
    measured = run_command(command, env=env)
    return {"wall_s": round(measured.seconds, 1), "peak_rss_mb": round(measured.peak_rss_mb)}


# Columns the checked table gained on purpose after the baseline commit 838dcef (issue 10
# moved n_copies_in_panel from the merge stage to check-panel).
ADDED_SINCE_BASELINE = {"n_copies_in_panel"}


def same_output(ours: Path, base: Path) -> bool:
    a = pl.read_parquet(ours / "checked.parquet")
    b = pl.read_parquet(base / "checked.parquet")
    added = set(a.columns) - set(b.columns)
    if added - ADDED_SINCE_BASELINE or set(b.columns) - set(a.columns):
        return False
    a = a.drop(added)
    summary_a = json.loads((ours / "summary.json").read_text())
    summary_b = json.loads((base / "summary.json").read_text())
    return a.equals(b) and a.schema == b.schema and summary_a == summary_b


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument(
        "--baseline", default="838dcef", help="commit to compare with ('none': ours only)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary one")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--panel-format", choices=["vcf", "tsv"], default="vcf")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        fasta, panel, n_rows = generate(workdir, args.records)
        if args.panel_format == "tsv":
            panel = write_tsv_panel(panel, workdir / "clinvar_like.tsv")
        print(
            f"generated {args.records:,} records ({n_rows:,} ALTs) in "
            f"{time.perf_counter() - start:.0f} s: {panel}",
            flush=True,
        )
        if args.generate_only:
            return
        versions = [("ours", ROOT / "src")]
        if args.baseline != "none":
            versions.append((f"baseline {args.baseline}", baseline_tree(args.baseline, Path(tmp))))
        results = {}
        for name, src in versions:
            out = Path(tmp) / name.replace(" ", "_")
            out.mkdir()
            options = check_panel_options(args.panel_format)
            results[name] = {"src": out, **run_check_panel(src, fasta, panel, out, options)}
            print(
                f"{name}: {results[name]['wall_s']} s, {results[name]['peak_rss_mb']} MB peak RSS",
                flush=True,
            )
        if args.baseline == "none":
            print(
                json.dumps(
                    {k: {m: v for m, v in r.items() if m != "src"} for k, r in results.items()}
                )
            )
            return
        ours, base = results["ours"], results[f"baseline {args.baseline}"]
        identical = same_output(ours.pop("src"), base.pop("src"))
        print(
            f"\ncheck-panel of a {args.panel_format}, {args.records:,} records, {n_rows:,} rows "
            f"(identical output: {identical})\n"
        )
        header = [
            "code",
            "rows",
            "wall s",
            "peak RSS MB",
            "bytes/row",
            "speed vs baseline",
            "memory vs baseline",
        ]
        rows = [
            [
                name,
                f"{n_rows:,}",
                r["wall_s"],
                f"{r['peak_rss_mb']:,}",
                f"{r['peak_rss_mb'] * 2**20 / n_rows:,.0f}",
                f"{base['wall_s'] / r['wall_s']:.2f}x",
                f"{base['peak_rss_mb'] / r['peak_rss_mb']:.1f}x less",
            ]
            for name, r in results.items()
        ]
        print(markdown_table(header, rows))
        payload = {
            "records": args.records,
            "rows": n_rows,
            "panel_format": args.panel_format,
            "identical_output": identical,
        }
        write_json(args.json, payload | results)
        if not identical:
            sys.exit("the two versions wrote different outputs")


if __name__ == "__main__":
    main()
