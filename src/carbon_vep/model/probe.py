"""The start-up probe of every model job: our body plus the k-mer rows of the output layer
must reproduce the model's own logits on a few tokens, at the precision the heads run in,
before any variant is scored (a head we do not apply, such as a scaled or soft-capped one, or a
`get_decoder` that is not the body, would otherwise give wrong scores silently).

Its passes run without cuDNN's attention (model.attention.without_cudnn): their shape is the
probe's own, so a cuDNN plan built for it (~0.5 s on an H200) would serve nothing after."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from carbon_vep.errors import UnsupportedModelError
from carbon_vep.model.attention import without_cudnn
from carbon_vep.model.engine import Engine

# A rounding step's share of a value: each side of the probe rounds its logits once to the
# precision its head runs in (at most half a step each); a second step of slack covers a
# different accumulation order in kernels of different shapes.
PROBE_ROUNDING_STEPS = 2


def probe_tolerance(reference: torch.Tensor, *dtypes: torch.dtype, atol: float = 1e-3):
    """Per logit, how far our logits may be from the model's: `atol` of the largest logit (as
    before: the floor where values cancel), plus PROBE_ROUNDING_STEPS rounding steps of the
    coarsest dtype either head runs in at that logit's magnitude (bf16: 2 x 2^-7 of it; a
    float32 head adds ~2e-7, nothing a real mismatch hides in)."""
    eps = max(torch.finfo(d).eps for d in dtypes if d.is_floating_point)
    scale = reference.abs().max().clamp_min(1.0)
    return atol * scale + PROBE_ROUNDING_STEPS * eps * reference.abs()


def verify_output_layer(engine: Engine, ids: np.ndarray, atol: float = 1e-3) -> None:
    """Our body + k-mer rows must reproduce the model's own logits, at the precision the heads
    run in (probe_tolerance): one bf16 rounding step from two matrix products of different
    shapes passes; a scaled head, a bias or softcap we do not apply, or a `get_decoder` that
    is not the body does not."""
    with torch.inference_mode(), without_cudnn():
        batch = torch.as_tensor(ids[None, :], device=engine.device)
        logits = engine.model(input_ids=batch).logits
        reference = logits[0, :, engine.vocab.kmer_ids].float()
        hidden, _ = engine.hidden_states([ids])
        ours = engine.logits(hidden[0], *engine.kmer_rows())  # a copy: none kept
    dtypes = (logits.dtype, engine.out_weight.dtype, engine.head_dtype)
    allowed = probe_tolerance(reference, *dtypes, atol=atol)
    excess = ((ours - reference).abs() - allowed).flatten()
    if excess.max() > 0:
        worst = int(excess.argmax())
        raise UnsupportedModelError(
            f"{engine.model_name}: the model's output layer does not match hidden @ lm_head.T "
            "on a probe "
            f"(largest excess at a logit of {float(reference.flatten()[worst]):.4g}: ours "
            f"{float(ours.flatten()[worst]):.4g}, beyond "
            f"{float(allowed.flatten()[worst]):.3g} allowed in {_dtype_names(dtypes)}); "
            "this architecture is not supported by the chunked scorer"
        )


def _dtype_names(dtypes: Sequence[torch.dtype]) -> str:
    return "/".join(sorted({str(d).removeprefix("torch.") for d in dtypes}))
