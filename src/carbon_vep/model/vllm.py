"""The generation tasks on vLLM, the engine Carbon is served with (engine: vllm).

One `VllmEngine` per job: the model is loaded once (paged KV cache, chunked prefill, continuous
batching across every prompt handed to it, automatic prefix caching), and every prompt goes in
as token ids made by our own tokenizer adapter, so both engines see the same ids. Two calls:

- `greedy(prompts, n, allowed)`: `n` new tokens a prompt, temperature 0, the choice restricted to
  `allowed` (the 6-mer block less the special ids, or the whole vocabulary less them) through
  vLLM's `allowed_token_ids`: the argmax over the allowed logits, as our engine's.
- `mean_log_likelihoods(prompts, continuations)`: the mean log-probability of each
  continuation's tokens after its prompt, the published `full_vocab` (log-softmax of the raw
  logits over the whole vocabulary). Not from vLLM's prompt logprobs: in vLLM 0.32 a request
  asking for them skips reading the prefix cache (`SamplingParams.skip_reading_prefix_cache`
  defaults to True then), so every likelihood would prefill the whole prompt again. Instead one
  request a continuation token, the prompt plus the tokens before it, forced to that token
  (`allowed_token_ids=[token]`) with its logprob under `logprobs_mode: raw_logprobs` (computed
  before any logits processing): these requests read the prompt's pages from the cache and
  compute only the last, partly filled page.

`cache_stats` counts the prompt tokens handed in and those read from the prefix cache, per call
kind; `capacity_tokens` is the KV cache's size in tokens (pages x page size) once started.

vLLM pins its own torch and transformers, so it lives in its own environment (`make
setup-vllm`, envs/vllm.txt); importing this module never imports vllm, `VllmEngine` does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from carbon_vep.config.stages import ModelSettings
from carbon_vep.errors import EngineError

SETUP_HINT = "install it with `make setup-vllm` (envs/vllm.txt) and run the job in .venv-vllm"


class VllmUnavailableError(EngineError):
    """engine: vllm was asked for where vLLM is not installed."""


class VllmStartError(EngineError):
    """The engine did not start (no memory for the KV cache, a context past max_model_len...)."""


def engine_arguments(
    model: ModelSettings, hf_overrides: Mapping[str, Any] | None, max_model_len: int
) -> dict[str, Any]:
    """The keyword arguments of `vllm.LLM` for this model (pure: tested without vLLM)."""
    on_cpu = model.device == "cpu"
    arguments: dict[str, Any] = {
        "model": model.path,
        "tokenizer": model.path,
        "revision": model.revision,
        # offline, vLLM finds the tokenizer's snapshot at this revision (else at main, which a
        # cache fetched at a commit lacks)
        "tokenizer_revision": model.revision,
        "trust_remote_code": model.trust_remote_code,
        "dtype": model.dtype,
        "seed": 0,
        "tensor_parallel_size": model.vllm.tensor_parallel_size,
        "enable_prefix_caching": model.vllm.prefix_caching,
        "max_num_seqs": model.vllm.max_num_seqs,
        "enforce_eager": on_cpu,  # no graph capture on a CPU
        "max_logprobs": 1,  # the sampled token's own logprob is all we read
        "logprobs_mode": "raw_logprobs",  # before allowed_token_ids masks the logits
    }
    if max_model_len:
        arguments["max_model_len"] = max_model_len
    if model.draft_model:  # vLLM's draft-model speculative decoding; its counters need stats on
        arguments["speculative_config"] = {
            "method": "draft_model",
            "model": model.draft_model,
            "revision": model.draft_revision,
            "num_speculative_tokens": model.num_speculative_tokens,
        }
        arguments["disable_log_stats"] = False
    if not on_cpu:
        arguments["gpu_memory_utilization"] = model.vllm.gpu_memory_utilization
    if hf_overrides:
        arguments["hf_overrides"] = dict(hf_overrides)
    return arguments


def starts_offline(model: ModelSettings) -> bool:
    """Whether the engine reads its models from the Hub cache alone: every Hub model it loads
    (the model, and its draft if any) does so where our engine does (sources.hub's
    `reads_cache_only`: offline, or pinned to a commit whose snapshot is cached). vLLM takes a
    Hub id and revision and has no cache-only option, so such an engine starts with the Hub off
    (`sources.hub.go_offline`): it then reads the cached snapshot and asks the Hub nothing,
    exactly as a job run with HF_HUB_OFFLINE=1 does."""
    from carbon_vep.model.drafting import draft_spec
    from carbon_vep.sources import hub

    specs = [model, *([draft_spec(model)] if model.draft_model else [])]
    from_hub = [spec for spec in specs if not hub.is_local_model(spec.path)]
    return bool(from_hub) and all(hub.reads_cache_only(spec) for spec in from_hub)


class VllmEngine:
    """A vLLM engine started once for a job's prompts (see the module docstring)."""

    def __init__(
        self,
        model: ModelSettings,
        hf_overrides: Mapping[str, Any] | None = None,
        max_model_len: int = 0,
        what: str = "this job",
        # max_model_len: the longest prompt + generation of the job (0: the model's positions)
    ) -> None:
        if starts_offline(model):  # before vLLM is imported: its workers read the variable
            from carbon_vep.sources.hub import go_offline

            go_offline()
        try:
            import vllm
            from vllm.inputs import TokensPrompt
        except ImportError as err:
            raise VllmUnavailableError(
                f"{what}: engine vllm, but vLLM is not installed in this Python ({err}); "
                f"{SETUP_HINT}"
            ) from err
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process a job
        # a likelihood request must generate one token past the cell's context, which may be
        # the model's last position: allow max_model_len one past it (the token is dropped)
        os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
        if model.device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(model.vllm.cpu_kv_cache_gb))
            if model.vllm.tensor_parallel_size > 1:  # vLLM binds a worker to a NUMA node each
                binding = cpu_thread_binding(
                    os.sched_getaffinity(0), model.vllm.tensor_parallel_size
                )
                os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", binding)
        self.vllm, self.tokens_prompt, self.version = vllm, TokensPrompt, vllm.__version__
        self.what = what
        self.refused = _vllm_error_class()
        self.arguments = engine_arguments(model, hf_overrides, max_model_len)
        self.cache_stats: dict[str, dict[str, int]] = {}
        try:
            self.llm = vllm.LLM(**self.arguments)
        except (RuntimeError, ValueError, MemoryError) as err:
            raise VllmStartError(
                f"{what}: the vLLM engine did not start ({str(err)[:400]}); {MEMORY_HINT}"
            ) from err
        self.capacity_tokens = _capacity_tokens(self.llm)

    def _run(self, prompts: Sequence[Sequence[int]], params: Any, kind: str) -> list[Any]:
        requests = [self.tokens_prompt(prompt_token_ids=token_list(p)) for p in prompts]
        try:
            outputs = self.llm.generate(requests, params, use_tqdm=False)
        except (ValueError, self.refused) as err:  # a prompt past max_model_len, ...
            raise VllmStartError(
                f"{self.what}: vLLM refused the requests ({str(err)[:300]}); raise "
                "max_model_len (or leave it 0: what the cell needs)"
            ) from err
        except (RuntimeError, MemoryError) as err:  # out of memory mid-run (a GPU OOM)
            raise VllmStartError(
                f"{self.what}: vLLM failed on {len(prompts)} requests ({str(err)[:300]}); "
                f"{MEMORY_HINT}"
            ) from err
        stats = self.cache_stats.setdefault(kind, {"prompt_tokens": 0, "cached_tokens": 0})
        stats["prompt_tokens"] += sum(len(p) for p in prompts)
        stats["cached_tokens"] += sum(out.num_cached_tokens or 0 for out in outputs)
        return outputs

    def greedy(
        self, prompts: Sequence[Sequence[int]], n: int, allowed: Sequence[int] | None
    ) -> list[list[int]]:
        """`n` greedy new token ids after each prompt, chosen among `allowed` (all if None)."""
        params = self.vllm.SamplingParams(
            temperature=0.0,
            max_tokens=n,
            min_tokens=n,
            ignore_eos=True,
            detokenize=False,
            allowed_token_ids=None if allowed is None else [int(i) for i in allowed],
        )
        return [list(out.outputs[0].token_ids) for out in self._run(prompts, params, "greedy")]

    def mean_log_likelihoods(
        self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]
    ) -> list[float]:
        """Mean log p(token | everything before it) over each continuation's tokens: one
        forced one-token request a continuation token (see the module docstring)."""
        requests = []
        for prompt, continuation in zip(prompts, continuations, strict=True):
            # Python ints made once a prompt: its k requests share them (at 128k tokens a
            # per-request copy of numpy scalars is ~5 MB a request)
            prompt, continuation = token_list(prompt), token_list(continuation)
            requests += [(prompt + continuation[:i], token) for i, token in enumerate(continuation)]
        params = [
            self.vllm.SamplingParams(
                temperature=0.0,
                max_tokens=1,
                logprobs=0,
                detokenize=False,
                allowed_token_ids=[token],
            )
            for _, token in requests
        ]
        outputs = self._run([ids for ids, _ in requests], params, "likelihood")
        terms = iter(
            out.outputs[0].logprobs[0][token].logprob
            for out, (_, token) in zip(outputs, requests, strict=True)
        )
        return [sum(next(terms) for _ in c) / len(c) for c in continuations]


