"""How a workflow config is read, the one way the Snakefile and `carbon-vep estimate` read it
(config.workflow.read_run_config): the schema's refusals as one line naming the file and key,
the whole config's checks, every local input found (Snakemake would not notice a missing input
of a job whose outputs exist), and which config a run without --configfile reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from carbon_vep.config.fields import INTERFACE_VARIABLE, ConfigError
from carbon_vep.config.workflow import (
    config_source,
    missing_inputs,
    read_config_file,
    read_run_config,
    wants_demo,
)

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources/demo"


def _config(tmp_path: Path, **dataset) -> dict:
    panel = tmp_path / "panel.tsv"
    panel.write_text("chrom\tpos\tref\talt\tlabel\nchr17\t9402\tA\tT\t0\n")
    entry = {"panel": str(panel), "reference": str(DEMO / "chr17.hg19.part.fa"), "build": "hg19"}
    return {
        "models": {"demo": {"path": str(tmp_path / "model"), "build_demo": True}},
        "datasets": {"mine": {**entry, "recipe": "centered", **dataset}},
    }


def test_a_config_reads_with_the_schemas_defaults_filled_in(tmp_path):
    config = _config(tmp_path)
    run = read_run_config(config, "config c.yaml")
    assert run.datasets["mine"].scoring.recipe == "centered"
    assert config["outdir"] == "results"  # as snakemake's validate set it


@pytest.mark.parametrize(
    ("key", "path"),
    [("panel", "nope.tsv"), ("reference", "nope.fa")],
)
def test_a_missing_local_input_is_refused_naming_the_key_and_path(tmp_path, key, path):
    config = _config(tmp_path, **{key: str(tmp_path / path)})
    with pytest.raises(ConfigError) as err:
        read_run_config(config, "config mine.yaml")
    message = str(err.value)
    assert message.startswith("config mine.yaml: input file(s) not found")
    assert f"datasets.mine.{key}: {tmp_path / path}" in message


def test_inputs_that_rules_fetch_or_build_are_not_required(tmp_path):
    out = str(tmp_path / "hub/panel.parquet")
    config = _config(tmp_path, panel=out)
    config["hub_files"] = {"p": {"repo_id": "org/data", "filename": "p.parquet", "out": out}}
    config["tasks"] = {"t": {"kind": "perturbation", "path": str(tmp_path / "task.parquet")}}
    config["downloads"] = {"t": {"url": "https://x/t", "out": str(tmp_path / "task.parquet")}}
    run = read_run_config(config, "c")  # the demo model is built, the rest fetched
    assert missing_inputs(run) == []
    config["tasks"]["t"]["path"] = str(tmp_path / "other.parquet")
    with pytest.raises(ConfigError, match=r"tasks\.t\.path: .*other\.parquet"):
        read_run_config(config, "c")
    assert read_run_config(config, "c", check_inputs=False).tasks["t"]  # estimate's bill


def test_a_local_model_directory_and_the_baseline_must_exist(tmp_path):
    config = _config(tmp_path)
    config["models"]["demo"] = {"path": str(tmp_path / "no_model")}
    config["baseline"] = "baselines/nope.yaml"
    run = read_run_config(config, "c", str(ROOT), check_inputs=False)
    assert missing_inputs(run, str(ROOT)) == [
        f"models.demo.path: {tmp_path / 'no_model'}",
        f"baseline: {ROOT / 'baselines/nope.yaml'}",
    ]
    config["models"]["demo"] = {"path": "org/hub_model"}  # a Hub id: fetch_model fetches it
    config["baseline"] = "baselines/demo.yaml"  # shipped next to the Snakefile
    assert missing_inputs(read_run_config(config, "c", str(ROOT)), str(ROOT)) == []


@pytest.mark.parametrize("path", ["my_finetune", "runs/ft/checkpoint-100"])
def test_a_relative_model_folder_not_found_here_is_no_hub_id(tmp_path, monkeypatch, path):
    """Not of a Hub id's shape (ORG/NAME), so a folder missing from the run's directory (named
    from where the user stood, not from Snakemake's --directory): refused while parsing, not
    sent to fetch_model as a download."""
    monkeypatch.chdir(tmp_path)
    config = _config(tmp_path)
    config["models"]["demo"] = {"path": path}
    with pytest.raises(ConfigError) as err:
        read_run_config(config, "c")
    assert str(err.value) == (
        f"c: input file(s) not found (relative paths are read from {tmp_path}): "
        f"models.demo.path: {path}"
    )
    (tmp_path / path).mkdir(parents=True)
    assert missing_inputs(read_run_config(config, "c")) == []


def test_a_path_from_the_home_folder_is_refused_naming_its_key(tmp_path, monkeypatch):
    """`~` is expanded by no one downstream: the input check used to find `~/model` while the
    workflow sent it to fetch_model as a Hub id, and Snakemake refused `~/panel.vcf` only when
    it built the DAG. Refused while the config is read, existing or not, for estimate too."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "model").mkdir()
    config = _config(tmp_path, panel="~/panel.tsv")
    config["models"]["demo"] = {"path": "~/model"}
    for check_inputs in (True, False):
        with pytest.raises(ConfigError) as err:
            read_run_config(config, "config mine.yaml", check_inputs=check_inputs)
        message = str(err.value)
        assert message.startswith("config mine.yaml: `~` is not expanded in the config's paths")
        assert message.endswith("datasets.mine.panel: ~/panel.tsv; models.demo.path: ~/model")
    config = _config(tmp_path)
    config["outdir"] = "~/results"
    with pytest.raises(ConfigError, match=r"write them out in full: outdir: ~/results$"):
        read_run_config(config, "c")
    config["outdir"] = str(tmp_path / "results")
    assert read_run_config(config, "c").outdir == str(tmp_path / "results")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"window_bp": "240bp"}, "datasets.mine.window_bp: '240bp' is not of type"),
        ({"window_bp": 5}, "datasets.mine.window_bp: 5 is less than the minimum of 6"),
        ({"rc_average": "yes"}, "datasets.mine.rc_average: 'yes' is not of type 'boolean'"),
        ({"models": "demo"}, "datasets.mine.models: 'demo' is not of type 'array'"),
        ({"recipe": "centred"}, "datasets.mine.recipe: 'centred' is not one of"),
    ],
)
def test_schema_refusals_name_the_file_and_the_config_key(tmp_path, change, expected):
    config = _config(tmp_path, **change)
    with pytest.raises(ConfigError) as err:
        read_run_config(config, "config mine.yaml")
    assert str(err.value).startswith(f"config mine.yaml: {expected}")
    assert "$schema" not in str(err.value) and "\n" not in str(err.value)


