"""Variant panels scored: the checked panel cut into shards with their windows (`make_shards`),
one shard with its recipe's function (`shard`, on the model), the shard scores joined back onto
every checked row (`merge`), and a panel scored by lookup in a scan's outputs without a model
(`annotate`).

May import: everything below it (`evaluate`, `scan`, `model`, `variants`, `sources`, `config`,
`genome`, shared modules). Only `shard` imports torch.
"""
