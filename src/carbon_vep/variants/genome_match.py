"""A panel against its reference genome: REF bases fetched a 1 Mb block at a time, why a panel
contig maps to no reference contig, and the build check (REF concordance, the VCF header's
contig lengths, positions off by one) that stops a panel on another build before scoring."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import polars as pl

from carbon_vep.config.run import setting_name
from carbon_vep.errors import PanelUnusableError
from carbon_vep.genome.contigs import ContigAliases
from carbon_vep.genome.reference import Reference
from carbon_vep.variants.policy import CheckPolicy

_FETCH_BLOCK_BP = 1 << 20  # rows are looked up in the reference a block of this size at a time
_SPARSE_BP_PER_ROW = 2_000  # ... unless they are sparser than this: then one fetch per row


def reference_bases(
    reference: Reference, contig: pl.Series, start: pl.Series, end: pl.Series
) -> pl.Series:
    """`reference.fetch(contig[i], start[i], end[i])` for every row (0-based, half-open,
    clipped to the contig; null where contig is null), fetching each 1 Mb block of the genome
    that holds rows once rather than once per row (rows sparser than one per 2 kb are fetched
    one by one: an unsorted panel does not read whole blocks for a row or two each)."""
    frame = (
        pl.DataFrame({"contig": contig, "start": start, "end": end})
        .with_row_index("row")
        .filter(pl.col("contig").is_not_null())
    )
    out: list[str | None] = [None] * contig.len()
    groups = frame.partition_by("contig", as_dict=True)
    # in the reference's order: a Parquet reference reads forward (genome.reference)
    order = {name: i for i, name in enumerate(reference.lengths)}
    for (name,) in sorted(groups, key=lambda key: order[str(key[0])]):
        rows = groups[(name,)]
        length = reference.lengths[str(name)]
        rows = rows.with_columns(
            pl.col("start").clip(0, length), pl.col("end").clip(0, length)
        ).with_columns(pl.max_horizontal("start", "end").alias("end"))
        long = rows.filter(pl.col("end") - pl.col("start") > _FETCH_BLOCK_BP)
        for row, a, b in long.select("row", "start", "end").iter_rows():
            out[row] = reference.fetch(str(name), a, b)
        blocks = (
            rows.filter(pl.col("end") - pl.col("start") <= _FETCH_BLOCK_BP)
            .group_by((pl.col("start") // _FETCH_BLOCK_BP).alias("block"))
            .agg(
                "row",
                "start",
                "end",
                pl.col("start").min().alias("lo"),
                pl.col("end").max().alias("hi"),
            )
        )
        for _, row_ids, starts, ends, lo, hi in blocks.iter_rows():
            if hi - lo > _SPARSE_BP_PER_ROW * len(row_ids):  # a few rows far apart
                for row, a, b in zip(row_ids, starts, ends, strict=True):
                    out[row] = reference.fetch(str(name), a, b)
                continue
            sequence = reference.fetch(str(name), lo, hi)
            for row, a, b in zip(row_ids, starts, ends, strict=True):
                out[row] = sequence[a - lo : b - lo]
    return pl.Series(out, dtype=pl.Utf8)


# Working columns a checked batch carries until the whole panel is checked: whether REF was
# compared with the genome, and the position and REF as compared (for the build check).
REF_CHECKED, CHECKED_POS, CHECKED_REF = (
    "_cvep_ref_checked",
    "_cvep_checked_pos",
    "_cvep_checked_ref",
)
WORKING_COLUMNS = (REF_CHECKED, CHECKED_POS, CHECKED_REF)


def ambiguous_contigs(
    contigs: list[str], mapping: Mapping[str, str], reference: Reference
) -> dict[str, list[str]]:
    """Panel contigs without an exact match that alias to several reference contigs (`Chr17`
    against a FASTA holding both `chr17` and `17`), with the reference contigs they could mean."""
    found, aliases = {}, ContigAliases(reference.contigs)
    for contig in contigs:
        if contig not in mapping:
            hits = aliases.candidates(contig)
            if len(hits) > 1:
                found[contig] = hits
    return found


def unmapped_reasons(contigs: list[str], mapping: Mapping[str, str], reference: Reference):
    """Why each panel contig left out of `mapping` has no reference contig (the row's reason)."""
    ambiguous = ambiguous_contigs(contigs, mapping, reference)
    return {
        contig: (
            f"contig {contig!r} matches several reference contigs {ambiguous[contig]}"
            if contig in ambiguous
            else f"contig {contig!r} not in the reference under any alias"
        )
        for contig in contigs
        if contig not in mapping
    }


def _concordance(checked: pl.DataFrame, reference: Reference, shift: int) -> float:
    """Share of REF-checked rows (ref_chrom, CHECKED_POS, CHECKED_REF) whose input REF equals
    the reference at POS + shift."""
    ref = checked[CHECKED_REF]
    start = checked[CHECKED_POS] - 1 + shift
    genome = reference_bases(reference, checked["ref_chrom"], start, start + ref.str.len_chars())
    return float((genome == ref).mean())


def contig_length_mismatches(
    declared: Mapping[str, int], mapping: Mapping[str, str], reference: Reference
) -> list[str]:
    """Panel contigs whose length in the VCF header differs from the reference's."""
    return [
        f"{contig} is {declared[contig]:,} bp in the panel header but {ref_chrom} is "
        f"{reference.lengths[ref_chrom]:,} bp in the reference"
        for contig, ref_chrom in sorted(mapping.items())
        if declared.get(contig) and declared[contig] != reference.lengths[ref_chrom]
    ]


def _build_hint(policy: CheckPolicy, reference: Reference) -> str:
    declared = f"the dataset declares build {policy.build}; " if policy.build else ""
    return (
        f" {declared}point {setting_name('reference')} at the FASTA of the panel's build, or "
        "lift the panel "
        f"over to the build of {reference.path.name} (e.g. CrossMap, Picard LiftoverVcf)."
    )


def assert_build_matches(
    n_checked: int,
    observed: float | None,
    checked_rows: Callable[[], pl.DataFrame],
    reference: Reference,
    policy: CheckPolicy,
    source: str,
    header_mismatches: Sequence[str],
) -> list[str]:
    """Abort when REF concordance (or the VCF header) says the panel is on another build or
    0-based. `checked_rows()` gives the REF-checked rows, read only when the panel fails or
    has fewer than `policy.min_rows_for_concordance` of them.

    Below that many rows a low concordance may be a few bad rows, so only strong evidence
    aborts (`_conclusive_when_small`); otherwise the check's verdict is returned as a note for
    the summary (a check that could not vouch for the panel is never silent).
    """
    measured = n_checked >= policy.min_rows_for_concordance
    if measured and observed is not None and observed >= policy.min_ref_concordance:
        return []  # enough REF alleles match: a header disagreeing is only a note in the summary
    if not measured and header_mismatches:
        message = (
            f"the panel header's contig lengths disagree with {reference.path}: "
            f"{'; '.join(header_mismatches[:3])}; panel and genome builds differ?"
        )
        raise PanelUnusableError(source, message + _build_hint(policy, reference))
    if observed is None:
        return []  # no REF compared: nothing can be scored, which stops the run on its own
    if not measured and observed >= policy.min_ref_concordance:
        if n_checked >= policy.min_rows_for_evidence:
            return []  # every one (or nearly) of several REF alleles matches: not by chance
        return [  # below min_rows_for_evidence, concordance >= min_ref_concordance: all match
            f"REF was compared with the reference on only {n_checked} row(s), all matching: "
            "too few to confirm the panel's build and 1-based positions"
        ]
    rows = checked_rows()
    shifted = {shift: _concordance(rows, reference, shift) for shift in (1, -1)}
    best_shift = max(shifted, key=lambda s: shifted[s])
    if not measured and not _conclusive_when_small(
        n_checked, observed, shifted[best_shift], policy
    ):
        return [
            f"REF matches {observed:.0%} of only {n_checked} REF-checked rows (minimum "
            f"{policy.min_ref_concordance:.0%}; {shifted[1]:.0%} at POS+1, {shifted[-1]:.0%} at "
            f"POS-1): too few (under {policy.min_rows_for_concordance}) to tell a wrong build or "
            "0-based positions from a few bad rows, so the run goes on; look at the "
            "ref_mismatch rows"
        ]
    message = (
        f"REF matches {observed:.0%} of {n_checked} rows against {reference.path} "
        f"(minimum {policy.min_ref_concordance:.0%}); panel and genome builds differ?"
    )
    if header_mismatches:
        message += f" The panel header agrees: {'; '.join(header_mismatches[:3])}."
    if shifted[best_shift] >= policy.min_ref_concordance:
        hint = "0-based (BED-style)" if best_shift == 1 else "off by one the other way"
        message += (
            f" REF matches {shifted[best_shift]:.0%} at POS{best_shift:+d}: the positions look "
            f"{hint}; add {best_shift} to POS to make them 1-based."
        )
        raise PanelUnusableError(source, message)
    raise PanelUnusableError(source, message + _build_hint(policy, reference))


def _conclusive_when_small(
    n_checked: int, observed: float, shifted: float, policy: CheckPolicy
) -> bool:
    """Whether fewer REF-checked rows than `min_rows_for_concordance`, whose concordance is
    below `min_ref_concordance`, still prove the panel wrong: at least `min_rows_for_evidence`
    of them, and either they match at POS±1 (the concordance a whole panel would need) better
    than at POS (0-based), or no better than `max_chance_concordance` at POS (another build)."""
    if n_checked < policy.min_rows_for_evidence:
        return False
    off_by_one = shifted >= policy.min_ref_concordance and shifted > observed
    return off_by_one or observed <= policy.max_chance_concordance
