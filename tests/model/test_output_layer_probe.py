"""The start-up probe of every model job (model.probe.verify_output_layer): our body + k-mer
rows against the model's own logits, judged at the precision the heads run in.

On a GPU the model's head and ours are two bf16 matrix products of different shapes, whose
results may round one bf16 step apart (measured on an H200: 3.57e-3 of the largest logit). A
CPU rounds both alike, so the tests move the model's logits themselves: one bf16 step at the
largest element must pass; a scale, a bias or a softcap we do not apply must not."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from carbon_vep.config.stages import ModelSettings
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import load_model
from carbon_vep.model.probe import probe_tolerance, verify_output_layer


class MovedLogits:
    """The model, its logits changed by `move` after its own head (what a different kernel, or
    a head we do not understand, would give); its body and output layer are the model's."""

    def __init__(self, model, move) -> None:
        self.model, self.move, self.config = model, move, model.config

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    def get_decoder(self):
        return self.model.get_decoder()

    def __call__(self, **kwargs):
        logits = self.model(**kwargs).logits
        return SimpleNamespace(logits=self.move(logits))


@pytest.fixture(scope="module")
def bf16(demo_model_dir):
    return load_model(ModelSettings(str(demo_model_dir), trust_remote_code=True, dtype="bfloat16"))


def probe(loaded, move, **engine_kwargs) -> None:
    engine = Engine(
        MovedLogits(loaded.model, move), loaded.vocab, loaded.device, batch_size=1, **engine_kwargs
    )
    verify_output_layer(engine, loaded.vocab.encode("ACGTAC" * 8))


def bf16_step_at_the_largest(kmer_ids):
    """A move of the logits: one bf16 rounding step (2^-7 of the power of two below it) added
    to the largest k-mer logit."""

    def move(logits: torch.Tensor) -> torch.Tensor:
        moved = logits.clone()
        block = moved[0][:, kmer_ids]
        row, col = np.unravel_index(int(block.abs().argmax()), block.shape)
        value = moved[0, row, kmer_ids[col]].float()
        step = 2.0**-7 * 2 ** torch.floor(torch.log2(value.abs()))
        moved[0, row, kmer_ids[col]] = value + step
        assert moved[0, row, kmer_ids[col]] != logits[0, row, kmer_ids[col]]
        return moved

    return move


def test_the_unchanged_model_passes_in_bf16_and_float32(bf16, loaded):
    probe(bf16, lambda x: x)
    probe(loaded, lambda x: x)


def test_one_bf16_step_at_the_largest_logit_passes_in_bf16(bf16):
    probe(bf16, bf16_step_at_the_largest(bf16.vocab.kmer_ids))
    probe(bf16, bf16_step_at_the_largest(bf16.vocab.kmer_ids), upcast_output_layer=True)


def test_the_same_step_is_refused_where_the_head_runs_in_float32(loaded):
    """A float32 head cannot round a bf16 step: the same move is a mismatch there."""
    with pytest.raises(RuntimeError, match="does not match"):
        probe(loaded, bf16_step_at_the_largest(loaded.vocab.kmer_ids))


@pytest.mark.parametrize(
    "move",
    [
        pytest.param(lambda x: x * 1.05, id="scaled head x1.05"),
        pytest.param(lambda x: x + 0.05 * x.abs().max(), id="a bias we do not apply"),
        pytest.param(lambda x: 0.5 * x.abs().max() * torch.tanh(x / (0.5 * x.abs().max())),
                     id="a softcap we do not apply"),
    ],
)  # fmt: skip
def test_a_real_mismatch_is_refused_in_bf16(bf16, move):
    with pytest.raises(RuntimeError, match="does not match hidden @ lm_head.T"):
        probe(bf16, move)


def test_a_body_that_is_not_the_decoder_is_refused(bf16):
    model = MovedLogits(bf16.model, lambda x: x)
    decoder = bf16.model.get_decoder()
    model.get_decoder = lambda: lambda **kw: decoder(**{**kw, "input_ids": kw["input_ids"].flip(1)})
    engine = Engine(model, bf16.vocab, bf16.device, batch_size=1)
    with pytest.raises(RuntimeError, match="does not match"):
        verify_output_layer(engine, bf16.vocab.encode("ACGTAC" * 8))


def test_tolerance_is_two_steps_of_the_coarsest_precision():
    logits = torch.tensor([[4.375, -0.5, 0.0]])
    bf16 = probe_tolerance(logits, torch.bfloat16, torch.float32)
    assert bf16[0, 0] == pytest.approx(1e-3 * 4.375 + 2 * 2**-7 * 4.375)
    assert bf16[0, 2] == pytest.approx(1e-3 * 4.375)  # the floor where values cancel
    assert probe_tolerance(logits, torch.float32)[0, 0] == pytest.approx(
        1e-3 * 4.375 + 2 * 2**-23 * 4.375
    )
    # the H200's measured case: 3.57e-3 of the largest logit, one bf16 step at 2-4
    assert float(bf16.max()) > 3.57e-3 * 4.375


def test_the_probe_runs_without_cudnn_attention(bf16):
    """Its shape is its own: a cuDNN plan built for it would be built for nothing (both its
    passes see cuDNN's kernel off, and the switch is back afterwards)."""
    seen = []

    def noting(logits: torch.Tensor) -> torch.Tensor:
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return logits

    engine = Engine(MovedLogits(bf16.model, noting), bf16.vocab, bf16.device, batch_size=1)
    hidden_states = engine.hidden_states

    def body(batch):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return hidden_states(batch)

    engine.hidden_states = body
    before = torch.backends.cuda.cudnn_sdp_enabled()
    verify_output_layer(engine, bf16.vocab.encode("ACGTAC" * 8))
    assert seen == [False, False] and torch.backends.cuda.cudnn_sdp_enabled() == before
