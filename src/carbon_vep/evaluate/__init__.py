"""Numbers about scores: the zero-shot VEP metrics (`metrics`), their bootstrap intervals
(`bootstrap`: a resample's label metrics from rows sorted once), the counts of how their rows
are labelled (`label_counts`) and the comparison gate of a results table against a stored
baseline (`compare`).

May import: `config`, `genome` and the shared modules. No torch.
"""