def test_settings_that_would_do_nothing_are_refused_only_when_written(tmp_path):
    """The schema fills every setting's default into every entry (as Snakemake's validate
    does): a dataset with no label column, or recipe from_scan, reads with the defaults of
    positive_labels, negative_labels and window_bp, and is refused for one written."""
    config = _config(tmp_path)
    run = read_run_config(config, "config mine.yaml")
    assert config["datasets"]["mine"]["positive_labels"] == ["1", "1.0", "True", "true"]
    assert run.datasets["mine"].labels.column is None
    with pytest.raises(ConfigError) as err:
        read_run_config(_config(tmp_path, positive_labels=["LOF"]), "config mine.yaml")
    assert str(err.value).startswith(
        "config mine.yaml: datasets.mine: the config key `positive_labels` "
        "(`positive_labels: [LOF]`): no label column to read it in"
    )
    config = _config(tmp_path, recipe="from_scan", scan="g")
    config["scans"] = {
        "g": {
            "reference": config["datasets"]["mine"]["reference"],
            "build": "hg19",
            "regions": "all",
        }
    }
    run = read_run_config(config, "config mine.yaml", check_inputs=False)
    assert config["datasets"]["mine"]["window_bp"] is None
    assert run.datasets["mine"].scoring.window_bp is None
    config["datasets"]["mine"]["window_bp"] = 24000
    with pytest.raises(
        ConfigError,
        match=r"^config mine\.yaml: datasets\.mine: the config key "
        r"`window_bp` \(`window_bp: 24000`\): recipe from_scan cuts no window",
    ):
        read_run_config(config, "config mine.yaml", check_inputs=False)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"datasets": {"windw_bp": 240}},
            "datasets.mine.windw_bp: not a key of a datasets entry; did you mean `window_bp`?",
        ),
        (
            {"models": {"dtyp": "float32"}},
            "models.demo.dtyp: not a key of a models entry; did you mean `dtype`?",
        ),
        ({"top": {"bootstarp": 0}}, "bootstarp: not a top-level config key; did you mean "),
        (
            {"datasets": {"shard_size": 10}},
            "datasets.mine.shard_size: not a key of a datasets entry; `shard_size` is a "
            "top-level key: move it there",
        ),
        (
            {"datasets": {"zzz": 1, "positve_labels": ["a"]}},
            "datasets.mine.zzz: not a key of a datasets entry (config/README.md lists them); "
            "datasets.mine.positve_labels: not a key of a datasets entry; did you mean "
            "`positive_labels`?",
        ),
    ],
)
def test_a_mistyped_key_is_named_by_its_path_with_the_key_it_likely_meant(
    tmp_path, change, expected
):
    """The schema said "Additional properties are not allowed ('windw_bp' was unexpected)",
    naming the entry but neither the key's path nor the key meant."""
    config = _config(tmp_path)
    config.update(change.pop("top", {}))
    config["datasets"]["mine"].update(change.get("datasets", {}))
    config["models"]["demo"].update(change.get("models", {}))
    with pytest.raises(ConfigError) as err:
        read_run_config(config, "config mine.yaml")
    assert str(err.value).startswith(f"config mine.yaml: {expected}")
    assert "\n" not in str(err.value)


