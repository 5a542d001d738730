"""A GENERator-style checkpoint built here (no network): a pure k-mer vocabulary after 32
special tokens, `<s>` as the DNA prefix, no remote code, a one-layer Llama behind it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"] + [f"<reserved_{i}>" for i in range(28)]


def kmer_strings(k: int) -> list[str]:
    return ["".join(p) for p in itertools.product("ATCG", repeat=k)]  # GENERator's order


def build_kmer_model(out: Path, k: int, kmers: Sequence[str] | None = None) -> Path:
    """The checkpoint at `out`: its vocabulary the specials, then `kmers` (every k-mer unless
    given); the tokenizer cuts text into k-base pieces."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(kmers or kmer_strings(k)))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(f".{{1,{k}}}"), behavior="isolated")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[4:]})
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(k)
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out
