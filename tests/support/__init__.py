"""Helpers shared by the tests (on the path through pytest's `pythonpath`): input files
(`files`), the published full-logits reference implementation (`naive`), running the real
Snakefile (`cluster`), a hand-made Hub cache (`hub`) and the local SLURM (`slurm`)."""
