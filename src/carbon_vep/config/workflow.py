"""What the Snakefile needs from the package while it parses: the demo config and the
shipped inputs' paths, and the check that a GPU profile runs models on CUDA.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from carbon_vep.config.fields import ConfigError
from carbon_vep.config.stages import ModelSettings
from carbon_vep.config.tasks import TASK_KINDS

# the rules that run a model (a GPU profile gives each of them a GPU)
MODEL_RULES = (
    "score_shard",
    "scan_chunk",
    *(kind.rule for kind in TASK_KINDS.values()),
    "score_niah",
)
# the GPU class a CUDA model's time is reckoned on when the profile names none (the smallest of
# the profiles', so a time limit or an estimate errs long)
DEFAULT_GPU_CLASS = "A10"


def profile_gpu_class(resources: Mapping[str, Any]) -> str | None:
    """The GPU class (config.gpus.GPU_CLASSES) a profile's `gpu_model` names, if one."""
    from carbon_vep.config.gpus import gpu_class_named

    return gpu_class_named(str(resources.get("gpu_model", "")).strip("'\""))


_UNITS = {"s": 1 / 60, "m": 1.0, "h": 60.0, "d": 1440.0}


def profile_runtime_minutes(resources: Mapping[str, Any]) -> float | None:
    """A job's time limit at its first attempt, in minutes, from a profile's `runtime`: minutes
    (a number), `N * attempt`, or a span with units ("2h", "1h30m"); None where none is given
    or the expression is another (the workflow's own, or one this does not read)."""
    raw = str(resources.get("runtime", "")).strip().strip("'\"").replace(" ", "")
    if not raw:
        return None
    times = re.fullmatch(r"(\d+(?:\.\d+)?)\*attempt|attempt\*(\d+(?:\.\d+)?)", raw)
    if times:
        return float(times.group(1) or times.group(2))
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        return float(raw)
    spans = re.findall(r"(\d+(?:\.\d+)?)([smhd])", raw)
    if spans and "".join(n + u for n, u in spans) == raw:
        return sum(float(n) * _UNITS[u] for n, u in spans)
    return None


def check_niah_profile(resources: Mapping[str, Any], run: Any) -> None:
    """Every Genomic-NIAH cell a CUDA model runs must fit the GPU class the profile gives
    score_niah: on our engine, memory arithmetic at one row, continuations one after the other
    (the least the scorer can do); on vLLM, a row's prompt in the KV cache left by the weights
    at its gpu_memory_utilization over tensor_parallel_size GPUs. Refused while the config is
    read, with the figure and what to change."""
    from carbon_vep.config.gpus import NIAH_SHAPES, niah_shape

    gpu = profile_gpu_class(resources)
    if gpu is None:
        return
    for key, entry in run.niah.items():
        for model_key in run.entry_models(entry):
            model = run.models[model_key]
            if not model.device.startswith("cuda"):
                continue
            shape = niah_shape(model.path)
            for ctx in sorted(entry.contexts):
                where = f"niah.{key}: a {ctx:,}-token cell of model {model_key} ({shape})"
                if model.engine == "vllm":
                    _check_vllm_cell(where, NIAH_SHAPES[shape], ctx, gpu, model)
                else:
                    _check_cell(where, NIAH_SHAPES[shape], ctx, gpu, entry.niah.prefill_chunk)


def _check_cell(where: str, shape: dict, ctx: int, gpu: str, prefill_chunk: int) -> None:
    from carbon_vep.config.gpus import GPU_CLASSES, niah_memory_bytes

    need = niah_memory_bytes(shape, ctx, prefill_chunk)["total"] / 1e9
    if need > GPU_CLASSES[gpu].memory_gb:
        raise ConfigError(
            f"{where} needs ~{need:.1f} GB of GPU memory (arithmetic, docs/gpu.md) but the "
            f"profile gives score_niah an {gpu} ({GPU_CLASSES[gpu].memory_gb} GB): run these "
            "contexts under a larger GPU's profile (profiles/slurm-h100) or drop them from "
            "`contexts`"
        )


