"""The memory arithmetic behind the GPU profiles' batch sizes (config/gpus.py)."""

from __future__ import annotations

import pytest
import yaml
from support.cluster import ROOT

from carbon_vep.config.gpus import (
    CARBON_SHAPES,
    GPU_CLASSES,
    body_parameters,
    bytes_per_token,
    host_memory_mb,
    memory_batch_tokens,
    prefill_flops,
    profile_batch_tokens,
    weight_bytes,
)


def test_shapes_have_carbons_parameter_counts():
    """2.973 B and 0.352 B non-embedding parameters, 6.90 GB of bf16 weights for Carbon-3B with
    its 478.5 M-parameter tied embedding (docs/gpu.md)."""
    assert round(body_parameters(CARBON_SHAPES["Carbon-3B"]) / 1e9, 3) == 2.973
    assert round(body_parameters(CARBON_SHAPES["Carbon-500M"]) / 1e9, 3) == 0.352
    assert round(weight_bytes(CARBON_SHAPES["Carbon-3B"]) / 1e9, 2) == 6.90


def test_prefill_flops_with_the_last_layer_kept_at_the_positions_read():
    """A 1-layer toy counted by hand: q, o 2 x 4 x 4, k, v 2 x 4 x 2, MLP 3 x 4 x 8 parameters
    (2 FLOPs each); 4 x 2 x 2 FLOPs a query-key pair (2 heads of 2); a causal 3-token pass has 6
    pairs. Kept at the last token: k and v for 3 tokens, the rest for 1, its 3 pairs."""
    toy = {
        "hidden_size": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 2,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
    }
    per_token, kv, pair = 2 * (32 + 16 + 96), 2 * 16, 16
    assert prefill_flops(toy, 3) == 3 * per_token + 6 * pair
    assert prefill_flops(toy, 3, 1) == 3 * kv + (per_token - kv) + 3 * pair
    assert prefill_flops(toy, 3, 0) == 3 * kv
    assert prefill_flops(toy, 3, 3) == prefill_flops(toy, 3, 5) == prefill_flops(toy, 3)
    two = toy | {"num_hidden_layers": 2}  # only the last layer is cut
    assert prefill_flops(two, 3, 1) == prefill_flops(toy, 3) + prefill_flops(toy, 3, 1)
    carbon = CARBON_SHAPES["Carbon-3B"]  # 30 layers: about a thirtieth saved
    assert 1.03 < prefill_flops(carbon, 131_072) / prefill_flops(carbon, 131_072, 1) < 1.04


def test_bytes_per_token_is_a_layer_and_the_kv_cache():
    # 3 x 8,448 x 2 (MLP) + 3 x 3,072 x 2 (residual) + 2 x 30 x 4 x 96 x 2 (KV cache)
    assert bytes_per_token(CARBON_SHAPES["Carbon-3B"]) == 50_688 + 18_432 + 46_080


def test_host_memory_is_the_weights_in_their_dtype_and_a_reserve():
    """Carbon-3B in bf16: 4 GB + 6.90 GB = 10.9 GB, asked as 11,000 MB (measured on an H100:
    8.90 GB peak); in float32 (a CPU run) 4 + 13.8 GB; Carbon-8B's 15.2 GB of bf16 weights:
    20,000 MB (measured 17.24 GB); a model not built yet: the reserve alone."""
    shape = CARBON_SHAPES["Carbon-3B"]
    assert host_memory_mb(shape, "bfloat16") == 11_000
    assert host_memory_mb(shape, "float16") == 11_000
    assert host_memory_mb(shape, "float32") == 18_000
    assert host_memory_mb(CARBON_SHAPES["Carbon-8B"], "bfloat16") == 20_000
    assert host_memory_mb(CARBON_SHAPES["Carbon-500M"], "bfloat16") == 6_000
    assert host_memory_mb(None, "bfloat16") == 4_000
    tiny = dict(shape, vocab_size=4_104, num_hidden_layers=1)
    assert host_memory_mb(tiny, "bfloat16") < host_memory_mb(shape, "bfloat16")


def _profile_config(name: str) -> dict[str, str]:
    profile = yaml.safe_load((ROOT / f"profiles/{name}/config.yaml").read_text())
    return dict(item.split("=", 1) for item in profile["config"])


def test_gpu_profiles_set_the_batch_their_memory_holds():
    for name, gpu in (("slurm-a10", "A10"), ("slurm-h100", "H100")):
        tokens = int(_profile_config(name)["batch_tokens"])
        memory = GPU_CLASSES[gpu].memory_gb
        assert tokens == profile_batch_tokens(memory)
        # fits Carbon-500M and -3B, with the margin (not Carbon-8B on an A10: 15.2 GB of weights
        # + 65,536 tokens x 242 kB = 31 GB; its batches halve on OOM there)
        for shape in (CARBON_SHAPES["Carbon-500M"], CARBON_SHAPES["Carbon-3B"]):
            assert tokens <= memory_batch_tokens(memory, shape)
            need = weight_bytes(shape) + tokens * bytes_per_token(shape)
            assert need < memory * 1e9
    assert int(_profile_config("slurm-a10")["batch_tokens"]) == 65_536
    assert int(_profile_config("slurm-h100")["batch_tokens"]) == 131_072
    assert _profile_config("slurm-local") == {"batch_tokens": "0"}  # CPU jobs: batch_size


def test_a_gpu_class_is_read_from_device_and_profile_names():
    """The longest class name wins: an A100 (its name contains "A10") is not taken for an A10."""
    from carbon_vep.config.gpus import gpu_class_named
    from carbon_vep.config.workflow import profile_gpu_class

    for name, gpu in (
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("a100", "A100"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", "A10"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("Tesla V100", None),
    ):
        assert gpu_class_named(name) == gpu, name
    assert profile_gpu_class({"gpu_model": "'a100'"}) == "A100"
    assert profile_gpu_class({"gpu_model": "a10"}) == "A10" and profile_gpu_class({}) is None


def test_the_h200_is_a_class_and_any_gpu_is_sized_from_itself():
    """The H200 at the memory CUDA reported on the lent machine (143,771 MiB); a GPU no class
    names is sized from its own memory and measured peak, and its NIAH arithmetic follows."""
    from carbon_vep.config.gpus import (
        device_gpu_class,
        niah_row_seconds,
        vllm_niah_plan,
    )

    assert round(GPU_CLASSES["H200"].memory_gb, 1) == round(143_771 * 2**20 / 1e9, 1)
    assert profile_batch_tokens(GPU_CLASSES["H200"].memory_gb) == 131_072  # saturating
    shape = CARBON_SHAPES["Carbon-8B"]
    v100 = device_gpu_class(34_089_730_048, 112.0)  # a 32 GB card no class names
    assert v100.memory_gb == 34.089730048 and v100.bf16_tflops == 112.0
    h100 = niah_row_seconds(CARBON_SHAPES["Carbon-3B"], 32_768, "H100")
    assert niah_row_seconds(CARBON_SHAPES["Carbon-3B"], 32_768, v100) == pytest.approx(
        h100 * 800 / 112
    )
    assert (
        vllm_niah_plan(shape, 4096, v100)["kv_cache_gb"]
        < vllm_niah_plan(shape, 4096, "H100")["kv_cache_gb"]
    )
