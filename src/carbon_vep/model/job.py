"""A job's model: checked offline before torch is imported (a missing Hub model, remote code not
allowed), loaded on a device that is really there, and its scoring engine's output layer
verified on a probe. Every model command starts here; torch is imported only past the checks.
The job's count (model.job_record: load time, tokens, peak memory) starts with the load."""

from __future__ import annotations

import time
from typing import Any

from carbon_vep.config.stages import ModelSettings
from carbon_vep.model import job_record

PROBE_PHASE = "probe"  # the job record's phase of the start-up probe


def require_model_here(model: ModelSettings) -> None:
    """Fail in seconds, before torch is imported, when an offline job lacks its Hub model."""
    from carbon_vep.sources.hub import check_remote_code, model_folder

    # offline, the folder is the cached snapshot or ModelNotCachedError naming the fix
    check_remote_code(model, *model_folder(model))  # before any code of the checkpoint runs


def load_job_model(
    model: ModelSettings,
    job: str | None,
    yarn=None,
    long_context: bool = False,
    lower_right: bool = False,
):
    """The model checked offline first, on a device that is really there (`yarn`: a
    model.loading.Yarn to apply at load; `long_context`: FlashAttention-2 where it can run, else
    SDPA with a prompt's later chunks under a lower-right causal bias, model.attention;
    `lower_right`: that SDPA; neither: transformers' default attention)."""
    require_model_here(model)
    from carbon_vep.model.attention import LOWER_RIGHT_SDPA
    from carbon_vep.model.loading import load_model, long_context_attention, resolve_device

    record = job_record.started_loading()
    device = resolve_device(model.device, job=job)
    attention = LOWER_RIGHT_SDPA if lower_right else None
    if long_context:
        attention = long_context_attention(device, model.dtype)
    loaded = load_model(model, yarn, attention)
    job_record.loaded(record, loaded.model, loaded.device, model.dtype)
    return loaded


def engine_for(loaded: Any, model: ModelSettings):
    """The scoring engine on a loaded model, its output layer verified on a probe."""
    from carbon_vep.model.engine import Engine
    from carbon_vep.model.probe import verify_output_layer

    engine = Engine(
        loaded.model,
        loaded.vocab,
        loaded.device,
        batch_size=model.batch_size,
        batch_tokens=model.batch_tokens,
        upcast_output_layer=model.upcast_output_layer,
    )
    began = time.perf_counter()
    verify_output_layer(engine, loaded.vocab.encode("ACGTAC" * 8))  # reads its answer back
    # the job's first passes: on a GPU they also pay the libraries' start (cuBLAS, kernels)
    job_record.add_phase(PROBE_PHASE, time.perf_counter() - began)
    job_record.passes_timed_from_here()
    if model.compile_layers:  # after the probe: its shape would be one more compile
        engine.compile_layers()
    return engine


def load_engine(model: ModelSettings, job: str | None, yarn=None):
    """The scoring engine of a job (`load_job_model`, then `engine_for`), its attention SDPA
    with the lower-right causal bias (model.attention): the window groups' suffix passes, whose
    queries are the last keys of a cache, then reach PyTorch's flash kernel, where
    transformers' `sdpa` hands the memory-efficient one a materialised mask and every key and
    value head repeated (the H200 profile of 2026-11-28: 22% of a centered job's device time;
    docs/gpu.md). Every other pass (no cache, one query, padding) is transformers' `sdpa`."""
    return engine_for(load_job_model(model, job, yarn, lower_right=True), model)