def _check_vllm_cell(where: str, shape: dict, ctx: int, gpu: str, model: ModelSettings) -> None:
    from carbon_vep.config.gpus import VLLM_PAGE_TOKENS, vllm_niah_plan

    vllm = model.vllm
    plan = vllm_niah_plan(shape, ctx, gpu, vllm.gpu_memory_utilization, vllm.tensor_parallel_size)
    if plan["rows_at_once"] < 1:
        raise ConfigError(
            f"{where} on vLLM needs {ctx:,} tokens of KV cache but {vllm.tensor_parallel_size} "
            f"{gpu}(s) at gpu_memory_utilization {vllm.gpu_memory_utilization} leave "
            f"{max(plan['kv_cache_gb'], 0):.1f} GB for it, "
            f"{plan['pages'] * VLLM_PAGE_TOKENS:,.0f} tokens "
            "(arithmetic, docs/gpu.md#vllm): raise tensor_parallel_size or "
            "gpu_memory_utilization, run these contexts under a larger GPU's profile "
            "(profiles/slurm-h100), or drop them from `contexts`"
        )


def check_gpu_profile(
    rule: str, resources: Mapping[str, Any], models: Mapping[str, ModelSettings]
) -> None:
    """A profile that gives `rule` a GPU (gpu / gpu_model in `resources`, the profile's raw
    values) needs models that run on CUDA: a CPU model would hold a GPU it never touches."""
    requested = [
        name
        for name in ("gpu", "gpu_model")
        if name in resources and str(resources[name]).strip("'\"") not in ("", "0")
    ]
    cpu_models = sorted(k for k, m in models.items() if not m.device.startswith("cuda"))
    if requested and cpu_models:
        raise ConfigError(
            f"the profile gives {rule} a GPU ({', '.join(requested)}), but model(s) "
            f"{', '.join(cpu_models)} have device {models[cpu_models[0]].device!r}: set "
            "`device: cuda` for them, or run them under a profile that sends "
            f"{rule} to a CPU partition (docs/cluster.md)"
        )


def niah_runtime_minutes(ctx: int, rows: int, model_path: str, gpu: str | None) -> int:
    """A score_niah job's time limit: its rows' prefills at the assumed efficiency of the
    profile's GPU class (DEFAULT_GPU_CLASS when none is named), three times over, plus 10
    minutes to load."""
    from carbon_vep.config.gpus import NIAH_SHAPES, niah_row_seconds, niah_shape

    shape = NIAH_SHAPES[niah_shape(model_path)]
    seconds = rows * niah_row_seconds(shape, ctx, gpu or DEFAULT_GPU_CLASS)
    return int(10 + 3 * seconds / 60)


# ---- the demo config and the shipped inputs ----------------------------------------------
DEMO_CONFIG = "config/config.yaml"


# inputs shipped with the workflow: the demo fragment and panels, and the small whole genome
SHIPPED_RESOURCES = ("resources/demo/", "resources/genome/")


def resolve_shipped_resources(config: Any, workflow_dir: str) -> Any:
    """`config` with its paths to the shipped inputs (resources/demo/..., resources/genome/...)
    found under `workflow_dir` (the checkout's root), so that the demo, CI and lambda configs run
    from any working directory and as a Snakemake module. What a run writes (the demo model too)
    stays relative."""
    import os

    if os.path.abspath(workflow_dir) == os.path.abspath(os.curdir):
        return config
    if isinstance(config, dict):
        return {
            key: resolve_shipped_resources(value, workflow_dir) for key, value in config.items()
        }
    if isinstance(config, list):
        return [resolve_shipped_resources(value, workflow_dir) for value in config]
    if isinstance(config, str) and config.startswith(SHIPPED_RESOURCES):
        return os.path.join(workflow_dir, config)
    return config


def demo_config(workflow_dir: str) -> dict[str, Any]:
    """The demo config (what snakemake runs when given no config), read from `workflow_dir`."""
    import os

    import yaml

    with open(os.path.join(workflow_dir, DEMO_CONFIG)) as handle:
        return yaml.safe_load(handle)
