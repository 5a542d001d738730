"""Sweeps in the config: a list on a setting a task kind declares sweepable (config.tasks) is the
entry's headline (its first value) and one sweep point per other value, one setting varied at a
time; anything else a list is given to is refused, naming the entry and the setting."""

from __future__ import annotations

from dataclasses import fields
from typing import get_type_hints

import jsonschema
import pytest

from carbon_vep.config.fields import ConfigError
from carbon_vep.config.run import RunConfig
from carbon_vep.config.schema import json_schema
from carbon_vep.config.tasks import SEQUENCE_RECOVERY, TASK_KINDS, SweepPoint

BASE = {"models": {"m": {"path": "x"}}}


def _run(**keys) -> RunConfig:
    task = {"kind": "sequence_recovery", "path": "t.tsv", **keys}
    return RunConfig.from_dict({**BASE, "tasks": {"t": task}})


def test_a_list_is_the_headline_and_one_point_per_other_value():
    run = _run(new_tokens=[5, 10, 640], max_prompt_bp=[6144, 1024], score_bp=12)
    headline = run.tasks["t"].settings
    assert (headline.new_tokens, headline.max_prompt_bp, headline.score_bp) == (5, 6144, 12)
    assert run.sweep_points("t") == (  # in the kind's order of sweeps, each list's own within
        SweepPoint("new_tokens", 10),
        SweepPoint("new_tokens", 640),
        SweepPoint("max_prompt_bp", 1024),
    )
    # each point varies its one setting from the headline: no cross product of the lists
    at = {p: run.tasks["t"].at(p).settings for p in run.sweep_points("t")}
    assert at[SweepPoint("new_tokens", 640)] == headline.__class__(
        new_tokens=640, max_prompt_bp=6144, score_bp=12
    )
    assert at[SweepPoint("max_prompt_bp", 1024)].new_tokens == 5
    assert run.tasks["t"].settings == headline  # the entry itself stays the headline


def test_a_scalar_or_a_one_value_list_is_todays_entry():
    scalar, single = _run(new_tokens=7), _run(new_tokens=[7])
    assert scalar.tasks == single.tasks and scalar.tasks["t"].settings.new_tokens == 7
    assert scalar.sweep_points("t") == single.sweep_points("t") == () and not scalar.sweeps


@pytest.mark.parametrize(
    ("setting", "values", "problem"),
    [
        ("decoder", ["token", "fns_marginal"], "a sequence_recovery task sweeps new_tokens, max"),
        ("score_bp", [30, 60], "a list sweeps a setting"),
        ("bootstrap", [100, 200], "a list sweeps a setting"),
        ("new_tokens", [], "an empty list sweeps nothing"),
        ("new_tokens", [5, 10, 5], r"\[5\] given more than once"),
        ("new_tokens", [5, 0], "0 is below the minimum 1"),
        ("max_prompt_bp", [6144, 3], "3 is below the minimum 6"),
        ("new_tokens", [5, "10"], "'10' is not an integer"),
    ],
)
def test_what_cannot_be_a_sweep_is_refused_naming_the_setting(setting, values, problem):
    with pytest.raises(ConfigError, match=rf"^tasks\.t\.{setting}: .*{problem}"):
        _run(**{setting: values})


def test_a_kind_sweeps_only_its_own_settings():
    pairs = {"kind": "perturbation", "path": "p.tsv"}
    with pytest.raises(ConfigError, match=r"\['new_tokens'\] do not apply to a perturbation"):
        RunConfig.from_dict({**BASE, "tasks": {"p": {**pairs, "new_tokens": [5, 10]}}})
    with pytest.raises(ConfigError, match="tasks.p.scoring: .*perturbation task sweeps none"):
        RunConfig.from_dict({**BASE, "tasks": {"p": {**pairs, "scoring": ["token", "bp"]}}})


def test_the_schema_takes_a_list_only_where_a_kind_sweeps():
    schema = json_schema()

    def valid(**keys) -> bool:
        task = {"kind": "sequence_recovery", "path": "t.tsv", **keys}
        try:
            jsonschema.validate({**BASE, "tasks": {"t": task}}, schema)
        except jsonschema.ValidationError:
            return False
        return True

    assert valid(new_tokens=[5, 10, 20], max_prompt_bp=[6144, 1024]) and valid(new_tokens=5)
    assert not valid(score_bp=[30, 60]) and not valid(new_tokens=0)  # the scalar's bounds hold


def test_every_declared_sweep_is_an_integer_setting_of_its_kind():
    assert SEQUENCE_RECOVERY.sweeps["new_tokens"].axis_value(10) == 60  # a token is 6 bp
    assert SEQUENCE_RECOVERY.sweeps["max_prompt_bp"].axis_value(1024) == 1024
    for kind in TASK_KINDS.values():
        hints = get_type_hints(kind.settings)
        minimum = {f.name: f.metadata["minimum"] for f in fields(kind.settings)}
        for name in kind.sweeps:
            assert hints[name] is int and minimum[name] is not None, (kind.name, name)