def test_whole_config_refusals_name_the_file_and_keys(tmp_path, monkeypatch):
    monkeypatch.delenv(INTERFACE_VARIABLE, raising=False)
    config = _config(tmp_path)
    config["datasets"]["my panel"] = config["datasets"].pop("mine")
    with pytest.raises(ConfigError, match=r"^c\.yaml: datasets: entry key 'my panel' may hold"):
        read_run_config(config, "c.yaml")
    config = _config(tmp_path)
    config["datasets"]["other"] = {**config["datasets"]["mine"], "build": "hg38"}
    with pytest.raises(ConfigError, match=r"^c\.yaml: datasets\.mine \(build hg19\) and "):
        read_run_config(config, "c.yaml")
    config = _config(tmp_path, models=["nope"])
    with pytest.raises(ConfigError, match=r"^c\.yaml: datasets\.mine: unknown model\(s\) \['nope'"):
        read_run_config(config, "c.yaml")
    config = {**_config(tmp_path), "shard_size": "ten"}
    with pytest.raises(ConfigError, match=r"^c\.yaml: shard_size: 'ten' is not of type"):
        read_run_config(config, "c.yaml")
    config = _config(tmp_path, scan="s")  # the config key, not a flag, outside the workflow too
    with pytest.raises(ConfigError, match="`scan` applies to recipe from_scan only"):
        read_run_config(config, "c.yaml")
    config = _config(tmp_path, spearman_column="score")  # the panel's is `panel_score`
    with pytest.raises(ConfigError, match=r"^c\.yaml: datasets\.mine: .*'score' names a column"):
        read_run_config(config, "c.yaml")


def test_a_config_without_models_says_what_is_missing_not_the_schema(tmp_path):
    with pytest.raises(ConfigError) as err:
        read_run_config({"shard_size": 5}, "config a.yaml")
    assert str(err.value).startswith(
        "config a.yaml: missing required key(s) ['models'] at the top level"
    )
    assert "properties" not in str(err.value)


def test_a_config_file_that_is_not_a_config_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"^config .*README\.md: not YAML at line \d+"):
        read_config_file(str(ROOT / "README.md"))
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"list\.yaml: expected a mapping .* found a list"):
        read_config_file(str(listed))
    with pytest.raises(ConfigError, match=r"^config .*nope\.yaml: file not found"):
        read_config_file(str(tmp_path / "nope.yaml"))
    assert read_config_file(str(ROOT / "config/ci.yaml")) == yaml.safe_load(
        (ROOT / "config/ci.yaml").read_text()
    )


def test_the_demo_is_read_when_no_config_file_is_given_overrides_on_top():
    profile = {"batch_tokens": 0, "chunk_bp": 30_000_000}
    assert wants_demo({}, [], {})
    assert wants_demo(dict(profile), [], profile)  # a profile's `config:` alone
    assert not wants_demo({"models": {}}, [], {})  # a module's own config
    assert not wants_demo({"batch_tokens": 0}, ["mine.yaml"], {})
    assert config_source(["a.yaml"], profile) == (
        "config a.yaml (with --config/profile overrides of ['batch_tokens', 'chunk_bp'])"
    )
