"""The task kinds' one table (config.tasks): what the config takes from each declaration, and
the declarations themselves hold together."""

from __future__ import annotations

from dataclasses import fields
from typing import Literal, get_args, get_origin, get_type_hints

import pytest

from carbon_vep.config.fields import ConfigError
from carbon_vep.config.run import RunConfig
from carbon_vep.config.schema import json_schema
from carbon_vep.config.stages import PerturbationSettings, RecoverySettings
from carbon_vep.config.task_entry import TaskConfig
from carbon_vep.config.tasks import (
    PERTURBATION,
    SEQUENCE_RECOVERY,
    TASK_KINDS,
    TaskKind,
    kind_of_rule,
)
from carbon_vep.config.workflow import MODEL_RULES

KINDS = list(TASK_KINDS.values())
BASE = {"models": {"m": {"path": "x"}}}


def _changed(settings: type, name: str):
    """A value of setting `name` other than its default."""
    hint, default = get_type_hints(settings)[name], getattr(settings(), name)
    if get_origin(hint) is Literal:
        return next(choice for choice in get_args(hint) if choice != default)
    if isinstance(default, bool):
        return not default
    return default + 1


def _task(kind: TaskKind, **keys) -> dict:
    return {**BASE, "tasks": {"t": {"kind": kind.name, "path": "t.tsv", **keys}}}


def test_the_config_takes_exactly_the_declared_kinds():
    (kind_field,) = [f for f in fields(TaskConfig) if f.name == "kind"]
    assert get_args(get_type_hints(TaskConfig)["kind"]) == tuple(TASK_KINDS)
    schema = json_schema()["properties"]["tasks"]["additionalProperties"]["properties"]["kind"]
    assert schema["enum"] == list(TASK_KINDS)
    for kind in KINDS:
        assert kind.name in kind_field.metadata["help"]
    with pytest.raises(ConfigError, match="kind"):
        RunConfig.from_dict({**BASE, "tasks": {"t": {"kind": "sequence_recall", "path": "t"}}})


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_a_task_reads_the_settings_of_its_own_kind(kind):
    """Each kind's settings are a TaskConfig group under its declared attribute, and a task
    entry setting one of them gets it."""
    hints = get_type_hints(TaskConfig)
    assert hints[kind.group] is kind.settings
    first = fields(kind.settings)[0].name
    value = _changed(kind.settings, first)
    task = RunConfig.from_dict(_task(kind, **{first: value})).tasks["t"]
    assert isinstance(task.settings, kind.settings)
    assert getattr(task.settings, first) == value


@pytest.mark.parametrize(
    ("kind", "other"),
    [(k, o) for k in KINDS for o in KINDS if o is not k],
    ids=lambda k: k.name,
)
def test_a_key_of_another_kind_is_refused(kind, other):
    name = fields(other.settings)[0].name
    with pytest.raises(ConfigError, match=rf"\['{name}'\] do not apply to a {kind.name} task"):
        RunConfig.from_dict(_task(kind, **{name: _changed(other.settings, name)}))
    # at its default (the schema fills every key's default), it is no mistake
    RunConfig.from_dict(_task(kind, **{name: getattr(other.settings(), name)}))


def test_the_kinds_settings_have_keys_of_their_own():
    """A task entry is flat: two kinds' settings (or a kind's and the entry's own keys) with
    the same name could not be told apart."""
    own = {f.name for f in fields(TaskConfig)} - {k.group for k in KINDS}
    names = [f.name for k in KINDS for f in fields(k.settings)]
    assert len(names) == len(set(names)) and not own & set(names)


def test_declared_names_are_unique_and_rules_lead_back_to_their_kind():
    for attribute in ("name", "group", "rule", "command"):
        values = [getattr(k, attribute) for k in KINDS]
        assert len(values) == len(set(values)), attribute
    for kind in KINDS:
        assert kind_of_rule(kind.rule) is kind
        assert kind.rule in MODEL_RULES  # a GPU profile's check covers its jobs
    with pytest.raises(KeyError, match="score_nothing"):
        kind_of_rule("score_nothing")


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_metric_is_defined_under_every_setting_it_depends_on(kind):
    """Each metric's definition is one filled sentence for each value of the setting that picks
    it; the headline is a declared metric."""
    assert kind.key(kind.headline) == kind.headline
    for metric in kind.metrics:
        values = [None]
        if metric.case_of is not None:
            values = list(get_args(get_type_hints(kind.settings)[metric.case_of]))
            assert sorted(metric.cases) == sorted(values), metric.name
        for value in values:
            settings = kind.settings(**({metric.case_of: value} if value else {}))
            text = kind.definitions(settings)[metric.name]
            assert text and "{" not in text and "}" not in text, (metric.name, value)
    with pytest.raises(KeyError, match="declares no metric"):
        kind.key("no_such_metric")


def test_definitions_fill_in_the_settings():
    fixed = SEQUENCE_RECOVERY.definitions(RecoverySettings(score_bp=12))["accuracy"]
    assert "among the first 12 of prediction and label) / 12" in fixed
    bp = PERTURBATION.definitions(PerturbationSettings(scoring="bp"))["accuracy"]
    assert bp.endswith("(per base, FNS marginals over the 6-mer block)")
    token = PERTURBATION.definitions(PerturbationSettings(normalization="dna_block"))
    assert token["accuracy"].endswith("(per 6-mer token, normaliser dna_block)")