def token_list(ids: Sequence[int]) -> list[int]:
    """Token ids as the list of Python ints vLLM takes; a list is taken to hold ints already."""
    return ids if isinstance(ids, list) else [int(i) for i in ids]


def cpu_thread_binding(cpus: Iterable[int], workers: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `workers` tensor-parallel CPU workers: the allowed CPUs in
    as many contiguous groups ("0-3|4-7"). vLLM's own default wants a NUMA node a worker and
    stops on a one-node machine; fewer CPUs than workers: "nobind"."""
    ordered = sorted(cpus)
    if len(ordered) < workers:
        return "nobind"
    size, extra = divmod(len(ordered), workers)
    groups, start = [], 0
    for i in range(workers):
        group = ordered[start : start + size + (i < extra)]
        start += len(group)
        if len(group) == 1:
            groups.append(str(group[0]))
        elif group[-1] - group[0] == len(group) - 1:  # contiguous
            groups.append(f"{group[0]}-{group[-1]}")
        else:
            groups.append(",".join(map(str, group)))
    return "|".join(groups)


MEMORY_HINT = (
    "for memory lower max_num_seqs or max_model_len, raise gpu_memory_utilization (or, on a "
    "CPU, cpu_kv_cache_gb), or spread the model over more GPUs (tensor_parallel_size)"
)


SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted_tokens",
}


def speculative_record(metrics: Iterable[Any], speculative_tokens: int) -> dict:
    """The draft's counters from `LLM.get_metrics()` and its acceptance rate (accepted /
    proposed tokens)."""
    counts = {SPEC_COUNTERS[m.name]: int(m.value) for m in metrics if m.name in SPEC_COUNTERS}
    proposed = counts.get("draft_tokens", 0)
    rate = counts.get("accepted_tokens", 0) / proposed if proposed else None
    return {"speculative_tokens": speculative_tokens, **counts, "acceptance_rate": rate}


def _capacity_tokens(llm: Any) -> int | None:
    """The KV cache's size in tokens, or None where this vLLM does not say."""
    try:
        cache = llm.llm_engine.vllm_config.cache_config
        return int(cache.num_gpu_blocks) * int(cache.block_size)
    except (AttributeError, TypeError):
        return None


def _vllm_error_class() -> type[Exception]:
    """vLLM's own error class for refused requests (ValueError in releases without it)."""
    try:
        from vllm.exceptions import VLLMError
    except ImportError:
        return ValueError
    return VLLMError
