"""Load a causal DNA LM and its tokenizer through transformers (local directory or Hub id)."""

from __future__ import annotations

import logging
import os
import socket
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from carbon_vep.config.fields import INTERFACE_VARIABLE
from carbon_vep.config.run import setting_name
from carbon_vep.config.stages import ModelSettings
from carbon_vep.errors import InputError, TokenizerMismatchError
from carbon_vep.model.attention import LOWER_RIGHT_SDPA, register
from carbon_vep.model.tokens import DnaVocab, dna_vocab

log = logging.getLogger("carbon_vep")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    vocab: DnaVocab
    device: torch.device
    settings: ModelSettings


class DeviceUnavailableError(InputError):
    """The job asked for a device this node does not have (a GPU rule on a CPU node)."""


def resolve_device(requested: str, job: str | None = None) -> torch.device:
    """`cuda` must really be there: a GPU job on a CPU node fails now, not after days on CPU.

    `job` names what was to be computed (e.g. the shard file) so the message says which job
    landed where.
    """
    if requested.startswith("cuda") and not torch.cuda.is_available():
        slurm_job = os.environ.get("SLURM_JOB_ID")
        raise DeviceUnavailableError(
            job or f"--device {requested}",
            f"device {requested!r} requested but no CUDA device is visible on node "
            f"{socket.gethostname()}{f' (SLURM job {slurm_job})' if slurm_job else ''}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}. "
            + _no_gpu_fix(),
        )
    return torch.device(requested)


def _no_gpu_fix() -> str:
    """What to do about it, in the words of the interface the job came from."""
    on_cpu = setting_name("device", "cpu")
    if os.environ.get(INTERFACE_VARIABLE) == "workflow":
        return (
            "The GPU rule ran without a GPU: check that the profile gives it one (gpu, "
            f"gpu_model, a GPU partition), or set {on_cpu} to score on CPU"
        )
    return f"Run it where a GPU is visible, or with {on_cpu} to score on CPU"


class Float32OutputLayer(torch.nn.Module):
    """The model's output layer computed in float32 from its own (bf16) weights and bf16 hidden
    states, so generation's logits carry no bf16 rounding (ModelSettings.upcast_output_layer).
    The weight is the same parameter (still tied to the input embedding), cast at each call."""

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.weight = layer.weight
        self.bias = getattr(layer, "bias", None)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.float()
        return torch.nn.functional.linear(hidden.float(), self.weight.float(), bias)


def upcast_output_layer(model: Any) -> None:
    """Swap the model's output layer for its float32 version (generation uses it; the engine
    reads the same weight and applies its own upcast)."""
    layer = model.get_output_embeddings()
    if not isinstance(layer, Float32OutputLayer):
        model.set_output_embeddings(Float32OutputLayer(layer))


def yarn_parameters(config: Any, factor: float, original_positions: int) -> dict:
    """The published YaRN override's rope parameters (Carbon's model card, the Genomic-NIAH
    evaluation): type yarn under both key names, the factor, the pretraining length, and the
    checkpoint's own rope_theta kept."""
    current = getattr(config, "rope_parameters", None) or {}
    theta = current.get("rope_theta", getattr(config, "rope_theta", None))
    params = {
        "rope_type": "yarn",
        "type": "yarn",
        "factor": float(factor),
        "original_max_position_embeddings": int(original_positions),
    }
    return params if theta is None else params | {"rope_theta": theta}


