"""One home for every setting: the schema, the CLI and the rules all read carbon_vep.config."""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from carbon_vep import cli
from carbon_vep.config.entries import SECTIONS, DatasetConfig
from carbon_vep.config.fields import (
    INTERFACE_VARIABLE,
    ConfigError,
    default_of,
    flat_fields,
    from_args,
    from_flat,
    is_required,
    spec_json,
    to_flat,
)
from carbon_vep.config.recipes import RECIPES
from carbon_vep.config.run import RunConfig, run_fields, setting_name
from carbon_vep.config.schema import json_schema, schema_yaml
from carbon_vep.config.stages import LabelSettings, ModelSettings, PanelSettings, RecipeSettings
from carbon_vep.config.task_entry import TaskConfig
from carbon_vep.config.workflow import check_gpu_profile, unfilled_profile
from carbon_vep.errors import InputError
from carbon_vep.genome.builds import check_reference_build, check_shared_references

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
CONFIGS = sorted((ROOT / "config").glob("*.yaml"))


def test_schema_file_is_generated_from_the_package():
    assert SCHEMA.read_text() == schema_yaml(), (
        "workflow/schemas/config.schema.yaml is stale: run "
        "`carbon-vep config-schema --out workflow/schemas/config.schema.yaml`"
    )


def test_every_schema_default_is_the_dataclass_default():
    """Walk the committed schema: each default equals its field's default in carbon_vep.config."""
    schema = yaml.safe_load(SCHEMA.read_text())
    checked = 0
    for section, (entry_cls, _, _) in SECTIONS.items():
        props = schema["properties"][section]["additionalProperties"]["properties"]
        for f, _ in flat_fields(entry_cls):
            if f.metadata["scope"] != "entry":
                continue
            prop = props[f.name]
            assert ("default" in prop) == (not is_required(f)), f.name
            if not is_required(f):
                default = default_of(f)
                expected = list(default) if isinstance(default, tuple) else default
                assert prop["default"] == expected, f"{section}.{f.name}"
                checked += 1
    for name, (f, _) in run_fields().items():
        assert schema["properties"][name]["default"] == f.default, name
        checked += 1
    assert checked >= 40  # every setting, not a handful


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_validate_and_load(path):
    config = yaml.safe_load(path.read_text())
    validate(config, str(SCHEMA))
    run = RunConfig.from_dict(config)
    assert (run.datasets or run.scans) and run.models  # the genome configs scan only
    for dataset in run.datasets.values():
        assert dataset.scoring.normalization == "published"


def test_schema_rejects_unknown_recipe():
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["datasets"]["demo_centered"]["recipe"] = "centred"
    with pytest.raises(Exception, match="centred"):
        validate(config, str(SCHEMA))


def test_config_entries_nest_groups_and_take_run_level_keys():
    config = {
        "shard_size": 7,
        "bootstrap": 3,
        "min_ref_concordance": 0.5,
        "models": {"m": {"path": "x"}},
        "datasets": {
            "d": {
                "panel": "p.vcf",
                "reference": "r.fa",
                "build": "hg38",
                "recipe": "nexttoken",
                "info_fields": ["AF"],
                "tile_bp": 600,
                "label_source": "clinvar_clnsig",
            }
        },
    }
    run = RunConfig.from_dict(config)
    dataset = run.datasets["d"]
    assert dataset.checks == PanelSettings("hg38", info_fields=("AF",), min_ref_concordance=0.5)
    assert dataset.scoring.tiles.tile_bp == 600 and dataset.shards.shard_size == 7
    assert dataset.metrics.evaluation.bootstrap == 3
    assert dataset.scoring.resolved_normalization == "acgt_strings"
    assert run.entry_models(dataset) == ["m"]
    # a ClinVar dataset needs no second `label_column: label` for its metrics
    assert dataset.labels.column == "label"


