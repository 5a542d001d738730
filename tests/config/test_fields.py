"""Settings read from the command line (options and `--settings` JSON) are checked as a config
file is by its schema: type, bounds, choices and patterns, for every setting, with an error
naming the option or key."""

from __future__ import annotations

import argparse
import json

import pytest

from carbon_vep.config.fields import ConfigError, add_flags, flat_fields, from_args
from carbon_vep.config.stages import (
    LabelSettings,
    ModelSettings,
    PanelSettings,
    RecipeSettings,
    ShardSettings,
)

CLASSES = (ModelSettings, PanelSettings, LabelSettings, RecipeSettings, ShardSettings)
REQUIRED = ["--model", "m", "--build", "hg19", "--recipe", "centered"]


def _read(argv: list[str]):
    parser = argparse.ArgumentParser()
    add_flags(parser, *CLASSES)
    return from_args(parser.parse_args([*REQUIRED, *argv]), *CLASSES)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--window-bp", "-6"], r"`--window-bp` is -6; the minimum is 6"),
        (["--window-bp", "5"], r"`--window-bp` is 5; the minimum is 6"),
        (["--window-bp", "0"], r"`--window-bp` is 0; the minimum is 6"),
        (["--min-ref-concordance", "1.5"], r"`--min-ref-concordance` is 1.5; the maximum is 1"),
        (["--min-ref-concordance", "nan"], r"`--min-ref-concordance` is nan; expected a finite"),
        (["--settings", '{"min_ref_concordance": "abc"}'], r"key 'min_ref_concordance'.*number"),
        (["--settings", '{"window_bp": 6.5}'], r"key 'window_bp'.*expected an integer"),
        (["--settings", '{"window_bp": true}'], r"expected an integer"),
        (["--settings", '{"rc_average": "yes"}'], r"expected true or false"),
        (["--settings", '{"clnsig_labels": {"Benign": 2}}'], r"must be one of \[0, 1\]"),
        (["--settings", '{"device": "gpu"}'], r"`--device` is 'gpu'; it must match"),
        (["--settings", "[1]"], r"--settings must be a JSON object"),
        (["--settings", "{"], r"--settings is not valid JSON"),
    ],
)
def test_bad_values_are_refused_naming_the_option(argv, message):
    with pytest.raises(ConfigError, match=message):
        _read(argv)


def test_a_mistyped_settings_key_is_named_with_the_setting_it_likely_meant():
    """As a config file's mistyped key (config.workflow.check_schema, the same did_you_mean):
    every unknown key named as a `--settings` key, with the closest setting of the command."""
    with pytest.raises(ConfigError) as refused:
        _read(["--settings", json.dumps({"windw_bp": 6, "dtyp": "float32", "zzz": 1})])
    assert str(refused.value) == (
        "--settings key 'dtyp': not a setting of this command; did you mean `dtype`?; "
        "--settings key 'windw_bp': not a setting of this command; did you mean `window_bp`?; "
        "--settings key 'zzz': not a setting of this command"
    )


def test_a_mistyped_settings_key_reaches_the_user_through_the_command(tmp_path, caplog):
    from carbon_vep.cli import main

    fasta = tmp_path / "g.fa"
    fasta.write_text(">c1\n" + "ACGT" * 100 + "\n")
    argv = ["plan-scan", "--reference", str(fasta), "--regions", "all"]
    argv += ["--out", str(tmp_path / "plan.json"), "--settings", '{"tile_pb": 600}']
    assert main(argv) == 2 and not (tmp_path / "plan.json").exists()
    assert "--settings key 'tile_pb': not a setting of this command; did you mean `tile_bp`?" in (
        caplog.text
    )


def test_options_given_override_settings_and_are_checked_alone():
    _, _, _, recipe, _ = _read(["--settings", json.dumps({"window_bp": 1}), "--window-bp", "12"])
    assert recipe.window_bp == 12
    _, _, _, recipe, _ = _read(["--settings", json.dumps({"window_bp": 12.0})])
    assert recipe.window_bp == 12 and isinstance(recipe.window_bp, int)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_bounded_setting_is_bounded_on_the_command_line(cls):
    for f, _ in flat_fields(cls):
        for bound, step in (("minimum", -1), ("maximum", 1)):
            limit = f.metadata.get(bound)
            if limit is None:
                continue
            with pytest.raises(ConfigError, match=f"the {bound} is"):
                _read(["--settings", json.dumps({f.name: limit + step})])
            _read(["--settings", json.dumps({f.name: limit})])  # the bound itself is fine


def test_a_map_value_of_the_wrong_type_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        _read(["--clnsig-label", "Benign=abc"])
    assert exit_.value.code == 2
    assert "--clnsig-label" in capsys.readouterr().err
