"""The suite's task kinds other than variant panels, each declared once (`TASK_KINDS`): its
config name, settings, Snakemake rule, command, task-file columns, metrics and the settings a
task entry may sweep (a list of values: docs/metrics.md#sweeps). The config, the CLI, the
workflow, the estimate and the report read this table (docs/adding-a-task.md).

It sits at the config layer so that a config is checked, and a run planned and estimated,
before anything imports torch: a task kind's code (suite/) needs the model; its declaration
does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from carbon_vep.config.stages import PerturbationSettings, RecoverySettings


@dataclass(frozen=True)
class Metric:
    """A key of a task's metrics JSON and its one-sentence definition. `{setting}` in a text is
    that setting's value; `{case}` is the text of `cases` that the value of `case_of` picks."""

    name: str
    definition: str
    case_of: str | None = None
    cases: Mapping[str, str] = field(default_factory=dict)

    def text(self, settings: Any) -> str:
        values = asdict(settings)
        if self.case_of is not None:
            values["case"] = self.cases[values[self.case_of]].format(**values)
        return self.definition.format(**values)


@dataclass(frozen=True)
class Sweep:
    """A setting of a kind that a task entry may sweep (a list of values: the first the
    headline's, each other a job of its own). The report draws accuracy against `axis`, the
    value times `scale`."""

    axis: str
    scale: int = 1

    def axis_value(self, value: int) -> int:
        return value * self.scale


# a sweep point in a job's provenance (the rule's one way in) and in its metrics' parameters
SWEEP_KEY = "sweep"


@dataclass(frozen=True)
class SweepPoint:
    """A value of a swept setting other than its entry's first: the headline's jobs with this
    one setting replaced."""

    setting: str
    value: int

    def record(self) -> dict[str, Any]:
        """The point as its metrics JSON records it (`parameters.sweep`, SWEEP_KEY)."""
        return {"setting": self.setting, "value": self.value}


@dataclass(frozen=True)
class TaskKind:
    """One kind of suite task: what the config, the CLI, the workflow and the report know of it
    before its code (suite/) runs."""

    name: str  # `kind:` of a task entry, and `kind` of its metrics JSON
    title: str  # the kind in prose
    settings: type  # its settings (config.stages)
    group: str  # TaskConfig's attribute holding them
    rule: str  # the Snakemake rule of its model jobs, a part of the rows each (suite.smk)
    command: str  # the carbon-vep subcommand that rule runs
    # the CPU rule joining the parts into the task's table and metrics, with the intervals (the
    # evaluation settings are its alone: changing them reruns no model job), and its command
    merge_rule: str
    merge_command: str
    columns: tuple[str, ...]  # required columns of its task file
    optional_columns: tuple[str, ...]  # read when present
    generation: bool  # generates tokens: the engine and vLLM options, and `--times`
    unit: str  # what one row of its task file is, in the estimate
    metrics: tuple[Metric, ...]
    headline: str  # the metric of the results table
    sweeps: Mapping[str, Sweep] = field(default_factory=dict)  # the settings a list sweeps

    def definitions(self, settings: Any) -> dict[str, str]:
        """Each metric's definition under `settings`, as the metrics JSON records them."""
        return {m.name: m.text(settings) for m in self.metrics}

    def key(self, name: str) -> str:
        """`name`, a metric this kind declares (a reader of an undeclared one fails here)."""
        if name not in (m.name for m in self.metrics):
            raise KeyError(f"task kind {self.name} declares no metric {name!r}")
        return name


SEQUENCE_RECOVERY = TaskKind(
    name="sequence_recovery",
    title="sequence recovery",
    settings=RecoverySettings,
    group="recovery",
    rule="score_recovery",
    command="score-recovery",
    merge_rule="merge_recovery",
    merge_command="merge-recovery",
    columns=("sequence", "label"),
    optional_columns=("type",),
    generation=True,
    unit="prompts",
    metrics=(
        Metric(
            "accuracy",
            "{case}",
            case_of="accuracy_mode",
            cases={
                "fixed_bp": "mean over rows of (bases equal to the label among the first "
                "{score_bp} of prediction and label) / {score_bp}; a prediction shorter than "
                "{score_bp} bp counts its missing bases as wrong",
                "prediction_length": "mean over rows of (bases equal to the label among the "
                "first scored_bp) / scored_bp, with scored_bp = min(label length, prediction "
                "length) per row (a row with scored_bp 0 counts 0)",
            },
        ),
        Metric(
            "by_type",
            "the same accuracy averaged over the rows of each `type`, types in sorted order (the "
            "published script's per-type means; rows without a type are in none)",
        ),
        Metric(
            "label_source",
            "where the labels came from, for the whole table: dataset (the `label` column) or "
            "sequence_tail (the last bases of `sequence`, cut off the prompt)",
        ),
        Metric("mean_scored_bp", "mean over scored rows of the bases each accuracy is taken over"),
        Metric("chance_accuracy", "expected accuracy of uniformly random bases"),
    ),
    headline="accuracy",
    # the published gen_len sweep (new_tokens; a token is a 6-mer) and prompt lengths
    sweeps={"new_tokens": Sweep("rollout bp", 6), "max_prompt_bp": Sweep("prompt bp")},
)

PERTURBATION = TaskKind(
    name="perturbation",
    title="perturbation",
    settings=PerturbationSettings,
    group="perturbation",
    rule="score_perturbation",
    command="score-perturbation",
    merge_rule="merge_perturbation",
    merge_command="merge-perturbation",
    columns=("original_sequence", "sequence"),
    optional_columns=(),
    generation=False,
    unit="pairs",
    metrics=(
        Metric(
            "accuracy",
            "share of scored pairs with S(original_sequence) > S(sequence), strictly (ties count "
            "as wrong); S = mean log-likelihood of the sequence cut to whole k-mers ({case})",
            case_of="scoring",
            cases={
                "token": "per 6-mer token, normaliser {normalization}",
                "bp": "per base, FNS marginals over the 6-mer block",
            },
        ),
        Metric("mean_margin", "mean over scored pairs of S(original_sequence) − S(sequence)"),
        Metric("n_ties", "scored pairs with S(original_sequence) == S(sequence) (counted wrong)"),
    ),
    headline="accuracy",
)

TASK_KINDS: dict[str, TaskKind] = {kind.name: kind for kind in (SEQUENCE_RECOVERY, PERTURBATION)}


def swept_settings() -> set[str]:
    """The settings some kind lets a task entry sweep (the config schema takes a list there)."""
    return {name for kind in TASK_KINDS.values() for name in kind.sweeps}


def kind_of_rule(rule: str) -> TaskKind:
    """The task kind whose jobs `rule` runs."""
    kinds = [kind for kind in TASK_KINDS.values() if kind.rule == rule]
    if not kinds:
        raise KeyError(f"no task kind declares rule {rule!r}")
    return kinds[0]