def test_config_mistakes_are_named():
    base = {"models": {"m": {"path": "x"}}}
    dataset = {"panel": "p", "reference": "r", "build": "hg38", "recipe": "centered"}
    # from_dict alone (no schema check first): each key named, with the setting it most likely
    # meant (config.fields.did_you_mean, as the schema check and --settings say it)
    with pytest.raises(ConfigError) as typo:
        RunConfig.from_dict({**base, "datasets": {"d": {**dataset, "windw_bp": 6, "zzz": 1}}})
    assert "unknown setting(s) 'windw_bp'; did you mean `window_bp`?; 'zzz'" in str(typo.value)
    with pytest.raises(ConfigError, match=r"unknown model\(s\) \['n'\]"):
        RunConfig.from_dict({**base, "datasets": {"d": {**dataset, "models": ["n"]}}})
    with pytest.raises(ConfigError, match="reserved"):
        RunConfig.from_dict({**base, "datasets": {"suite": dataset}})
    task = {"kind": "sequence_recovery", "path": "t.tsv", "scoring": "bp"}
    with pytest.raises(ConfigError, match=r"\['scoring'\] do not apply"):
        RunConfig.from_dict({**base, "datasets": {"d": dataset}, "tasks": {"t": task}})
    with pytest.raises(ConfigError, match=r"datasets\.d: `models` is empty"):
        RunConfig.from_dict({**base, "datasets": {"d": {**dataset, "models": []}}})


def test_a_sha256_pin_must_name_a_file_the_run_hashes():
    """A pin on a dataset's panel or reference, a task file or a file under a model's path is
    checked by the record_*_inputs rules; one on any other path (a typo) is refused."""
    digest = "0" * 64
    base = {"models": {"m": {"path": "models/m"}}}
    dataset = {"panel": "data/p.tsv", "reference": "r.fa", "build": "hg38", "recipe": "centered"}
    task = {"kind": "sequence_recovery", "path": "t.parquet"}
    pins = ["data/p.tsv", "r.fa", "t.parquet", "models/m/model.safetensors"]
    config = {**base, "datasets": {"d": dataset}, "tasks": {"t": task}}
    assert set(
        RunConfig.from_dict({**config, "sha256": dict.fromkeys(pins, digest)}).sha256
    ) == set(pins)
    for typo in ("data/panle.tsv", "models/mm/model.safetensors"):
        with pytest.raises(ConfigError, match=rf"sha256: '{typo}' is no input this config"):
            RunConfig.from_dict({**config, "sha256": {typo: digest}})


@pytest.mark.parametrize(
    ("recipe", "refused", "computed"),
    [
        ("scan", "full_vocab", "dna_block"),  # the scan's marginals are over the 6-mer block
        ("scan", "acgt_strings", "dna_block"),
        ("fns", "full_vocab", "dna_block"),
        ("from_scan", "full_vocab", "dna_block"),
        ("centered", "acgt_strings", "full_vocab or dna_block"),
    ],
)
def test_a_normalization_the_recipe_does_not_compute_is_refused(
    recipe, refused, computed, monkeypatch
):
    """Rows must never say a normalisation their scorer did not compute (the scan recipe with
    full_vocab used to be accepted, its rows saying full_vocab over dna_block values)."""
    base = {"models": {"m": {"path": "x"}}}
    dataset = {
        "panel": "p",
        "reference": "r",
        "build": "hg38",
        "recipe": recipe,
        "normalization": refused,
    }
    if recipe == "from_scan":
        base["scans"] = {"g": {"reference": "r", "build": "hg38", "regions": "all"}}
        dataset["scan"] = "g"
    with pytest.raises(ConfigError, match=rf"`--normalization {refused}`: recipe {recipe}"):
        RunConfig.from_dict({**base, "datasets": {"d": dataset}})
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")  # the Snakefile names config keys
    expected = (
        rf"datasets\.d: the config key `normalization` \(`normalization: {refused}`\): "
        rf"recipe {recipe} computes {computed} only, not {refused}"
    )
    with pytest.raises(ConfigError, match=expected):
        RunConfig.from_dict({**base, "datasets": {"d": dataset}})
    monkeypatch.delenv(INTERFACE_VARIABLE)
    with pytest.raises(ConfigError, match=rf"`--normalization {refused}`: recipe {recipe}"):
        RecipeSettings(recipe, normalization=refused)


@pytest.mark.parametrize("recipe", ["nexttoken", "scan", "from_scan"])
def test_rc_average_on_a_recipe_that_ignores_it_is_refused(recipe, monkeypatch):
    """Only the centered windows' scorer reads rc_average: nexttoken with `rc_average: true`
    used to be accepted, scored forward only, while its provenance said rc_average true."""
    base = {"models": {"m": {"path": "x"}}}
    dataset = {"panel": "p", "reference": "r", "build": "hg38", "recipe": recipe}
    if recipe == "from_scan":
        base["scans"] = {"g": {"reference": "r", "build": "hg38", "regions": "all"}}
        dataset["scan"] = "g"
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")
    expected = (
        rf"datasets\.d: the config key `rc_average` \(`rc_average: true`\): recipe {recipe} "
        r"does not average with the reverse complement \(only centered and fns do\)"
    )
    with pytest.raises(ConfigError, match=expected):
        RunConfig.from_dict({**base, "datasets": {"d": {**dataset, "rc_average": True}}})
    assert RunConfig.from_dict({**base, "datasets": {"d": dataset}}).datasets["d"]
    monkeypatch.delenv(INTERFACE_VARIABLE)
    with pytest.raises(ConfigError, match=rf"`--rc-average`: recipe {recipe} does not"):
        RecipeSettings(recipe, rc_average=True)
    for averaging in ("centered", "fns"):
        assert RecipeSettings(averaging, rc_average=True).rc_average


