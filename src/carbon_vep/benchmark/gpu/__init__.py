"""Every GPU measurement in one run: `make gpu-check` (`python -m carbon_vep.benchmark.gpu`), and
on the lent device machine `scripts/gpu_run.sh` with the kit of `make gpu-kit` (`kit`).

On the device it finds (CUDA when there is one; `--smoke`: the CPU at toy sizes, what the test
suite runs through scripts/gpu_run.sh), within `--budget-s` (420 s by default), after the
device's bf16 matmul peak, the steps in order of value (`run.STEPS`; `--steps` picks some, so a
second run takes what a first skipped). What is measured is what ships: every figure a job can
give comes from the product's own jobs.

0. `product`: Snakemake on the Snakefile with a GPU config (bf16, the H100 profile's
   batch_tokens and prefill_chunk), every rule that runs a model, each job through `carbon-vep`
   as a cluster job runs it, reported per rule from the jobs' own records (tokens/s, share of
   the peak, memory; the scan's hg38 GPU-hours), beside the official scripts' approach on the
   same checkpoint and inputs (a failed job fails the check);
1. `profiles`, `compiled_layers`, `batch_budgets`, `precision`, and last `carbon_500m`: the
   product's workflow again with one thing changed (torch's profiler on the jobs; the decoder
   layers compiled; another token budget and shard size; float32; Carbon-500M's shape),
   its answers compared with the product's (`reruns`);
   `rollouts`: long rollouts as recovery jobs on the product's checkpoints (alone, batched,
   drafted);
2. what no product job gives: `vllm` (a NIAH job on each engine, on a model saved here),
   `host_memory` (a fresh process's load), `known_answer` (a model trained in this process,
   scored by the product's jobs).

Random-weight models with Carbon's exact shapes (no download), a locally built tokenizer of
Carbon's layout, a synthetic genome. Writes `gpu_check.json`, `gpu_check.md` (a section for
docs/benchmarks.md) and the jobs' profiler tables under `--out`, after every step (a run cut
short keeps what it measured).

One module a step or role: `product` (the product's jobs through Snakemake; `product_setup` its
checkpoints, inputs and config; `product_reference` the official approach beside it),
`reruns`, `rollouts`, `generation` (vLLM), `host_memory`, `known_answer`, `device` (budget, the
GPU at hand sized from itself), `workload` (the random-weight models and the inputs built here),
`report` (the JSON and Markdown), `run` (the steps in order); `kit` builds the device kit.
"""
