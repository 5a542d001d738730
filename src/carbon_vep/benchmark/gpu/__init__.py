"""Every GPU measurement in one run: `make gpu-check` (`python -m carbon_vep.benchmark.gpu`).

On the device it finds (CUDA when there is one; `--smoke`: the CPU at toy sizes, what the test
suite runs), in one process and within `--budget-s` (420 s by default, sized for 8 minutes on an
H100 with start-up included; docs/gpu.md has the arithmetic):

1. the bf16 matmul peak of this device, measured (square 8,192 matmuls);
2. random-weight models with Carbon-3B's and Carbon-500M's exact shapes (no download), bf16,
   through the package's own code on a synthetic genome: `score` centered (full_vocab with and
   without prefix sharing, dna_block), fns, nexttoken (acgt_strings, dna_block), the genome
   `scan-chunk`, sequence recovery and perturbation pairs. Per path: tokens/s, bp/s (bases
   through the model), variants/s (SNVs/s for the scan, prompts/s, pairs/s), the fraction of
   the measured peak (matmul FLOPs the path must do: body, attention, output rows used),
   peak allocated memory; for the scan the share of wall time outside the forward pass and the
   device's idle share while the host builds and writes rows;
3. each GPU cost the code removed, before and after on the same inputs (the loops as they were
   live in benchmark/published.py): the attention mask on equal-length batches, a host read per
   item, writing on the scan's thread, per-tile copies; and what `upcast_output_layer` costs;
   host synchronisations per run counted by CUDA's sync debug mode;
4. bf16 against float32 on the same inputs and weights (Spearman of the scores, max and median
   absolute difference of the raw log-likelihoods, with and without upcast_output_layer), and
   the AUROC of a trained known-answer model (carbon_vep/benchmark/known_answer.py) in each;
5. torch-profiler top-10 tables of the Carbon-3B centered and scan paths;
6. the generation tasks on vLLM against our engine: a Genomic-NIAH cell at 32k, 64k and 128k
   tokens through `score-niah` on each engine (vLLM from `--vllm-python`, default
   .venv-vllm/bin/python), rows/s, vLLM's KV cache and prefix-cache reads, the two engines'
   agreement in bf16, the arithmetic of config/gpus.py beside them.

Writes `gpu_check.json`, `gpu_check.md` (a section for docs/benchmarks.md) and the profiler
tables under `--out`, after every step (a run cut short keeps what it measured).

Usage: python -m carbon_vep.benchmark.gpu --out DIR [--smoke] [--budget-s 420] [--device cuda]
       [--vllm-python PATH|none] [--generation-only]

One module a phase: `device` (clocks, budget, counters, the matmul peak, profiles), `workload`
(sizes, models, inputs), `paths` (2), `ablations` (3), `precision` (4), `generation` (6),
`report` (the JSON and Markdown), `run` (the steps in order).
"""
