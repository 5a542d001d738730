"""How a model is loaded and run (`ModelSettings`, every model job), with vLLM's own options
(`VllmSettings`) and the settings only the generation tasks get (`GENERATION_ONLY`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from carbon_vep.config.fields import group, setting


@dataclass(frozen=True)
class VllmSettings:
    """vLLM's own options, for a model whose generation tasks run on it (engine: vllm)."""

    tensor_parallel_size: int = setting(
        1,
        minimum=1,
        help="GPUs a vLLM job spreads the model over (tensor parallelism); a SLURM profile "
        "gives the job this many GPUs",
    )
    gpu_memory_utilization: float = setting(
        0.9,
        minimum=0.05,
        maximum=1.0,
        help="share of each GPU's memory vLLM may take (weights, activations, its paged KV "
        "cache); lower it when other processes share the GPU",
    )
    max_model_len: int = setting(
        0,
        minimum=0,
        help="longest prompt + generation vLLM plans its KV cache for (0 = what the job needs: "
        "a NIAH cell's context, or the model's positions)",
    )
    prefix_caching: bool = setting(
        True,
        help="vLLM's automatic prefix caching: a NIAH prompt's KV pages are computed once for "
        "its generation and both value likelihoods",
    )
    max_num_seqs: int = setting(
        16, minimum=1, help="sequences vLLM runs at once (continuous batching); lower on OOM"
    )
    cpu_kv_cache_gb: int = setting(
        4, minimum=1, help="vLLM's KV-cache space on a CPU (VLLM_CPU_KVCACHE_SPACE), GB"
    )
    vllm_env: str = setting(
        ".venv-vllm",
        scope="run",
        cli=False,
        help="the virtualenv the vLLM jobs run in (`make setup-vllm`; vLLM pins its own torch "
        "and transformers); relative to the workflow's folder",
    )


# the settings of the generation tasks alone (variant scoring's jobs do not get them)
SPECULATIVE = ("draft_model", "draft_revision", "num_speculative_tokens")
DEFAULT_SPECULATIVE_TOKENS = 5  # the draft's proposals a step
GENERATION_ONLY = ("engine", *SPECULATIVE, *(f.name for f in fields(VllmSettings)))


@dataclass(frozen=True)
class ModelSettings:
    """How to load and run one model."""

    path: str = setting(help="local model directory or Hugging Face Hub id", flag="model")
    revision: str | None = setting(
        None, help="commit, tag or branch of a Hub model (pin a commit for reproducible runs)"
    )
    dtype: Literal["float32", "bfloat16", "float16"] = setting(
        "float32", help="weights and matmuls; softmax maths always run in float32"
    )
    device: str = setting("cpu", help="cpu, cuda or cuda:N", pattern=r"^(cpu|cuda(:[0-9]+)?)$")
    trust_remote_code: bool = setting(
        False,
        help="run the tokenizer/model code shipped with the checkpoint (off unless asked for; "
        "a Hub model's remote code also needs a pinned `revision` or allow_unpinned)",
    )
    allow_unpinned: bool = setting(
        False,
        help="allow a Hub model's remote code at a revision that is not a commit (it can "
        "change between runs; the commit used is recorded in the provenance)",
    )
    batch_size: int = setting(
        8, minimum=1, help="windows per forward pass (halved on OOM), unless batch_tokens is set"
    )
    batch_tokens: int = setting(
        0,
        scope="run",
        minimum=0,
        help="tokens per forward pass, padding included: a batch holds batch_tokens // (its "
        "windows' token length) windows (at least one), so one value fits every window length; "
        "set, it replaces batch_size (0 = batch_size decides). The GPU profiles set it per GPU "
        "class from memory arithmetic for Carbon-3B (docs/gpu.md); halved on OOM",
    )
    upcast_output_layer: bool = setting(
        False,
        help="compute every product with the output layer (the 4,096 DNA rows, the "
        "full-vocabulary normaliser) in float32 from the model's bf16 hidden states and "
        "weights, as the official Carbon evaluation's --upcast_lm_head does against bf16 "
        "rounding of the logits; recorded in the provenance",
    )
    compile_layers: bool = setting(
        False,
        scope="run",
        help="compile the decoder layers' steps around attention (torch.compile; one graph each "
        "for all layers) in every pass (window groups, prefills, scan tiles, right-end contexts, "
        "whole windows), fusing their element-wise kernels; attention and the cache stay eager. "
        "Answers equal to float rounding. Measured once on an H200: the centered recipe 2.05x, "
        "the scan 1.17x, the right-end recipe 0.74x after the compile (4.6-12.5 s a job), "
        "Genomic-NIAH not yet; hence off (docs/performance.md#compiled-decoder-layers)",
    )
    build_demo: bool = setting(
        False, cli=False, help="build the tiny Carbon-shaped demo model at `path` (no download)"
    )
    engine: Literal["transformers", "vllm"] = setting(
        "transformers",
        help="engine of the generation tasks (Genomic-NIAH, sequence recovery): this package's "
        "transformers engine, or vLLM, the engine Carbon is served with (its own environment: "
        "make setup-vllm). Variant scoring, scans and perturbation pairs run on transformers",
    )
    draft_model: str | None = setting(
        None,
        help="speculative decoding of sequence recovery (transformers' assisted generation, "
        "as the Carbon-3B card runs it; our own loop under decode_cache captured): in a config "
        "the key of another model entry, on the "
        "command line its path or Hub id; it must share this model's tokenizer "
        "(Carbon-500M drafts for Carbon-3B and -8B). Greedy output is the target's alone "
        "(docs/generation.md#speculative-decoding)",
    )
    draft_revision: str | None = setting(
        None, help="revision of the draft model (in a config: taken from its entry)"
    )
    num_speculative_tokens: int = setting(
        DEFAULT_SPECULATIVE_TOKENS, minimum=1, help="tokens the draft model proposes a step"
    )
    vllm: VllmSettings = group(VllmSettings)