def apply_yarn(config: Any, factor: float, original_positions: int, max_positions: int) -> Any:
    """Set the YaRN override on a model config, as published: `max_position_embeddings` and the
    rope parameters, written as both `rope_parameters` and `rope_scaling` (transformers 5 reads
    the first; where the second is its alias, setting the first sets both)."""
    params = yarn_parameters(config, factor, original_positions)
    trained = getattr(config, "max_position_embeddings", None)
    if trained is not None and int(trained) != int(original_positions):
        log.warning(
            "YaRN's original positions (%s) are not the checkpoint's max_position_embeddings "
            "(%s): the scaling assumes the model was trained on %s positions; set "
            "yarn_original_positions to the checkpoint's length (the published override is for "
            "Carbon's 32,768)",
            f"{int(original_positions):,}",
            f"{int(trained):,}",
            f"{int(original_positions):,}",
        )
    config.max_position_embeddings = int(max_positions)
    config.rope_parameters = dict(params)
    if getattr(config, "rope_scaling", None) != params:
        with warnings.catch_warnings():  # transformers 5 calls rope_scaling deprecated
            warnings.simplefilter("ignore", FutureWarning)
            config.rope_scaling = dict(params)
    return config


@dataclass(frozen=True)
class Yarn:
    """A YaRN context extension to apply at load time (NiahSettings: yarn_factor > 0)."""

    factor: float
    original_positions: int
    max_positions: int


def long_context_attention(device: torch.device, dtype: str) -> str:
    """FlashAttention-2 for a bf16 / fp16 model on a CUDA device where the package is
    installed, else PyTorch's scaled-dot-product attention with a prompt's later chunks under
    a lower-right causal bias rather than a materialised mask (model.attention): none holds an
    L x L score matrix for a whole prompt, and a chunk keeps PyTorch's fused kernels."""
    import importlib.util

    half = dtype in ("bfloat16", "float16")
    if device.type == "cuda" and half and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return LOWER_RIGHT_SDPA


TOKENIZER_CONFIG = "tokenizer_config.json"  # what AutoTokenizer reads first


def load_tokenizer(spec: ModelSettings) -> tuple[Any, Any]:
    """The model's tokenizer and our adapter of it (its 6-mer block), remote code checked
    first: what an engine other than ours (vLLM) needs from the checkpoint."""
    from transformers import AutoTokenizer

    from carbon_vep.sources.hub import (
        check_remote_code,
        incomplete_in_cache,
        load_options,
        model_folder,
    )

    folder, from_hub = model_folder(spec)
    check_remote_code(spec, folder, from_hub)  # before any code of the checkpoint runs
    options = load_options(spec)
    if options.get("local_files_only") and not (folder / TOKENIZER_CONFIG).is_file():
        raise incomplete_in_cache(spec, f"no {TOKENIZER_CONFIG}")
    if not from_hub and not (folder / TOKENIZER_CONFIG).is_file():
        raise InputError(
            folder / TOKENIZER_CONFIG,
            "missing: the model folder has no tokenizer configuration (copy the checkpoint's "
            "tokenizer files next to its weights)",
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            spec.path, trust_remote_code=spec.trust_remote_code, **options
        )
    except (OSError, ValueError) as err:  # a checkpoint's incomplete or unreadable files
        raise load_error(spec, folder, "cannot load the model's tokenizer", err) from err
    try:
        vocab = dna_vocab(tokenizer)
    except TokenizerMismatchError as err:  # name the model: it is not a 6-mer DNA model
        raise TokenizerMismatchError(f"{spec.path}: not a 6-mer DNA tokenizer: {err}") from err
    return tokenizer, vocab


def load_error(spec: ModelSettings, where: Any, what: str, err: Exception) -> InputError:
    """transformers' error in our words: a file missing from a model read from the Hub cache
    alone is the cache's problem (the message names the fetch), anything else the
    checkpoint's."""
    from carbon_vep.sources.hub import incomplete_in_cache, reads_cache_only

    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if isinstance(err, OSError) and reads_cache_only(spec):
        return incomplete_in_cache(spec, f"{what}: {first}")
    return InputError(where, f"{what}: {first}")


def load_config(spec: ModelSettings, options: dict[str, Any] | None = None) -> Any:
    """The checkpoint's config (transformers' AutoConfig), read where the model's files come
    from (`options`: sources.hub.load_options's, asked here when not given)."""
    from transformers import AutoConfig

    from carbon_vep.sources.hub import load_options

    return AutoConfig.from_pretrained(
        spec.path, trust_remote_code=spec.trust_remote_code, **(options or load_options(spec))
    )