@pytest.mark.parametrize("written", ["positive_labels", "negative_labels"])
def test_label_values_with_no_label_column_are_refused(written, monkeypatch):
    """Label values are read in the label column alone: without one (and without the column
    clinvar_clnsig derives) they were accepted and did nothing, the metrics unlabelled."""
    flag = {"positive_labels": "--positive", "negative_labels": "--negative"}[written]
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    with pytest.raises(ConfigError, match=rf"^`{flag} LOF`: no label column to read it in"):
        LabelSettings(**{written: ("LOF",)})
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")
    dataset = {"panel": "p", "reference": "r", "build": "hg38", "recipe": "centered"}
    config = {"models": {"m": {"path": "x"}}, "datasets": {"d": {**dataset, written: ["LOF"]}}}
    expected = (
        rf"^datasets\.d: the config key `{written}` \(`{written}: \[LOF\]`\): no label column "
        r"to read it in: set the config key `label_column` \(the panel's column of labels\)"
    )
    with pytest.raises(ConfigError, match=expected):
        RunConfig.from_dict(config)
    # with a column to read them in they mean something; their defaults say nothing (the schema
    # and the rules' --settings fill them into every entry)
    assert LabelSettings(label_column="class", **{written: ("LOF",)})
    # clinvar_clnsig derives 1 / 0: a list without that value would find no label of its class
    derived = {"positive_labels": "1", "negative_labels": "0"}[written]
    assert LabelSettings("clinvar_clnsig", **{written: (derived,)})
    with pytest.raises(ConfigError, match=rf"derives are 1 / 0, and '{derived}' is not among"):
        LabelSettings("clinvar_clnsig", **{written: ("Pathogenic",)})
    default = default_of(next(f for f in fields(LabelSettings) if f.name == written))
    assert LabelSettings(**{written: default}).column is None
    assert LabelSettings(**{written: list(default)}).column is None


def test_a_label_value_in_both_lists_after_folding_is_refused(monkeypatch):
    """Values match ignoring case and surrounding whitespace, so `Pathogenic` positive and
    `pathogenic ` negative are one value of both classes (it was positive by the order of the
    match, silently): refused, naming both settings. The defaults' `True` / `true` are one
    value of one list, which is no clash."""
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    with pytest.raises(
        ConfigError, match=r"^`--positive Pathogenic` and `--negative pathogenic `: a label value"
    ):
        LabelSettings(
            label_column="class",
            positive_labels=("Pathogenic", "LOF"),
            negative_labels=("Benign", "pathogenic "),
        )
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")
    dataset = {"panel": "p", "reference": "r", "build": "hg38", "recipe": "centered"}
    both = {"label_column": "c", "positive_labels": ["yes"], "negative_labels": ["no", "YES"]}
    config = {"models": {"m": {"path": "x"}}, "datasets": {"d": {**dataset, **both}}}
    expected = (
        r"^datasets\.d: the config key `positive_labels` \(`positive_labels: \[yes\]`\) and "
        r"the config key `negative_labels` \(`negative_labels: \[YES\]`\): a label value means "
        "positive or negative, not both"
    )
    with pytest.raises(ConfigError, match=expected):
        RunConfig.from_dict(config)
    assert LabelSettings(label_column="c").positive_labels == ("1", "1.0", "True", "true")
    assert LabelSettings(label_column="c", positive_labels=("yes", "Yes"), negative_labels=("no",))


