"""Where inputs come from and proof of what they were: models in the offline Hugging Face Hub
cache (`hub`), public data files from a pinned URL or the Hub (`download`), and the sha256 of
every input a result depends on (`inputs`).

May import: `config`, `genome` and the shared modules. No torch.
"""
