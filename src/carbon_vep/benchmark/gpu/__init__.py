"""Every GPU measurement in one run: `make gpu-check` (`python -m carbon_vep.benchmark.gpu`), and
on the lent device machine `scripts/gpu_run.sh` with the kit of `make gpu-kit` (`kit`).

On the device it finds (CUDA when there is one; `--smoke`: the CPU at toy sizes, what the test
suite runs through scripts/gpu_run.sh), in one process and within `--budget-s` (420 s by
default; the whole check took 355 s on an H100), after the device's bf16 matmul peak, the steps
in order of value (`run.STEPS`; `--steps` picks some, so a second run takes what a first
skipped):

0. `product`: the product's own jobs, first: Snakemake on the Snakefile with a GPU config (bf16,
   the H100 profile's batch_tokens and prefill_chunk), every rule that runs a model, each job
   through `carbon-vep` as a cluster job runs it, reported per rule from the jobs' own records
   (a failed job fails the check);
1. `precision`: bf16 against float32 on every scoring path, with and without
   upcast_output_layer (Spearman of the scores, log-likelihood differences);
2. `centered`, `scan`: the Carbon-3B centered recipe and genome scan chunk (tokens/s, % of the
   measured peak, SNVs/s and the hg38 GPU-hours they imply, memory, the scan's idle shares);
3. `niah`: Genomic-NIAH on our engine at 32k/64k/128k tokens against the published three
   passes (seconds a row, memory, same answers; `--niah-prefill-chunks`);
4. `paths`: every other Carbon-3B path (recipes, recovery, perturbation);
5. `ablations`: each GPU cost the code removed, before and after on the same inputs;
6. `profiles`: torch-profiler tables of the centered and scan paths;
7. `vllm`: the generation tasks on vLLM against our engine, whole jobs per engine;
8. `known_answer`: a trained motif model's AUROC in float32, bf16 and bf16 + upcast;
9. `carbon_500m`: every path with Carbon-500M's shape.

Random-weight models with Carbon's exact shapes (no download), a locally built tokenizer of
Carbon's layout, a synthetic genome. Writes `gpu_check.json`, `gpu_check.md` (a section for
docs/benchmarks.md) and the profiler tables under `--out`, after every step (a run cut short
keeps what it measured).

One module a phase: `product` (the product's jobs through Snakemake; `product_setup` its
checkpoints, inputs and config), `device` (clocks, budget, counters, the matmul peak, profiles,
the GPU at hand sized from itself), `workload` (sizes, models, inputs), `paths`, `ablations`,
`precision`, `niah`, `generation` (vLLM), `report` (the JSON and Markdown), `run` (the steps in
order); `kit` builds the device kit.
"""
