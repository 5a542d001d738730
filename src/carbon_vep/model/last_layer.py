"""The model's last decoder layer run for the positions a pass reads, keys and values for all.

A pass whose caller reads the hidden states of its last positions only (a prompt's prefill,
read at its last token; a chunk of it before the last, read nowhere; a right-end context, read
at its end; a scan tile, read from its first scored base on) needs every layer's keys and
values at every position: the cache holds them, and the last layer's queries attend to them.
It does not need the last layer's queries, attention, output projection or MLP at the
positions it never reads. transformers runs them at every position (its `logits_to_keep`
slices after the body), and so does the official evaluation (`genome_niah_eval.py`'s
`generate` and body passes). `reading_last` runs the last layer's keys and values over the
whole pass and the rest over the kept positions only: for Carbon-3B (30 layers) about 1/30 of
a long prompt's body and attention, 1/70 of a scan tile's (docs/performance.md).

The kept positions are the pass's last `n` (n = 0: none, the keys and values only). They see
the keys a full pass would show them: the last `n` rows of the pass's mask, which for a causal
pass without padding is a causal mask aligned to the lower right. The values equal the full
pass's last `n` hidden states to float rounding (the same products over fewer rows), and the
cache is the same.

Where it applies: a Llama decoder layer (`LlamaDecoderLayer` with `LlamaAttention`: Carbon,
GENERator-v2) under transformers' `sdpa` or `LOWER_RIGHT_SDPA`. Any other layer or attention
runs whole and the kept positions are sliced from its output: the same values, no saving.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.nn.attention.bias import CausalBias, causal_lower_right

from carbon_vep.model.attention import LOWER_RIGHT_SDPA
from carbon_vep.model.llama_layer import attend, heads, is_llama_layer, output_and_mlp

ATTENTIONS = ("sdpa", LOWER_RIGHT_SDPA)  # what the kept positions' masks are built for


def last_layer(body: Any) -> Any:
    """The decoder layer a pass of `body` (a transformers base model) ends with."""
    return body.layers[body.config.num_hidden_layers - 1]


def prunable(body: Any) -> bool:
    """Whether `body`'s last layer can run for the kept positions only (module docstring)."""
    if not hasattr(body, "layers"):  # not a transformers decoder stack (remote code, a double)
        return False
    layer = last_layer(body)
    return is_llama_layer(layer) and (
        getattr(body.config, "_attn_implementation", None) in ATTENTIONS
    )


@contextmanager
def reading_last(body: Any, n: int | None) -> Iterator[bool]:
    """Within it, a pass of `body` runs its last layer for its last `n` positions and returns
    their hidden states only ([B, n, H]; a pass of n tokens or fewer runs whole). Yields
    whether the layer was pruned; where it cannot be, the pass runs whole and the caller
    slices (`kept`). n None: nothing changes."""
    if n is None or not prunable(body):
        yield False
        return
    layer = last_layer(body)
    layer.forward = functools.partial(_kept_forward, layer, n)
    try:
        yield True
    finally:
        del layer.forward  # the class's forward again


def kept(hidden: torch.Tensor, n: int | None) -> torch.Tensor:
    """The last `n` positions of a pass's hidden states [B, L, H] (all of them for None, or
    where the pass had n or fewer); a copy where it drops some (a view would keep the whole
    pass's hidden states alive)."""
    if n is None or n >= hidden.shape[1]:
        return hidden
    return hidden[:, hidden.shape[1] - n :].clone()


def _kept_forward(
    layer: Any,
    n: int,
    hidden_states: torch.Tensor,
    attention_mask: Any = None,
    cache: Any = None,
    position_embeddings: Any = None,
    **kwargs: Any,
) -> torch.Tensor:
    """`LlamaDecoderLayer.forward` with the queries, attention, output projection and MLP at the
    last `n` positions only; keys and values (and the cache's update) at all of them. The other
    arguments (position ids, use_cache, ...) go on to the attention function, as the layer
    passes them."""
    length = hidden_states.shape[1]
    if n >= length:
        return type(layer).forward(
            layer,
            hidden_states,
            attention_mask,
            cache=cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    attention = layer.self_attn
    normed = layer.input_layernorm(hidden_states)
    cos, sin = position_embeddings
    keys = heads(attention.k_proj(normed), attention.head_dim)
    values = heads(attention.v_proj(normed), attention.head_dim)
    keys = apply_rotary_pos_emb(keys, keys, cos, sin)[1]
    if cache is not None:
        keys, values = cache.update(keys, values, attention.layer_idx, kwargs=kwargs)
    residual = hidden_states[:, length - n :]
    if n == 0:
        return residual
    queries = heads(attention.q_proj(normed[:, length - n :]), attention.head_dim)
    queries = apply_rotary_pos_emb(queries, queries, cos[:, -n:], sin[:, -n:])[0]
    implementation = attention.config._attn_implementation
    mask = kept_mask(attention_mask, n, keys.shape[2], implementation, keys.device)
    out = attend(layer, queries, keys, values, mask, None, kwargs)  # the cache updated above
    return output_and_mlp(layer, out, residual)


def kept_mask(mask: Any, n: int, keys: int, implementation: str, device: Any = None) -> Any:
    """The mask of a pass's last `n` queries over its `keys` keys, from the whole pass's: its
    last `n` rows. No mask (a causal pass, no padding) and the lower-right bias are both causal
    aligned to the lower right; the last query alone sees every key."""
    if isinstance(mask, torch.Tensor) and not isinstance(mask, CausalBias):  # a bias is one too
        return mask[..., mask.shape[-2] - n :, :]
    if mask is not None and not isinstance(mask, CausalBias):
        raise TypeError(f"no kept rows for a mask of type {type(mask).__name__}")
    if n == 1:
        return None
    if implementation == LOWER_RIGHT_SDPA:
        return causal_lower_right(n, keys)
    # transformers' sdpa takes no bias object; its boolean mask (True: attend) instead
    return torch.ones(n, keys, dtype=torch.bool, device=device).tril(keys - n)[None, None]
