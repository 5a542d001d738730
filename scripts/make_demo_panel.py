"""Write resources/demo/demo_panel.vcf: SNVs on the shipped 40 kbp chr17 fragment, plus the
bad rows users really send (multi-allelic, REF mismatch, indel, symbolic, N allele, duplicate
with a conflicting label, sites at the fragment's ends).

LABEL is derived from the FASTA itself: 1 for sites in unmasked sequence, 0 for sites in
soft-masked (lowercase, repeat) sequence. It is a real annotation, not a pathogenicity label:
the demo's metrics show the pipeline works, not how good a model is.

Run: python scripts/make_demo_panel.py  (deterministic; the output is committed)
"""

from __future__ import annotations

import random
from pathlib import Path

import pysam

ROOT = Path(__file__).resolve().parents[1]
FASTA = ROOT / "resources/demo/chr17.hg19.part.fa"
OUT = ROOT / "resources/demo/demo_panel.vcf"
PANEL_CONTIG = "17"  # the FASTA says chr17: the panel uses Ensembl naming on purpose
N_SITES = 36

HEADER = f"""##fileformat=VCFv4.2
##source=carbon-vep scripts/make_demo_panel.py
##reference=chr17.hg19.part.fa (40 kbp of hg19 chr17, pyfaidx examples)
##contig=<ID={PANEL_CONTIG},length={{length}}>
##INFO=<ID=LABEL,Number=1,Type=Integer,Description="1 = unmasked sequence, 0 = soft-masked repeat">
##INFO=<ID=NOTE,Number=1,Type=String,Description="Why this row is in the demo">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO"""


def main() -> None:
    fasta = pysam.FastaFile(str(FASTA))
    seq = fasta.fetch(fasta.references[0])
    length = len(seq)
    rng = random.Random(17)
    rows: list[tuple[int, str, str, str]] = []  # pos, ref, alt, info
    sites = sorted(rng.sample(range(5000, length - 5000), N_SITES))
    for i, pos0 in enumerate(sites):
        base = seq[pos0]
        if base.upper() not in "ACGT":
            continue
        label = 0 if base.islower() else 1
        others = [b for b in "ACGT" if b != base.upper()]
        alts = others if i % 6 == 0 else [rng.choice(others)]  # every 6th site: all three ALTs
        rows.append((pos0 + 1, base.upper(), ",".join(alts), f"LABEL={label}"))
    # edge cases users send
    for pos0, note in ((29, "near_contig_start"), (length - 3, "near_contig_end"),
                       (length - 1, "last_base_of_contig")):  # fmt: skip
        base = seq[pos0]
        label = 0 if base.islower() else 1
        alt = "ACGT".replace(base.upper(), "")[0]
        rows.append((pos0 + 1, base.upper(), alt, f"LABEL={label};NOTE={note}"))
    rows += [
        (sites[1] + 1, "ACGT".replace(seq[sites[1]].upper(), "")[0], "T", "NOTE=ref_mismatch"),
        (sites[2] + 1, seq[sites[2]].upper(), seq[sites[2]].upper() + "T", "NOTE=insertion"),
        (sites[3] + 1, seq[sites[3]].upper(), "<DEL>", "NOTE=symbolic"),
        (sites[4] + 1, seq[sites[4]].upper(), "N", "NOTE=non_acgt_alt"),
    ]
    dup_pos, dup_ref, dup_alt, dup_info = rows[5]
    flipped = "LABEL=0" if "LABEL=1" in dup_info else "LABEL=1"
    rows.append((dup_pos, dup_ref, dup_alt.split(",")[0], f"{flipped};NOTE=conflicting_duplicate"))
    rows.sort(key=lambda r: r[0])
    body = [
        f"{PANEL_CONTIG}\t{pos}\t.\t{ref}\t{alt}\t.\tPASS\t{info}" for pos, ref, alt, info in rows
    ]
    OUT.write_text(HEADER.format(length=length) + "\n" + "\n".join(body) + "\n")
    print(f"wrote {OUT} ({len(rows)} records)")


if __name__ == "__main__":
    main()