def test_a_clnsig_term_given_two_labels_in_two_cases_is_refused(monkeypatch):
    """CLNSIG terms are looked up ignoring letter case, so `Pathogenic: 1` and `pathogenic: 0`
    are one term with two labels (the later entry won, silently): refused, naming both; the
    same term twice with one label is no clash, and the lookup itself ignores the case."""
    from carbon_vep.variants.labels import clnsig_label

    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    clash = {"Pathogenic": 1, "Benign": 0, "pathogenic": 0}
    with pytest.raises(
        ConfigError,
        match=r"^`--clnsig-label Pathogenic=1` and `--clnsig-label pathogenic=0`: CLNSIG terms",
    ):
        LabelSettings(label_source="clinvar_clnsig", clnsig_labels=clash)
    agreeing = {"Pathogenic": 1, "PATHOGENIC": 1, "Benign": 0}
    settings = LabelSettings(label_source="clinvar_clnsig", clnsig_labels=agreeing)
    assert clnsig_label("pathogenic", settings.clnsig_labels) == (1, False)
    assert clnsig_label("BENIGN|risk_factor", settings.clnsig_labels) == (0, False)


def test_window_bp_on_from_scan_is_refused(monkeypatch):
    """from_scan cuts no window (each SNV is looked up at the scan's own context): a
    `window_bp` set for it was accepted and did nothing. Its default (null) is no setting."""
    base = {
        "models": {"m": {"path": "x"}},
        "scans": {"g": {"reference": "r", "build": "hg38", "regions": "all"}},
    }
    dataset = {"panel": "p", "reference": "r", "build": "hg38", "recipe": "from_scan", "scan": "g"}
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")
    expected = (
        r"^datasets\.d: the config key `window_bp` \(`window_bp: 240`\): recipe from_scan cuts "
        r"no window"
    )
    with pytest.raises(ConfigError, match=expected):
        RunConfig.from_dict({**base, "datasets": {"d": {**dataset, "window_bp": 240}}})
    for unset in ({}, {"window_bp": None}):
        assert RunConfig.from_dict({**base, "datasets": {"d": {**dataset, **unset}}}).datasets
    monkeypatch.delenv(INTERFACE_VARIABLE)
    with pytest.raises(ConfigError, match=r"^`--window-bp 240`: recipe from_scan cuts no window"):
        RecipeSettings("from_scan", window_bp=240)
    for name, recipe in RECIPES.items():  # every recipe with a model reads it
        if recipe.needs_model:
            assert RecipeSettings(name, window_bp=240).window_bp == 240


def test_every_normalization_a_recipe_computes_is_accepted():
    for name, recipe in RECIPES.items():
        for normalization in ("published", *recipe.normalizations):
            settings = RecipeSettings(name, normalization=normalization)
            assert settings.resolved_normalization in recipe.normalizations
    assert RecipeSettings("nexttoken").resolved_normalization == "acgt_strings"


def test_the_cli_refuses_the_scan_recipe_with_full_vocab(tmp_path, capsys):
    out = tmp_path / "scores.parquet"
    code = cli.main(
        [
            "score",
            "--model",
            "m",
            "--reference",
            "r.fa",
            "--panel",
            "p.vcf",
            "--build",
            "hg38",
            "--recipe",
            "scan",
            "--normalization",
            "full_vocab",
            "--out",
            str(out),
        ]
    )
    assert code == 2 and not out.exists()


def test_from_scan_dataset_needs_a_scan_that_runs_its_models():
    models = {"m": {"path": "x"}, "n": {"path": "y"}}
    scan = {"reference": "r", "build": "hg38", "regions": "all", "models": ["m"]}
    dataset = {"panel": "p", "reference": "r", "build": "hg38", "recipe": "from_scan"}
    lookup = {**dataset, "scan": "g", "models": ["m"]}
    ok = RunConfig.from_dict({"models": models, "scans": {"g": scan}, "datasets": {"d": lookup}})
    assert ok.scan_lookups() == {"d": "g"} and ok.scans["g"].regions == ("all",)
    with pytest.raises(ConfigError, match=r"needs `scan:`, one of \['g'\]"):
        RunConfig.from_dict({"models": models, "scans": {"g": scan}, "datasets": {"d": dataset}})
    with pytest.raises(ConfigError, match=r"does not run model\(s\) \['n'\]"):
        RunConfig.from_dict(
            {"models": models, "scans": {"g": scan}, "datasets": {"d": {**dataset, "scan": "g"}}}
        )
    with pytest.raises(ConfigError, match="applies to recipe from_scan only"):
        RunConfig.from_dict(
            {
                "models": models,
                "scans": {"g": scan},
                "datasets": {"d": {**dataset, "recipe": "centered", "scan": "g"}},
            }
        )
    # the panel's build is the scan's (under any spelling), even on another copy of the genome
    elsewhere = {**lookup, "reference": "r2", "build": "GRCh38"}
    RunConfig.from_dict({"models": models, "scans": {"g": scan}, "datasets": {"d": elsewhere}})
    with pytest.raises(ConfigError, match=r"build hg19 but scan 'g' is of hg38"):
        RunConfig.from_dict(
            {
                "models": models,
                "scans": {"g": scan},
                "datasets": {"d": {**elsewhere, "build": "hg19"}},
            }
        )


