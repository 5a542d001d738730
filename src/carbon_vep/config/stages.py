"""The settings of each stage, defined once: type, default, meaning, CLI flag, config key.

One frozen dataclass per stage concern (declared with `config.fields.setting`): how a model
is loaded (`ModelSettings`), how a panel is read and labelled (`PanelSettings`,
`LabelSettings`), which recipe scores it (`RecipeSettings`, `TileSettings`, `ShardSettings`),
what metrics report (`MetricSettings`, `EvaluationSettings`), the suite tasks
(`RecoverySettings`, `PerturbationSettings`) and how a scan is cut into jobs
(`ScanChunkSettings`). A stage command reads the classes it needs (`fields.from_args`); the
config entries that group them are in `config.run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

import polars as pl

from carbon_vep.columns import RESERVED as PIPELINE_COLUMNS
from carbon_vep.config.fields import (
    ConfigError,
    default_of,
    describe,
    field_named,
    group,
    setting,
)
from carbon_vep.config.recipes import NORMALIZATIONS, PUBLISHED, RECIPES, Recipe


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
        "Answers equal to float rounding; not yet measured on a GPU, hence off "
        "(docs/performance.md#compiled-decoder-layers)",
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
        "as the Carbon-3B card runs it): in a config the key of another model entry, on the "
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


@dataclass(frozen=True)
class PanelSettings:
    """How a panel is read and checked against the reference (check-panel, score, annotate)."""

    build: str = setting(
        help="genome build the panel and reference are on (e.g. hg38); datasets sharing a "
        "reference must declare the same build (hg38 = GRCh38, hg19 = GRCh37 = b37)"
    )
    format: Literal["auto", "vcf", "parquet", "tsv", "csv"] = setting(
        "auto", help="panel file format (auto: from the file name)"
    )
    columns: dict[str, str] = setting(
        {},
        flag="column",
        help="standard name (chrom, pos, ref, alt, or any other) -> column in a table panel; "
        "without it chrom/chr/chromosome/#CHROM, pos/position, ref and alt are found in any "
        "letter case",
    )
    info_fields: tuple[str, ...] = setting(
        (), flag="info-field", help='VCF INFO fields to carry to the outputs ("*" = every field)'
    )
    indel_policy: Literal["skip"] = setting(
        "skip",
        help="indels and MNVs (after trimming shared bases) are kept with status skipped and "
        "the reason; the recipes score SNVs",
    )
    min_ref_concordance: float = setting(
        0.9,
        scope="run",
        minimum=0,
        maximum=1,
        help="abort before scoring when fewer SNV REF alleles match the reference",
    )


DEFAULT_CLNSIG_LABELS = {
    "Pathogenic": 1,
    "Likely_pathogenic": 1,
    "Pathogenic/Likely_pathogenic": 1,
    "Benign": 0,
    "Likely_benign": 0,
    "Benign/Likely_benign": 0,
}


CLNSIG_LABEL_COLUMN = "label"  # the column label_source clinvar_clnsig derives


@dataclass(frozen=True)
class LabelSettings:
    """Where a panel's labels come from and which values are positive (check-panel, score,
    annotate, metrics)."""

    label_source: Literal["column", "clinvar_clnsig"] = setting(
        "column",
        help="column: labels are read from `label_column` as they are; clinvar_clnsig: a "
        f"`{CLNSIG_LABEL_COLUMN}` column (1, 0 or null) and `label_conflict` are derived from "
        "the INFO field `clnsig_field` through `clnsig_labels`",
    )
    label_column: str | None = setting(
        None,
        help="column holding the labels (default: none, or the derived "
        f"`{CLNSIG_LABEL_COLUMN}` under label_source clinvar_clnsig)",
    )
    clnsig_field: str = setting("CLNSIG", help="INFO field holding ClinVar's significance")
    clnsig_labels: dict[str, int] = setting(
        DEFAULT_CLNSIG_LABELS,
        flag="clnsig-label",
        value_choices=(0, 1),
        help="CLNSIG term -> label; terms not named here (Uncertain_significance, "
        "risk_factor, ...) leave the row unlabeled; Conflicting_* and terms naming both labels "
        "give a null label and label_conflict = true (such rows are left out of metrics)",
    )
    positive_labels: tuple[str, ...] = setting(
        ("1", "1.0", "True", "true"),
        flag="positive",
        help="values of the label column that mean positive (refused with no label column; under "
        "label_source clinvar_clnsig, whose labels are 1 / 0, it must hold 1)",
    )
    negative_labels: tuple[str, ...] = setting(
        ("0", "0.0", "False", "false"),
        flag="negative",
        help="values of the label column that mean negative (refused with no label column; under "
        "label_source clinvar_clnsig, whose labels are 1 / 0, it must hold 0)",
    )

    def __post_init__(self) -> None:
        if self.label_column is not None:
            return
        clnsig = self.label_source == "clinvar_clnsig"  # its derived column holds 1 / 0 alone
        for name, derived in (("positive_labels", "1"), ("negative_labels", "0")):
            f, values = field_named(self, name), tuple(getattr(self, name))
            if clnsig and derived not in values:  # metrics would find no label of this class
                why = (
                    f"the labels {describe(field_named(self, 'label_source'), 'clinvar_clnsig')}"
                    f" derives are 1 / 0, and {derived!r} is not among these: name the CLNSIG "
                    f"terms in {describe(field_named(self, 'clnsig_labels'))} instead"
                )
            elif not clnsig and values != default_of(f):  # a default says nothing: the
                why = (  # schema fills it in; metrics would read no labels, whatever it says
                    f"no label column to read it in: set "
                    f"{describe(field_named(self, 'label_column'))} (the panel's column of "
                    "labels), or drop it"
                )
            else:
                continue
            raise ConfigError(f"{describe(f, ', '.join(values), tuple[str, ...])}: {why}")

    @property
    def column(self) -> str | None:
        """The label column metrics read: the configured one, or the one ingest derives."""
        if self.label_column:
            return self.label_column
        return CLNSIG_LABEL_COLUMN if self.label_source == "clinvar_clnsig" else None


def label_classes(values: pl.Expr, positive: Sequence[str], negative: Sequence[str]) -> pl.Expr:
    """1 / 0 / null: each label's text (`1`, `1.0`, `true` for a boolean) matched against the
    values that mean positive and negative; any other value is no label."""
    text = values.cast(pl.Utf8)
    return (
        pl.when(text.is_in(list(positive)))
        .then(1)
        .when(text.is_in(list(negative)))
        .then(0)
        .otherwise(None)
    )


@dataclass(frozen=True)
class TileSettings:
    """How a scan cuts a region into one-pass tiles."""

    tile_bp: int = setting(
        49146,
        minimum=12,
        help="tile length in bp (8,191 tokens + the prefix = 8,192, Carbon-500M native)",
    )
    min_context: int = setting(
        24000, minimum=0, help="left context guaranteed to every scored base"
    )

    def check(self) -> None:
        """A tile scores the bases after its first `min_context`: at least one 6-mer of them
        (the scan commands and a config's scans refuse it before the plan or a model job; not
        a class invariant, as a dataset whose recipe tiles nothing may set tile_bp alone)."""
        window = self.tile_bp - self.tile_bp % 6  # whole 6-mer tokens
        if window - self.min_context < 6:
            tile_bp, min_context = fields(self)
            raise ConfigError(
                f"{describe(min_context)} = {self.min_context:,} leaves no bases to score in a "
                f"tile of {describe(tile_bp)} = {self.tile_bp:,} ({window:,} bp of whole 6-mers): "
                f"a tile scores the bases after its min_context, at least one 6-mer; lower "
                f"min_context to at most {max(window - 6, 0):,} or raise tile_bp to at least "
                f"{(self.min_context + 6 + 5) // 6 * 6:,}"
            )


@dataclass(frozen=True)
class RecipeSettings:
    """Which recipe scores a dataset, and its options (make-shards, score-shard, score)."""

    recipe: str = setting(
        choices=tuple(RECIPES),
        help="; ".join(f"{r.name}: {r.summary}" for r in RECIPES.values()),
    )
    normalization: str = setting(
        PUBLISHED,
        choices=(PUBLISHED, *NORMALIZATIONS),
        help="published = the recipe's published one; or another the recipe computes: "
        + "; ".join(f"{r.name}: {', '.join(r.normalizations)}" for r in RECIPES.values()),
    )
    window_bp: int | None = setting(
        None,
        minimum=6,
        help="window length: the centered window (centered, fns) or the left context "
        "(nexttoken, scan); default: the recipe's published one; from_scan cuts no window "
        "(refused there)",
    )
    rc_average: bool = setting(
        False, help="average with the reverse-complement delta (centered and fns only)"
    )
    share_prefix: bool = setting(
        True, help="score alternates from the reference prefix's KV cache (same values)"
    )
    tiles: TileSettings = group(TileSettings)  # the scan recipe's tiles
    scan: str | None = setting(
        None,
        help="recipe from_scan: the key of the scan (in `scans:`) whose outputs the panel is "
        "looked up in, no model (each of the dataset's models needs that scan)",
    )

    def __post_init__(self) -> None:
        problem = self.definition.unsupported_normalization(self.normalization)
        if problem:  # rows must never name a normalisation their scorer did not compute
            normalization = field_named(self, "normalization")
            raise ConfigError(f"{describe(normalization, self.normalization)}: {problem}")
        problem = self.definition.unsupported_rc_average() if self.rc_average else None
        if problem:  # a scorer that ignores it would leave rows and provenance saying it ran
            rc_average = field_named(self, "rc_average")
            raise ConfigError(f"{describe(rc_average, 'true', bool)}: {problem}")
        problem = self.definition.unsupported_window_bp() if self.window_bp is not None else None
        if problem:  # its default (None) is no setting: the schema fills it into every entry
            window_bp = field_named(self, "window_bp")
            raise ConfigError(f"{describe(window_bp, str(self.window_bp))}: {problem}")

    @property
    def definition(self) -> Recipe:
        return RECIPES[self.recipe]

    @property
    def resolved_normalization(self) -> str:
        return self.definition.normalization(self.normalization)


@dataclass(frozen=True)
class ShardSettings:
    shard_size: int = setting(
        500,
        scope="run",
        minimum=1,
        help="scoreable variants per shard (whole sites are kept together)",
    )


@dataclass(frozen=True)
class EvaluationSettings:
    """Intervals of every metric (metrics, suite tasks)."""

    bootstrap: int = setting(
        1000,
        scope="run",
        minimum=0,
        help="resamples for the 95% percentile bootstrap intervals of every metric (0 = none); "
        "the jobs that compute metrics read it (compute_metrics, the suite's merges), no model "
        "job: changing it reruns no scoring",
    )
    seed: int = setting(0, scope="cli", help="random seed of the bootstrap")


@dataclass(frozen=True)
class MetricSettings:
    """What compute_metrics reports for a dataset."""

    headline_metrics: tuple[str, ...] = setting(
        ("auroc",),
        flag="headline",
        help="metrics of this dataset in the results table, e.g. auroc, auprc_trapezoid, "
        "average_precision, average_precision_by_chrom_weighted_drop_single_class (TraitGym)",
    )
    breakdown_columns: tuple[str, ...] = setting(
        ("region", "variant_type", "consequence"),
        flag="breakdown",
        help="columns whose groups get their own metrics (when present)",
    )
    spearman_column: str | None = setting(
        None,
        help="continuous functional score column for Spearman against delta (BRCA2 DMS); a "
        "panel column named as one the pipeline writes (`score`) is `panel_<name>` here",
    )
    evaluation: EvaluationSettings = group(EvaluationSettings)

    def check(self) -> None:
        """A Spearman column the pipeline writes itself (`score`, `delta`, ...) is the score
        or a part of it, never the panel's: a panel column of that name is carried as
        `panel_<name>`, and ρ against delta would be the score against itself (−1 for `score`).
        Refused by compute_metrics and when a config is read."""
        column = self.spearman_column
        if column in PIPELINE_COLUMNS:
            spearman = field_named(self, "spearman_column")
            raise ConfigError(
                f"{describe(spearman)} = {column!r} names a column the pipeline writes itself, "
                f"not the panel's: a panel column {column!r} is carried as 'panel_{column}' "
                f"(set {describe(spearman, f'panel_{column}')})"
            )


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


@dataclass(frozen=True)
class ScanChunkSettings:
    """How a scan's targets are cut into jobs (plan-scan), and the precision its scores are
    counted (count-scan) and printed at."""

    chunk_bp: int = setting(
        50_000_000,
        scope="run",
        minimum=1_000,
        help="scored bases per scan job: 50 Mbp is ~13 min of Carbon-3B on one A100 at 50% of "
        "bf16 peak (estimate; profiles/slurm-a10 and slurm-h100 set 30 and 150 Mbp)",
    )
    group_bp: int = setting(
        10_000_000,
        minimum=1,
        help="output files: a contig with at least this many scored bases gets its own Parquet "
        "file and tabix TSV (one merge job); smaller contigs (unplaced, decoy, HLA, a draft "
        "assembly's) share files, consecutive in reference order, up to this many scored bases "
        "a file (GRCh38's chromosomes but chrM have their own; its ~3,300 other contigs of the "
        "analysis set share a few dozen)",
    )
    tsv_decimals: int = setting(
        2,
        minimum=1,
        maximum=6,
        help="decimals of the score in the tabix TSV (the Parquet dataset keeps every marginal); "
        "the calibration counts scores at this precision, so a printed score has one PHRED",
    )


@dataclass(frozen=True)
class CalibrationSettings:
    """How a scan's scores are calibrated (count-scan, calibrate-scan, write-scan-tsv)."""

    neutral_regions: str | None = setting(
        None,
        help="BED file of neutral regions (e.g. ancestral repeats): the context means are taken "
        "over the scanned SNVs inside them; default: every scanned SNV. Checked by the plan: "
        "contigs the reference lacks (a UCSC BED's _alt/_fix/_random) are ignored and named",
    )
    context_min_count: int = setting(
        100,
        minimum=1,
        help="neutral SNVs a pentanucleotide cell needs for its own mean; below it the "
        "trinucleotide cell's mean is used, then the global mean",
    )
    tsv_calibrated: bool = setting(
        False,
        help="the tabix TSV also carries `calibrated` and `calibrated_phred` (always in the "
        "calibration tables, annotate and from_scan datasets)",
    )