def yarn_overrides(spec: ModelSettings, yarn: Yarn) -> dict[str, Any]:
    """The YaRN override as config keys (vLLM's `hf_overrides`): exactly what `apply_yarn`
    sets on the config our engine loads."""
    config = load_config(spec)
    params = yarn_parameters(config, yarn.factor, yarn.original_positions)
    return {
        "max_position_embeddings": int(yarn.max_positions),
        "rope_parameters": dict(params),
        "rope_scaling": dict(params),
    }


def check_weights_loaded(path: str, config: Any, loaded: dict[str, Any]) -> None:
    """Refuse a model whose checkpoint did not fill every weight of the architecture its
    config.json names: transformers initialises those at random and only warns (a config of
    another architecture, a weights file cut short, a checkpoint saved with other key names),
    and the scores would be noise."""
    missing = sorted(loaded.get("missing_keys") or ())
    mismatched = [
        f"{key} {tuple(theirs)} in the checkpoint, {tuple(ours)} in the model"
        for key, theirs, ours in loaded.get("mismatched_keys") or ()
    ]
    if not missing and not mismatched:
        return
    problems = []
    if missing:
        problems.append(
            f"{len(missing):,} weight(s) missing from the checkpoint, e.g. {missing[:3]}"
        )
    if mismatched:
        problems.append(f"{len(mismatched):,} of another shape, e.g. {mismatched[:2]}")
    unused = sorted(loaded.get("unexpected_keys") or ())
    if unused:
        problems.append(
            f"{len(unused):,} checkpoint weight(s) the model has no place for, e.g. {unused[:3]}"
        )
    kind = getattr(config, "model_type", None) or type(config).__name__
    raise InputError(
        path,
        f"the weights do not fit the model its config.json describes ({kind}): "
        f"{'; '.join(problems)}. Those weights would be random and the scores noise: use the "
        "checkpoint's own config.json and all of its weight files",
    )


def load_model(
    spec: ModelSettings, yarn: Yarn | None = None, attention: str | None = None
) -> LoadedModel:
    """The model and its tokenizer on the requested device; `yarn` overrides the rope
    configuration before the weights load (the Genomic-NIAH task's long contexts), `attention`
    names transformers' attention implementation (None: its default)."""
    from transformers import AutoModelForCausalLM

    from carbon_vep.sources.hub import load_options

    if attention == LOWER_RIGHT_SDPA:
        register()  # a name transformers accepts only once registered
    device = resolve_device(spec.device)
    tokenizer, vocab = load_tokenizer(spec)
    options = load_options(spec)
    try:
        config = load_config(spec, options)
        if yarn is not None:
            apply_yarn(config, yarn.factor, yarn.original_positions, yarn.max_positions)
        # mismatched shapes are reported in `loaded` (and refused below), not raised bare
        model, loaded = AutoModelForCausalLM.from_pretrained(
            spec.path,
            config=config,
            dtype=_DTYPES[spec.dtype],
            trust_remote_code=spec.trust_remote_code,
            ignore_mismatched_sizes=True,
            output_loading_info=True,
            **options,
            **({"attn_implementation": attention} if attention else {}),
        )
    except (OSError, ValueError) as err:  # no weights, no config, a config of no causal LM
        raise load_error(spec, spec.path, "cannot load the model", err) from err
    check_weights_loaded(spec.path, config, loaded)
    if attention == LOWER_RIGHT_SDPA and not model.is_backend_compatible():
        # its attention code does not go through transformers' registry (remote code), so it
        # could not read the lower-right bias: transformers' own sdpa then
        model.set_attn_implementation("sdpa")
    model.to(device).eval()
    if spec.upcast_output_layer:
        upcast_output_layer(model)
    if model.get_output_embeddings().weight.shape[0] < int(vocab.kmer_ids.max()) + 1:
        raise RuntimeError(f"{spec.path}: output layer smaller than the tokenizer's k-mer ids")
    return LoadedModel(model=model, tokenizer=tokenizer, vocab=vocab, device=device, settings=spec)
