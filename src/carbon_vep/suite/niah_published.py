"""The official Genomic-NIAH evaluation's passes a row (huggingface/carbon
`evaluation/genome_niah_eval.py`, HF backend, with the flags of its `slurm/*/genome_niah.sbatch`:
`--add_dna_tag --bf16 --with_yarn`, the defaults otherwise: batch 1, sdpa, the DNA restriction
on), restated as the reference our one-prefill scorer is checked against (tests,
`make bench-niah`, the GPU check). docs/suite-conventions.md#genomic-niah describes the task.

Per row, as the script's `hf_generate` then `hf_likelihood`:

1. `model.generate` on the tokenized `<dna>` + prompt (no special tokens added, the attention
   mask passed), greedy (`do_sample=False`), `max_new_tokens` = value_len_bp // 6, the
   tokenizer's pad id, and two logits processors: every id of `tokenizer.all_special_ids` set to
   -inf, then -inf added outside the 6-mer block [dna_start_id + the DNA tags, + 4,096) of the
   model's dna_config.json (no restriction without one). The prediction is `tokenizer.decode`
   of the last max_new_tokens ids, special tokens kept, cut to value_len_bp characters.
2. For the positive and then the negative sequence (prompt + value, prompt + negative value):
   the model body (`model.model`, `use_cache=False`) over `<dna>` + the sequence, the output
   layer (`model.lm_head`) on the hidden states of the positions that predict the value's
   tokens only (the script "slices logits to save memory"), a float32 log-softmax over the whole
   vocabulary, and the mean of the value tokens' log-probabilities.

The tokenizer itself encodes every string here (not our k-mer adapter), so the reference also
checks our encoding; the block is read from dna_config.json here, not by the adapter.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from carbon_vep.suite.niah import RowResult

if TYPE_CHECKING:
    from carbon_vep.model.loading import LoadedModel

K = 6  # the script's `v // 6` (value_len_bp to new tokens) and its 4,096-token block
BLOCK = 4**K


class SuppressSpecial(LogitsProcessor):
    """The script's first processor: each special id's logit set to -inf, in place."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores[:, self.ids] = -torch.inf
        return scores


class RestrictToDna(LogitsProcessor):
    """The script's second processor: -inf added to every logit outside [start, start + count)."""

    def __init__(self, start: int, count: int) -> None:
        self.start, self.end = start, start + count

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        mask = torch.full_like(scores, -torch.inf)
        mask[:, self.start : self.end] = 0.0
        return scores + mask


def dna_token_range(tokenizer: Any) -> tuple[int, int] | None:
    """(first 6-mer id, 4,096) from the checkpoint's dna_config.json, as the script's
    `_resolve_dna_token_range`: `dna_start_id` plus the number of DNA tags listed before the
    6-mers (`dna_special_tokens`: Carbon's file; `dna_tags`: the demo stand-in's name for the
    same list). None when there is no dna_config.json (no restriction). The file is looked up
    where the tokenizer was loaded from: a Carbon checkpoint ships both together."""
    source = getattr(tokenizer, "name_or_path", "") or ""
    path = Path(source) / "dna_config.json"
    if not path.is_file():
        try:
            from transformers.utils import cached_file

            found = cached_file(
                source, "dna_config.json", _raise_exceptions_for_missing_entries=False
            )
        except (OSError, ValueError):
            return None
        if not found:
            return None
        path = Path(found)
    config = json.loads(path.read_text())
    tags = config.get("dna_special_tokens", config.get("dna_tags", ()))
    return int(config["dna_start_id"]) + len(tags), BLOCK


def _encode(tokenizer: Any, text: str, side: str, device: torch.device) -> Any:
    """One text as the script encodes a batch of one: no special tokens, padded on `side`."""
    encoded = tokenizer(
        [text],
        add_special_tokens=False,
        return_tensors="pt",
        padding=True,
        truncation=False,
        padding_side=side,
    )
    return encoded.to(device)


@torch.inference_mode()
def generate_value(model: Any, tokenizer: Any, prefix: str, prompt: str, value_bp: int) -> str:
    """`hf_generate` for one row: the greedy value, value_bp characters at most."""
    device = next(model.parameters()).device
    processors = [SuppressSpecial(list(getattr(tokenizer, "all_special_ids", []) or []))]
    block = dna_token_range(tokenizer)
    if block is not None:
        processors.append(RestrictToDna(*block))
    new_tokens = value_bp // K
    encoded = _encode(tokenizer, prefix + prompt, "left", device)
    out = model.generate(
        **encoded,
        max_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
        logits_processor=LogitsProcessorList(processors),
    )
    return (tokenizer.decode(out[0, -new_tokens:].tolist()) or "")[:value_bp]


@torch.inference_mode()
def value_log_likelihood(model: Any, tokenizer: Any, prefix: str, prompt: str, full: str) -> float:
    """`hf_likelihood` for one sequence: the mean full-vocabulary log-probability of the tokens
    of `full` after `prompt`, the output layer applied to those positions only."""
    device = next(model.parameters()).device
    body = getattr(model, "model", None)
    if body is None:
        body = getattr(model, "transformer", None)
    if body is None:
        raise RuntimeError("model body not found at .model or .transformer")
    full_enc = _encode(tokenizer, prefix + full, "right", device)
    prompt_enc = _encode(tokenizer, prefix + prompt, "right", device)
    full_ids = full_enc["input_ids"]
    full_len = int(full_enc["attention_mask"].sum(1)[0])
    prompt_len = int(prompt_enc["attention_mask"].sum(1)[0])
    hidden = body(
        input_ids=full_ids, attention_mask=full_enc["attention_mask"], use_cache=False
    ).last_hidden_state
    logits = model.lm_head(hidden[:, prompt_len - 1 : full_len - 1, :])
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    targets = full_ids[:, prompt_len:full_len].to(log_probs.device)
    return float(log_probs.gather(-1, targets[..., None])[..., 0].mean(dim=1)[0])


def three_pass_row(
    model: Any,
    tokenizer: Any,
    vocab: Any,
    prompt: str,
    value: str,
    negative: str,
    value_bp: int | None = None,
    phases: dict[str, float] | None = None,
) -> RowResult:
    """One row the official way: `generate`, then the positive and the negative sequence's
    likelihood passes (module docstring). `value_bp`: the row's value_len_bp (len(value));
    `phases` gains the seconds of the generation and of the two likelihood passes (each ends
    reading its result back, so the host's clock is the device's)."""
    prefix = vocab.prefix_token
    if tokenizer.pad_token is None:  # the script's `tokenizer.pad_token = tokenizer.eos_token`
        tokenizer.pad_token = tokenizer.eos_token
    began = time.perf_counter()
    pred = generate_value(model, tokenizer, prefix, prompt, value_bp or len(value))
    generated = time.perf_counter()
    target, neg = (
        value_log_likelihood(model, tokenizer, prefix, prompt, prompt + continuation)
        for continuation in (value, negative)
    )
    if phases is not None:
        done = time.perf_counter()
        for name, seconds in (("generate", generated - began), ("likelihood", done - generated)):
            phases[name] = phases.get(name, 0.0) + seconds
    return RowResult(pred=pred, target_ll=target, negative_ll=neg)


def three_pass_cell_row(loaded: LoadedModel, row: dict) -> RowResult:
    """`three_pass_row` on one row of a NIAH cell (its prompt, value, negative value and
    value_len_bp)."""
    args = (row["prompt"], row["value"], row["negative_value"], row.get("value_len_bp"))
    return three_pass_row(loaded.model, loaded.tokenizer, loaded.vocab, *args)
