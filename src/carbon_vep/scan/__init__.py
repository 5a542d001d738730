"""Whole-genome and region scans, every possible SNV scored in one forward pass per tile: the
targets and their ACGT runs (`targets`), the plan (`plan`: chunks, output files, estimates),
tile geometry (`tiling`),
the tile loop on the model (`tiles`, writing on a worker thread: `background`), per-SNV values
(`snvs`: scores, printed keys, context cells), the calibration (`calibrate`: counts, PHRED rank
scales, context means), the outputs (`outputs`: chunk files, the merge into Parquet files,
the tabix TSVs, the summary, `scan.json`), and each scan command's job from its files to its
files (`jobs`, what `cli.scan` calls).

May import: `model`, `variants`, `sources`, `config`, `genome` and the shared modules. Only
`tiles` imports torch (and `jobs`, through it, in the two model jobs).
"""

# a calibration folder (scan.calibrate writes it; workflow.paths names it for the rules): the
# rank scales, the context means, and the summary written last
RAW_TABLE, CALIBRATED_TABLE = "phred.parquet", "calibrated_phred.parquet"
CONTEXTS_TABLE, SUMMARY_FILE = "contexts.parquet", "calibration.json"
