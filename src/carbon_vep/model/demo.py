"""Build a tiny, randomly initialised stand-in for the Carbon DNA language model.

The directory looks like a Hub checkpoint of HuggingFaceBio/Carbon-3B: a Llama causal LM with
Carbon's 155,776-token vocabulary and the ``HybridDNATokenizer`` shipped as remote code, so stock
``AutoTokenizer.from_pretrained(dir, trust_remote_code=True)`` and
``AutoModelForCausalLM.from_pretrained(dir)`` load it offline.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from carbon_vep import atomic
from carbon_vep.config.gpus import DEMO_MAX_POSITIONS, DEMO_SHAPE
from carbon_vep.model.assets.tokenization_hybrid_dna import HybridDNATokenizer

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer_config.json")
MAX_POSITIONS = DEMO_MAX_POSITIONS
ROPE_THETA = 500_000.0


def is_complete(model_dir: Path) -> bool:
    """True when ``model_dir`` holds a finished demo model."""
    return all((model_dir / name).is_file() for name in REQUIRED_FILES)


def make_tokenizer() -> HybridDNATokenizer:
    """A fresh Carbon-layout tokenizer that saves with an ``auto_map`` and its source file."""
    HybridDNATokenizer.register_for_auto_class("AutoTokenizer")
    return HybridDNATokenizer(model_max_length=MAX_POSITIONS)


def make_config(
    tokenizer: HybridDNATokenizer,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    intermediate_size: int,
) -> LlamaConfig:
    """Llama config with Carbon's vocabulary and special-token ids."""
    eos = tokenizer.eos_token_id
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        architectures=["LlamaForCausalLM"],
        dtype="float32",
    )


def make_model(config: LlamaConfig, seed: int) -> LlamaForCausalLM:
    """Deterministically initialised float32 model; the global RNG state is left untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        do_sample=False,
    )
    return model.eval()


def build_carbon_like_model(out_dir: str | Path, layers: int, hidden: int) -> Path:
    """A random-weight model of Carbon's layout at `layers` x `hidden` (the benchmarks' CPU
    stand-in): 8 query heads on 2 key-value heads (grouped-query, as Carbon), an MLP of 8/3 of
    the width."""
    return build_demo_model(
        out_dir,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=8,
        num_kv_heads=2,
        intermediate_size=hidden * 8 // 3,
        seed=1,
    )


def build_demo_model(
    out_dir: str | Path,
    *,
    hidden_size: int = DEMO_SHAPE["hidden_size"],
    num_layers: int = DEMO_SHAPE["num_hidden_layers"],
    num_heads: int = DEMO_SHAPE["num_attention_heads"],
    num_kv_heads: int = DEMO_SHAPE["num_key_value_heads"],
    intermediate_size: int = DEMO_SHAPE["intermediate_size"],
    seed: int = 0,
) -> Path:
    """Write the demo model to ``out_dir`` (atomically) unless a complete one is there: by
    default at the demo model's shape (config.gpus.DEMO_SHAPE, which the estimates price);
    head_dim is hidden_size / num_heads."""
    out_dir = Path(out_dir)
    if is_complete(out_dir):
        return out_dir
    # several processes (test workers) may build it at once: the first complete one is kept
    with atomic.shared_dir(out_dir, is_complete) as staging:
        tokenizer = make_tokenizer()
        config = make_config(
            tokenizer, hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size
        )
        make_model(config, seed).save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        for path in staging.iterdir():
            path.chmod(0o644)
    return out_dir
