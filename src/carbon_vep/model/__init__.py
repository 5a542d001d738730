"""The language model: loading a checkpoint through transformers (`loading`), the one tokenizer
adapter (`tokens`), the usable context in bases and its refusal (`context`: no torch, the scan's
plan reads it too), forward passes and the quantities the recipes need without full-vocabulary
logits (`engine`; window groups many a forward pass, prefixes shared: `window_groups`; the last
layer at the positions a pass reads: `last_layer`), the out-of-memory backoff and batches by
tokens (`batching`), clocks on the device's timeline (`timing`), greedy decoding with the step
kept on the device and replayed as a CUDA graph (`captured_decode`; with a draft model,
`captured_drafting`), the output layer's start-up probe (`probe`), a job's model checked, loaded
and probed (`job`) and counted (`job_record`: load time, tokens, peak memory, one record a job),
and the tiny demo model (`demo`, with its tokenizer shipped as remote code in `assets/`).

May import: `sources`, `config`, `genome` and the shared modules. The only sub-package (with
`scan.tiles`, `scoring.shard` and `suite`) that imports torch.
"""
