"""A toy Llama configuration for attention and layer tests: grouped-query heads, as Carbon."""

from transformers import LlamaConfig


def toy_config(**overrides) -> LlamaConfig:
    """64 wide, 2 layers, 8 query heads on 2 key-value heads, 64 ids; `overrides` on top."""
    settings = {
        "vocab_size": 64,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
    }
    return LlamaConfig(**(settings | overrides))
