#!/usr/bin/env bash
# The GPU check on the lent device machine, in one `run` call (docs/gpu.md#the-lent-device-machine-make-gpu-kit-scriptsgpu_runsh):
#   bash scripts/gpu_run.sh [flags of python -m carbon_vep.benchmark.gpu, e.g. --steps vllm]
# The kit (.whl/, from `make gpu-kit` here, carried with the call) is installed into
# $GPU_KIT_SITE (/tmp/site) as the device README says (no index, no dependencies, --target);
# then the check runs, unbuffered, with its results, the product step's Snakemake log and this log
# under $OUT (6 files; at most 8 come back); it exits 1 when a job of the product failed.
# GPU_PYTHON (python3: the image's, with torch + CUDA), GPU_KIT (.whl) and GPU_BUDGET_S (520)
# may be set; the CPU rehearsal (tests/test_gpu_check_smoke.py) runs this script with --smoke.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-results/gpu_run}
site=${GPU_KIT_SITE:-/tmp/site}
python=${GPU_PYTHON:-python3}
mkdir -p "$out"
log=$out/gpu_run.log
{
    echo "[gpu_run] $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -n), $(nproc) cores"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit \
        --format=csv 2>&1 || echo "[gpu_run] no nvidia-smi"
    "$python" --version
} 2>&1 | tee "$log"
shopt -s nullglob
kit_dir=${GPU_KIT:-.whl}
kit=("$kit_dir"/*.whl "$kit_dir"/*.whl.xz)
if ((${#kit[@]} == 0)); then
    echo "[gpu_run] no kit in $kit_dir/: run 'make gpu-kit' and carry .whl with the call" | tee -a "$log"
    exit 2
fi
# the large wheels travel xz-compressed (carbon_vep/benchmark/gpu/kit.py: pack): unpacked here
unpacked=${site}.wheels
mkdir -p "$unpacked"
"$python" -c "import lzma, pathlib, shutil, sys
for packed in map(pathlib.Path, sys.argv[2:]):
    with lzma.open(packed) as source, open(pathlib.Path(sys.argv[1]) / packed.stem, 'wb') as out:
        shutil.copyfileobj(source, out)" "$unpacked" "$kit_dir"/*.whl.xz 2>&1 | tee -a "$log" || exit 3
wheels=("$kit_dir"/*.whl "$unpacked"/*.whl)
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "${wheels[@]}" 2>&1 | tee -a "$log" || exit 4
export PYTHONPATH="$site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# the kit is installed without bytecode (--no-compile: all of transformers would be compiled);
# each module a job imports is compiled once, by the first process, and cached beside it
unset PYTHONDONTWRITEBYTECODE
"$python" -c "import torch, transformers, polars, pysam, snakemake, carbon_vep.benchmark.gpu.run
from importlib.metadata import version
print('[gpu_run] torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.is_available(),
      '| transformers', transformers.__version__, '| polars', polars.__version__,
      '| pysam', pysam.__version__, '| snakemake', version('snakemake'))" 2>&1 | tee -a "$log" || exit 5
vllm=()
if ! "$python" -c "import vllm" 2>/dev/null; then
    vllm=(--vllm-python none --no-vllm-reason "no vLLM on the lent machine: its CUDA wheel \
(vllm 0.32.0, 311 MiB) is far over the 64 MiB one device call carries and the machine has no \
network; on a cluster, VLLM_PACKAGE=vllm==0.32.0 make setup-vllm")
fi
"$python" -m carbon_vep.benchmark.gpu --out "$out" --budget-s "${GPU_BUDGET_S:-520}" \
    "${vllm[@]}" "$@" 2>&1 | tee -a "$log"