def test_datasets_on_one_reference_must_share_a_build(tmp_path):
    fasta = tmp_path / "genome.fa"
    entries = [("dataset 'a'", str(fasta), "hg38"), ("dataset 'b'", str(fasta), "GRCh38")]
    check_shared_references(entries)  # synonyms of one build
    with pytest.raises(ValueError, match="same reference"):
        check_shared_references([*entries, ("scan 's'", str(fasta), "hg19")])


class _Reference:
    """What the build check needs of a reference: its contig lengths and path."""

    path = Path("GRCh37.fa")
    lengths = {"chr1": 249_250_621, "chrX": 155_270_560, "chrUn_gl000220": 161_802}


def test_a_reference_of_another_build_is_refused_by_ingest(tmp_path):
    check_reference_build("GRCh37", _Reference.lengths, _Reference.path)
    check_reference_build("hg38", {"chr17": 40_000}, "fragment.fa")  # unknown: no verdict
    with pytest.raises(InputError, match="lengths are those of GRCh37, but the build declared is"):
        check_reference_build("hg38", _Reference.lengths, _Reference.path)
    # `carbon-vep score` and check-panel go through ingest_panel, which checks it first
    from carbon_vep.variants.ingest import ingest_panel

    with pytest.raises(InputError, match="GRCh37.fa: its chromosome lengths"):
        ingest_panel(tmp_path / "unused.vcf", _Reference(), PanelSettings("hg38"))


def test_gpu_profile_check_lives_in_the_package():
    cpu, gpu = ModelSettings("m"), ModelSettings("m", device="cuda")
    check_gpu_profile("score_shard", {"gpu": "0", "mem_mb": 4000}, {"a": cpu})
    check_gpu_profile("score_shard", {"gpu": 1, "gpu_model": "'h100'"}, {"a": gpu})
    with pytest.raises(ConfigError, match="gives score_shard a GPU .*device 'cpu'"):
        check_gpu_profile("score_shard", {"gpu_model": "'a10'"}, {"a": cpu, "b": gpu})


@pytest.mark.parametrize("name", ["slurm-a10", "slurm-h100"])
def test_a_shipped_profile_not_yet_filled_in_is_named_value_by_value(name):
    """The shipped GPU profiles' FILL_IN_ values, as Snakemake hands them to the Snakefile
    (quotes kept, resources by rule): each named with where it is; none once written in."""
    profile = yaml.safe_load((ROOT / f"profiles/{name}/config.yaml").read_text())
    defaults, rules = profile["default-resources"], profile["set-resources"]
    message = unfilled_profile({k: f"'{v}'" for k, v in defaults.items()}, rules)
    assert message is not None
    assert message.startswith("the profile still holds 3 value(s) to fill in")
    assert "slurm_partition: FILL_IN_CPU_PARTITION (default-resources)" in message
    assert "slurm_account: FILL_IN_ACCOUNT (default-resources)" in message
    gpu_rules = "score_shard, scan_chunk, score_perturbation, score_recovery, score_niah"
    assert f"slurm_partition: FILL_IN_GPU_PARTITION (set-resources: {gpu_rules})" in message
    filled = yaml.safe_load(
        (ROOT / f"profiles/{name}/config.yaml").read_text().replace("FILL_IN_", "lab_")
    )
    assert unfilled_profile(filled["default-resources"], filled["set-resources"]) is None


