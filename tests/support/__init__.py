"""Helpers shared by the tests (on the path through pytest's `pythonpath`): input files
(`files`), the engine's loops as they were before its GPU costs were removed
(`engine_as_it_was`) and the host reads they made (`host_reads`), running the real Snakefile
(`cluster`), a hand-made Hub cache (`hub`) and the local SLURM (`slurm`)."""
