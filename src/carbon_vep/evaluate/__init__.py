"""Numbers about scores: the zero-shot VEP metrics with bootstrap intervals (`metrics`), the
counts of how their rows are labelled (`label_counts`) and the comparison gate of a results
table against a stored baseline (`compare`).

May import: `config`, `genome` and the shared modules. No torch.
"""
