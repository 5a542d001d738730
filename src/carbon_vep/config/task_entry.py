"""A task entry of the config (`tasks:`): its kind (config.tasks), task file, models and the
settings of its kind; the check that it sets no other kind's settings, and the split of its
sweeps (a list of values of a sweepable setting) into its headline and sweep points. No torch
here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from carbon_vep.config.fields import ConfigError, flat_fields, group, setting, takes_list
from carbon_vep.config.stages import EvaluationSettings, PerturbationSettings, RecoverySettings
from carbon_vep.config.tasks import TASK_KINDS, SweepPoint, TaskKind

TaskKindName = Literal[tuple(TASK_KINDS)]  # the declared kinds (config.tasks)


def _kinds_help() -> str:
    return " or ".join(
        f"{k.name} (columns {', '.join(k.columns + k.optional_columns)})"
        for k in TASK_KINDS.values()
    )


def kind_titles() -> str:
    *first, last = (k.title for k in TASK_KINDS.values())
    return f"{', '.join(first)} and {last}" if first else last


@dataclass(frozen=True)
class TaskConfig:
    kind: TaskKindName = setting(help=_kinds_help())
    path: str = setting(help="Parquet, TSV or CSV file of the task")
    models: tuple[str, ...] | None = setting(
        None, help="model keys to run this task with (default all)"
    )
    parts: int = setting(
        1,
        minimum=1,
        help="sequence_recovery: jobs each model's run of the task (and of each sweep point) is "
        "cut into, each generating an equal share of the rows, merged into the one table and "
        "metrics one job writes (the official sweep spreads a point over 8 GPUs); 1 = one job",
    )
    # each kind's settings (TaskKind.group); a task sets only its own kind's
    recovery: RecoverySettings = group(RecoverySettings)
    perturbation: PerturbationSettings = group(PerturbationSettings)
    evaluation: EvaluationSettings = group(EvaluationSettings)

    @property
    def settings(self) -> Any:
        """The settings of this task's kind."""
        return getattr(self, TASK_KINDS[self.kind].group)

    def check(self, key: str) -> None:
        if self.parts > 1 and not TASK_KINDS[self.kind].generation:
            raise ConfigError(
                f"tasks.{key}: parts {self.parts}: only a sequence_recovery task is cut into "
                f"jobs; a {self.kind} task runs as one"
            )

    def at(self, point: SweepPoint) -> TaskConfig:
        """This entry at a point of its sweep: the one setting at the point's value."""
        settings = dataclasses.replace(self.settings, **{point.setting: point.value})
        return dataclasses.replace(self, **{TASK_KINDS[self.kind].group: settings})


def check_task_keys(key: str, task: Mapping[str, Any]) -> None:
    """A task entry may only set the settings of its own kind (the schema fills every task
    key's default, so a key of another kind counts only when it differs from its default)."""
    kind = task.get("kind")
    others = [k.settings() for name, k in TASK_KINDS.items() if name != kind]
    changed = sorted(
        f.name
        for other in others
        for f in fields(other)
        if f.name in task and task[f.name] != getattr(other, f.name)
    )
    if changed:
        raise ConfigError(f"tasks.{key}: {changed} do not apply to a {kind} task")


def split_sweeps(
    key: str, task: Mapping[str, Any]
) -> tuple[dict[str, Any], tuple[SweepPoint, ...]]:
    """The entry at its headline (a list's first value) and the other values of its lists as
    sweep points, one setting varied at a time from the headline (no cross product)."""
    kind = TASK_KINDS.get(task.get("kind"))
    if kind is None:  # the kind is refused where the entry is read
        return dict(task), ()
    headline, points = dict(task), []
    for f, hint in flat_fields(TaskConfig):
        values = task.get(f.name)
        if isinstance(values, list) and not takes_list(hint):
            check_sweep(f"tasks.{key}.{f.name}", kind, f, values)
            headline[f.name] = values[0]
            points += [SweepPoint(f.name, value) for value in values[1:]]
    order = list(kind.sweeps)  # the kind's order, each list's own within it
    return headline, tuple(sorted(points, key=lambda p: order.index(p.setting)))


def check_sweep(where: str, kind: TaskKind, f: dataclasses.Field, values: list) -> None:
    """A list is a sweep of a setting the kind declares sweepable, of distinct valid values."""
    if f.name not in kind.sweeps:
        swept = ", ".join(kind.sweeps) or "none of its settings"
        raise ConfigError(f"{where}: a list sweeps a setting; a {kind.name} task sweeps {swept}")
    if not values:
        raise ConfigError(f"{where}: an empty list sweeps nothing; give one value or several")
    low = f.metadata["minimum"]
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: {value!r} is not an integer")
        if low is not None and value < low:
            raise ConfigError(f"{where}: {value} is below the minimum {low:g}")
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise ConfigError(f"{where}: {repeated} given more than once; each value runs once")
