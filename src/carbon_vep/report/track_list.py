"""The tracks a scan's browser export writes: names, labels, colours, view limits (report.tracks
writes them; the workflow reads the names while it parses, so nothing heavy is imported here)."""

from __future__ import annotations

from dataclasses import dataclass

from carbon_vep.columns import SCAN_BASES

COLOURS = {"A": "0,150,0", "C": "0,0,200", "G": "210,140,0", "T": "200,0,0"}  # IGV's bases


@dataclass(frozen=True)
class Track:
    """One bigWig: its file stem, short and long labels, colour and view limits (a score
    track's are placeholders until report.tracks.data_views sets them from the scan)."""

    name: str
    short: str
    long: str
    colour: str
    view: tuple[float, float]


def track_set(calibrated: bool) -> list[Track]:
    """Every track a scan gets (PHRED tracks only with a calibration)."""
    tracks = [
        Track(
            f"score_{b}",
            f"score to {b}",
            f"SNV score of a change to {b}: log m(ref) - "
            f"log m({b}), FNS marginals (larger = more damaging)",
            COLOURS[b],
            (-2.0, 6.0),
        )
        for b in SCAN_BASES
    ]
    tracks.append(
        Track(
            "max_score",
            "max score",
            "largest SNV score of the base's three changes",
            "90,90,90",
            (-2.0, 6.0),
        )
    )
    if calibrated:
        tracks += [
            Track(
                f"phred_{b}",
                f"PHRED to {b}",
                f"PHRED of a change to {b}: -10 log10(rank / SNVs of the scan), 20 = top 1%",
                COLOURS[b],
                (0.0, 40.0),
            )
            for b in SCAN_BASES
        ]
        tracks.append(
            Track(
                "max_phred",
                "max PHRED",
                "largest PHRED of the base's three changes",
                "90,90,90",
                (0.0, 40.0),
            )
        )
    surprise = "-log p(reference base), FNS marginals (nats): how unexpected the genome's base is"
    tracks.append(Track("surprise", "surprise", surprise, "120,0,160", (0.0, 4.0)))
    return tracks
