"""The suite tasks' own settings: sequence recovery (`RecoverySettings`), perturbation pairs
(`PerturbationSettings`) and Genomic-NIAH (`NiahSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from carbon_vep.config.fields import setting


@dataclass(frozen=True)
class RecoverySettings:
    """Sequence recovery (GENERator's generative task)."""

    decoder: Literal["token", "fns_marginal", "fns_conditional"] = setting(
        "token", help="greedy decoder (token = published)"
    )
    max_prompt_bp: int = setting(6144, minimum=6, help="prompt = the rightmost bases, whole 6-mers")
    new_tokens: int = setting(5, minimum=1, help="tokens generated")
    score_bp: int = setting(
        30,
        minimum=1,
        help="accuracy denominator in bp under accuracy_mode fixed_bp (and there the length of "
        "a sequence_tail label)",
    )
    accuracy_mode: Literal["fixed_bp", "prediction_length"] = setting(
        "fixed_bp",
        help="fixed_bp: matches / score_bp (published headline); prediction_length: matches / "
        "min(label, prediction) bp, the published long-rollout scoring",
    )
    label_source: Literal["auto", "dataset", "sequence_tail"] = setting(
        "auto",
        help="dataset: the `label` column; sequence_tail: the last rollout bp of `sequence` "
        "(score_bp, or new_tokens x 6 under prediction_length), the prompt cut before it; auto "
        "(published default): sequence_tail when the rollout is longer than the labels, dataset "
        "when they cover it; a table with labels on both sides of it is refused",
    )
    species_tags: bool = setting(
        False,
        help="put the `type` column's species tag (`<mammalian_species>`, ...) before the DNA "
        "prefix, as the published --use_species_tags; the tag must be one token of the model",
    )
    decode_cache: Literal["dynamic", "static", "captured"] = setting(
        "dynamic",
        help="KV cache and loop of the rollouts on the transformers engine: dynamic (grows a "
        "step, transformers' eager decoding); static (transformers' StaticCache, sized once a "
        "job to its longest prompt + new tokens; on CUDA transformers compiles the decode step, "
        "torch.compile reduce-overhead); captured (the same cache, our own loop: the decoder's "
        "choice inside a step that never waits for the host, on CUDA the decoder layers' steps "
        "around attention compiled and the step replayed as a CUDA graph; with a draft model, "
        "our speculative loop, an iteration of both models one graph). On a CPU static and "
        "captured run uncompiled. Same predictions as dynamic on the CPU (tested); their "
        "speed and bf16 predictions on a GPU are not measured yet, hence the default "
        "(docs/generation.md#static-kv-cache). vLLM jobs ignore it",
    )


@dataclass(frozen=True)
class PerturbationSettings:
    """Perturbation pairs: S(original) > S(perturbed)."""

    scoring: Literal["token", "bp"] = setting(
        "token", help="mean token log-prob (published) or FNS bp-level"
    )
    normalization: Literal["full_vocab", "dna_block"] = setting(
        "full_vocab", help="token scoring: softmax over the vocabulary or the 6-mers"
    )

    @property
    def resolved_normalization(self) -> str:
        """FNS marginals are always over the 6-mer block; token scores use `normalization`."""
        return self.normalization if self.scoring == "token" else "dna_block"


@dataclass(frozen=True)
class NiahSettings:
    """Genomic-NIAH: greedy retrieval of a planted value after a long prompt, and its likelihood
    against a negative value (score-niah)."""

    yarn_factor: float = setting(
        0.0,
        minimum=0,
        help="YaRN context extension applied when the model loads (0 = off). The published "
        "override for contexts past Carbon-3B's native 32,768 tokens is 4: rope parameters "
        "{rope_type/type: yarn, factor, original_max_position_embeddings} with the model's "
        "rope_theta, and max_position_embeddings = yarn_max_positions",
    )
    yarn_original_positions: int = setting(
        32768, minimum=1, help="YaRN's original_max_position_embeddings (the pretraining length)"
    )
    yarn_max_positions: int = setting(
        65536,
        minimum=1,
        help="max_position_embeddings under YaRN (published: 65,536 with factor 4)",
    )
    prefill_chunk: int = setting(
        8192,
        minimum=0,
        scope="run_default",
        help="prompt tokens a prefill forward pass takes at once (0 = the whole prompt): the "
        "activations then scale with the chunk, not the context; values agree to float "
        "rounding. Also a top-level key, every NIAH entry's default (a GPU profile's `config:` "
        "sets it for its class: slurm-h100 0, measured faster); an entry's own value wins",
    )

    @property
    def positions(self) -> int | None:
        """The positions the model may use under this setting (None: the model's own)."""
        return int(self.yarn_original_positions * self.yarn_factor) if self.yarn_factor else None
