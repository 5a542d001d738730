"""The zero-shot suite's tasks other than variant panels: task files (`tasks`), sequence
recovery (`recovery`; its rollouts on our engine: `rollouts`) and perturbation pairs
(`perturbation`), each ending in a metrics JSON that the results table reads; `jobs` holds each
task kind's job (config.tasks declares the kinds).

May import: `evaluate`, `scan`, `model`, `variants`, `config`, `genome` and the shared modules.
"""
