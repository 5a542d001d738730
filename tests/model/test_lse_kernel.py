"""The GPU normaliser's kernel (model.lse_kernel), run by Triton's interpreter on the CPU
(TRITON_INTERPRET=1, set before the kernel is first defined: in a process of its own): each
row's maximum and sum of exponentials of a chunk in one read, and the engine's full-vocabulary
log-sum-exp built from them, against torch's log-sum-exp of the same logits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from carbon_vep.model import lse_kernel

pytest.importorskip("triton")


def _interpreted(code: str) -> None:
    """Run `code` in a fresh Python with the interpreter on; its assertions fail the test."""
    env = dict(os.environ, **{lse_kernel.INTERPRET_ENV: "1"})
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ok" in done.stdout


def test_the_kernel_reduces_rows_of_any_width_into_column_views():
    """Widths under, at, and off a multiple of the kernel's block (lanes that never see a
    logit must not turn the sum into NaN), bf16 and float32 logits read as they are, the
    results written into strided columns of [N, chunks]; large logits do not overflow."""
    _interpreted(
        """
        import torch
        from carbon_vep.model import lse_kernel

        lse_kernel.KERNEL_MIN_ROWS = 0  # the kernel for these few rows too
        assert lse_kernel.available(torch.device("cpu"))  # the interpreter runs it here
        assert lse_kernel._verified(torch.device("cpu"))  # the start-up check a GPU runs
        torch.manual_seed(0)
        for width in (5, 1024, 3000, 16384):
            for dtype in (torch.bfloat16, torch.float32):
                logits = (torch.randn(7, width) * 8 + 40).to(dtype)
                maxes, sums = torch.zeros(7, 3), torch.zeros(7, 3)
                lse_kernel.max_and_sumexp(logits, maxes[:, 1], sums[:, 1])
                exact = logits.float()
                assert torch.equal(maxes[:, 1], exact.amax(dim=1))
                expected = (exact - exact.amax(dim=1, keepdim=True)).exp().sum(dim=1)
                assert torch.allclose(sums[:, 1], expected, rtol=1e-5), (width, dtype)
                assert (maxes[:, 0] == 0).all() and (sums[:, 2] == 0).all()  # columns alone
        print("ok")
        """
    )


def test_the_engine_s_fused_normaliser_equals_the_log_sum_exp_of_its_logits(demo_model_dir):
    """normaliser.in_vocabulary_chunks (the GPU's path) on the demo model with Carbon's whole
    vocabulary, in float32 and in bf16 (the head's dtype: the logits rounded to bf16 by the
    product, as the chunked path rounds them): equal to torch's log-sum-exp of those logits
    and to the CPU's tiles, to float32 rounding; with a bias, to that of the biased logits."""
    _interpreted(
        f"""
        import torch
        from carbon_vep.config.stages import ModelSettings
        from carbon_vep.model import lse_kernel, normaliser
        from carbon_vep.model.engine import Engine
        from carbon_vep.model.loading import load_model

        lse_kernel.KERNEL_MIN_ROWS = 0  # the kernel for these 19 rows too
        loaded = load_model(ModelSettings({str(demo_model_dir)!r}, trust_remote_code=True))
        torch.manual_seed(1)
        for dtype in (torch.float32, torch.bfloat16):
            model = loaded.model.to(dtype)
            engine = Engine(model, loaded.vocab, loaded.device, batch_size=1)
            hidden = (torch.randn(19, model.config.hidden_size) * 3).to(dtype)
            fused = normaliser.in_vocabulary_chunks(engine, hidden)
            logits = (hidden @ engine.out_weight.T).float()  # the head's dtype, then float
            exact = torch.logsumexp(logits, dim=-1)
            assert fused.dtype == torch.float32 and fused.shape == (19,)
            assert (fused - exact).abs().max() < 2e-5, (dtype, (fused - exact).abs().max())
            tiles = normaliser.in_tiles(engine, hidden)
            assert (fused - tiles).abs().max() < 2e-5
        # an output layer with a bias: added in float32 to each chunk, as Engine.logits adds it
        engine.out_bias = torch.randn(engine.out_weight.shape[0]) * 4
        biased = torch.logsumexp(logits + engine.out_bias, dim=-1)
        assert (normaliser.in_vocabulary_chunks(engine, hidden) - biased).abs().max() < 2e-5
        print("ok")
        """
    )


def test_without_triton_or_a_gpu_the_same_reduction_runs_in_torch(monkeypatch):
    """The fallback (no kernel for this device): the same maximum and sum."""
    monkeypatch.delenv(lse_kernel.INTERPRET_ENV, raising=False)
    assert not lse_kernel.available(torch.device("cpu"))
    logits = torch.randn(4, 300).to(torch.bfloat16)
    maxes, sums = torch.empty(4, 2), torch.empty(4, 2)
    lse_kernel.max_and_sumexp(logits, maxes[:, 0], sums[:, 0])
    lse_kernel.max_and_sumexp(logits[:, :100], maxes[:, 1], sums[:, 1])
    combined = lse_kernel.combine(maxes, sums)  # two "chunks": the whole row and its start
    exact = torch.logsumexp(logits.float(), dim=1)
    both = torch.logaddexp(exact, torch.logsumexp(logits[:, :100].float(), dim=1))
    assert torch.allclose(combined, both, atol=1e-5)


def test_a_call_of_few_rows_never_starts_the_kernel(monkeypatch):
    """Fewer than KERNEL_MIN_ROWS rows (Genomic-NIAH's value rows): torch's operations, without
    asking whether the kernel runs (which would import Triton and compile it); from
    KERNEL_MIN_ROWS rows on, the kernel where it is available."""
    asked = []

    def available(device):
        asked.append(device)
        return False

    monkeypatch.setattr(lse_kernel, "available", available)
    monkeypatch.setattr(lse_kernel, "_launch", lambda *a: pytest.fail("the kernel ran"))
    few = torch.randn(lse_kernel.KERNEL_MIN_ROWS - 1, 300).to(torch.bfloat16)
    maxes, sums = torch.empty(few.shape[0]), torch.empty(few.shape[0])
    lse_kernel.max_and_sumexp(few, maxes, sums)
    assert asked == []
    exact = torch.logsumexp(few.float(), dim=1)
    assert torch.allclose(maxes + sums.log(), exact, atol=1e-5)
    many = torch.randn(lse_kernel.KERNEL_MIN_ROWS, 300).to(torch.bfloat16)
    lse_kernel.max_and_sumexp(many, torch.empty(many.shape[0]), torch.empty(many.shape[0]))
    assert asked == [many.device]


def test_a_kernel_that_fails_its_check_is_not_used_and_says_why(monkeypatch, caplog):
    """A device where the kernel does not compile, or disagrees with torch: logged, and the
    normaliser runs in torch's operations."""

    def broken(logits, maxes, sums):
        raise RuntimeError("PTX assembly failed")

    monkeypatch.setattr(lse_kernel, "_launch", broken)
    lse_kernel._verified.cache_clear()
    assert not lse_kernel._verified(torch.device("cpu"))
    assert "fused normaliser's kernel failed (PTX assembly failed): not used" in caplog.text

    def wrong(logits, maxes, sums):
        maxes.copy_(logits.float().amax(dim=1))
        sums.fill_(1.0)

    monkeypatch.setattr(lse_kernel, "_launch", wrong)
    lse_kernel._verified.cache_clear()
    assert not lse_kernel._verified(torch.device("cpu"))
    assert "disagrees with torch" in caplog.text
    lse_kernel._verified.cache_clear()
