"""The published Genomic-NIAH evaluation's three passes a row, restated from its description
(huggingface/carbon `evaluation/genome_niah_eval.py`, docs/suite-conventions.md#genomic-niah)
as the reference our one-prefill scorer is checked against (tests, `make bench-niah`).

Per row: `model.generate` on the tokenized `<dna>` + prompt (greedy, value_len_bp / k new
tokens, special ids suppressed, logits outside the dna_config.json 6-mer block set to -inf);
then one full forward pass over `<dna>` + positive_sequence and one over `<dna>` +
negative_sequence, each taking the mean of log_softmax(full logits) at the value's tokens. The
tokenizer itself encodes every string here (not our k-mer adapter), so the reference also checks
our encoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from carbon_vep.model.tokens import dna_block_ids, suppressed_token_ids
from carbon_vep.suite.niah import RowResult

if TYPE_CHECKING:
    from carbon_vep.model.loading import LoadedModel


class RestrictToBlock(LogitsProcessor):
    """Every logit outside the allowed ids set to -inf."""

    def __init__(self, allowed: np.ndarray) -> None:
        self.allowed = torch.as_tensor(allowed, dtype=torch.long)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        keep = torch.full_like(scores, -torch.inf)
        allowed = self.allowed.to(scores.device)
        keep[:, allowed] = scores[:, allowed]
        return keep


def _ids(tokenizer: Any, prefix: str, text: str, device: torch.device) -> torch.Tensor:
    encoded = tokenizer(prefix + text, add_special_tokens=False, return_tensors="pt")
    return encoded["input_ids"].to(device)


@torch.inference_mode()
def three_pass_row(
    model: Any, tokenizer: Any, vocab: Any, prompt: str, value: str, negative: str
) -> RowResult:
    """One row the published way: generate, then two full forward passes."""
    device = next(model.parameters()).device
    prefix = vocab.prefix_token
    block = dna_block_ids(tokenizer, vocab)
    processors = LogitsProcessorList([RestrictToBlock(block)] if block is not None else [])
    new_tokens = len(value) // vocab.k
    ids = _ids(tokenizer, prefix, prompt, device)
    config = GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        num_beams=1,
        suppress_tokens=suppressed_token_ids(tokenizer),
        pad_token_id=vocab.pad_id,
    )
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        generation_config=config,
        logits_processor=processors,
    )
    pred = tokenizer.decode(out[0, ids.shape[1] :].tolist(), skip_special_tokens=False)
    lls = []
    for continuation in (value, negative):
        full = _ids(tokenizer, prefix, prompt + continuation, device)
        log_probs = torch.log_softmax(model(input_ids=full).logits[0].float(), dim=-1)
        start = ids.shape[1]
        targets = full[0, start:]
        picked = log_probs[start - 1 : full.shape[1] - 1].gather(1, targets[:, None])
        lls.append(float(picked.mean()))
    return RowResult(pred=pred[: len(value)], target_ll=lls[0], negative_ll=lls[1])


def three_pass_cell_row(loaded: LoadedModel, row: dict) -> RowResult:
    """`three_pass_row` on one row of a NIAH cell (its prompt, value and negative value)."""
    args = (row["prompt"], row["value"], row["negative_value"])
    return three_pass_row(loaded.model, loaded.tokenizer, loaded.vocab, *args)
