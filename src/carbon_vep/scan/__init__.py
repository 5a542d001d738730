"""Whole-genome and region scans, every possible SNV scored in one forward pass per tile: the
targets and their ACGT runs (`targets`), the plan (`plan`: chunks, output files, estimates),
tile geometry (`tiling`), the tile loop on the model (`tiles`, writing on a worker thread:
`background`), per-SNV values (`snvs`: scores, printed keys, context cells), the outputs: chunk
files and their merge into Parquet files (`positions`), their SNVs counted per context cell
(`counts`), the calibration from the counts (`calibrate`: PHRED rank scales, context means), the
tabix TSVs (`tsv`), the summary and `scan.json` (`record`); and each scan command's job from its
files to its files (`jobs`, what `cli.scan` calls).

May import: `model`, `variants`, `sources`, `config`, `genome` and the shared modules. Only
`tiles` imports torch (and `jobs`, through it, in the two model jobs).
"""

# a calibration folder (scan.calibrate writes it; workflow.paths names it for the rules): the
# rank scales, the context means, and the summary written last
RAW_TABLE, CALIBRATED_TABLE = "phred.parquet", "calibrated_phred.parquet"
CONTEXTS_TABLE, SUMMARY_FILE = "contexts.parquet", "calibration.json"
