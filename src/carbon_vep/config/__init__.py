"""Every setting and recipe, defined once. `fields` is the mechanism (how a setting is declared
as a dataclass field and read from YAML, a rule's `--settings` JSON or the command line);
`stages` holds each stage's settings (a module a stage), `run` the config entries and the
whole-run config, `tasks` the suite's task kinds (each declared once: settings, rule, command,
metrics, sweeps), `task_entry` a task entry of the config (its kind's settings, its sweeps split
off), `schema` the JSON schema generated from them, `workflow` what the Snakefile needs at parse
time, `recipes` the recipe registry (window geometry, normalisations, scorer), and `gpus` the
GPU classes, Carbon's shapes and the arithmetic on them (a profile's batch size, the FLOPs a
token); `niah_grid` Genomic-NIAH's published tasks and contexts and the Hub's names of its
cells.

May import: `genome` and the shared modules. No torch: the Snakefile imports it while parsing.
"""
