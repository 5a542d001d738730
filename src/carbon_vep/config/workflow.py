"""What the Snakefile needs from the package while it parses: the demo config and the
shipped inputs' paths, and the check that a GPU profile runs models on CUDA.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from carbon_vep.config.fields import ConfigError
from carbon_vep.config.stages import ModelSettings

# the rules that run a model (a GPU profile gives each of them a GPU)
MODEL_RULES = ("score_shard", "scan_chunk", "score_recovery", "score_perturbation")


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