# ---- the command line reads the same definitions --------------------------------------------
def _parse(command: str, *argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args([command, *argv])


def test_cli_defaults_are_the_dataclass_defaults():
    args = _parse(
        "score",
        "--panel",
        "p",
        "--reference",
        "r",
        "--model",
        "m",
        "--build",
        "hg38",
        "--recipe",
        "centered",
        "--out",
        "o",
    )
    model, panel, labels, recipe = from_args(
        args, ModelSettings, PanelSettings, LabelSettings, RecipeSettings
    )
    assert model == ModelSettings("m")
    assert panel == PanelSettings("hg38")
    assert labels == LabelSettings()
    assert recipe == RecipeSettings("centered")


def test_cli_options_and_the_rules_settings_mean_the_same():
    """What a rule passes (`--settings` JSON) and the same values as options give one object."""
    recipe = RecipeSettings("centered", "dna_block", window_bp=240, rc_average=True)
    labels = LabelSettings(label_column="LABEL", positive_labels=("yes",))
    spec = shlex.split(spec_json(recipe, labels))[0]
    from_rule = from_args(argparse.Namespace(settings=spec), RecipeSettings, LabelSettings)
    args = _parse(
        "score",
        "--panel",
        "p",
        "--reference",
        "r",
        "--model",
        "m",
        "--build",
        "b",
        "--recipe",
        "centered",
        "--normalization",
        "dna_block",
        "--window-bp",
        "240",
        "--rc-average",
        "--label-column",
        "LABEL",
        "--positive",
        "yes",
        "--out",
        "o",
    )
    assert from_args(args, RecipeSettings, LabelSettings) == from_rule == (recipe, labels)
    # an option on the command line overrides the rule's value (the retry's batch size)
    args = _parse(
        "score-shard",
        "--shard",
        "s",
        "--reference",
        "r",
        "--out",
        "o",
        "--batch-size",
        "2",
        "--settings",
        json.dumps({"path": "m", "batch_size": 8, "recipe": "nexttoken"}),
    )
    model, recipe = from_args(args, ModelSettings, RecipeSettings)
    assert model.batch_size == 2 and recipe.recipe == "nexttoken"


def test_round_trip_of_every_entry_through_its_flat_form():
    for entry in (
        DatasetConfig("p", "r", checks=PanelSettings("hg19"), scoring=RecipeSettings("fns")),
        TaskConfig("perturbation", "t.tsv"),
        ModelSettings("m", revision="abc"),
    ):
        flat = to_flat(entry)
        assert from_flat(type(entry), json.loads(json.dumps(flat)), "test") == entry


def test_settings_are_named_for_the_interface_in_use(monkeypatch):
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    assert setting_name("format") == "`--format`"
    assert setting_name("info_fields") == "`--info-field`"
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")
    assert setting_name("format") == "the config key `format`"
    assert setting_name("min_ref_concordance") == "the top-level config key `min_ref_concordance`"
    with pytest.raises(ConfigError, match="the config key `recipe` is 'centred'"):
        from_flat(RecipeSettings, {"recipe": "centred"}, "datasets.d")


def test_a_switch_set_to_a_value_is_named_as_the_user_types_it(monkeypatch):
    """A message that says how to turn a switch on or off spells it so that it parses: on the
    command line the flag itself (it takes no value: "--trust-remote-code true" is an error),
    under the workflow the config key set to the value."""
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    on, off = setting_name("trust_remote_code", "true"), setting_name("allow_unpinned", "false")
    assert (on, off) == ("`--trust-remote-code`", "`--no-allow-unpinned`")
    required = ("--shard", "s", "--reference", "r", "--model", "m", "--out", "o")
    args = _parse("score-shard", *required, on.strip("`"), off.strip("`"))
    assert args.trust_remote_code is True and args.allow_unpinned is False
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")
    assert setting_name("trust_remote_code", "true") == (
        "the config key `trust_remote_code` (`trust_remote_code: true`)"
    )


def test_a_missing_required_option_names_its_flag(monkeypatch):
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    args = _parse("check-panel", "--panel", "p", "--reference", "r", "--out", "o", "--summary", "s")
    with pytest.raises(ConfigError, match="`--build` is required"):
        from_args(args, PanelSettings, LabelSettings)


def test_every_setting_has_help_and_a_distinct_flag_per_command():
    for entry_cls, _, _ in SECTIONS.values():
        for f, _ in flat_fields(entry_cls):
            assert f.metadata["help"], f.name
    parser = cli.build_parser()  # argparse refuses two options with one flag
    assert parser.parse_args(["config-schema", "--out", "x"]).out == "x"
    assert {f.name for f in fields(PanelSettings)} >= {"build", "format", "columns"}


def test_json_schema_lists_every_entry_setting():
    schema = json_schema()
    dataset = schema["properties"]["datasets"]["additionalProperties"]
    names = {f.name for f, _ in flat_fields(DatasetConfig) if f.metadata["scope"] == "entry"}
    assert set(dataset["properties"]) == names
    assert dataset["required"] == ["panel", "reference", "build", "recipe"]
