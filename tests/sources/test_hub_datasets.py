"""Every Hub input of config/suite.yaml fetched through the real fetch code, offline, from a
Hugging Face cache laid out as the Hub serves it (blobs, snapshots/<commit>/, refs/main), each
file at the path its dataset card or the official evaluation code names
(docs/suite-conventions.md#datasets)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml
from huggingface_hub import constants as hub_constants
from support.cluster import run_snakemake, workflow_env
from support.hub import hub_dataset_cache

from carbon_vep.config.entries import NIAH_REVISION
from carbon_vep.config.niah_grid import NIAH_CONTEXTS, NIAH_TASKS, niah_config_name
from carbon_vep.errors import InputError
from carbon_vep.sources.download import fetch_hub_file, glob_matches

ROOT = Path(__file__).resolve().parents[2]
PERTURBATION_COMMIT = "07ec9b827f845c82cdebb614d72ff7f5cfeb58b8"
MAIN_COMMIT = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"  # what main resolves to in the cache


def _parquet(**columns) -> bytes:
    buffer = io.BytesIO()
    pl.DataFrame(columns).write_parquet(buffer)
    return buffer.getvalue()


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """huggingface_hub reading only `tmp_path/hub`, as a job with HF_HUB_OFFLINE=1 does."""
    cache = tmp_path / "hub"
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_a_glob_takes_one_folders_shards_in_name_order(offline_cache, tmp_path):
    hub_dataset_cache(
        offline_cache,
        "org/bench",
        PERTURBATION_COMMIT,
        {
            "syn_human/test-00001-of-00002.parquet": _parquet(x=[3]),
            "syn_human/test-00000-of-00002.parquet": _parquet(x=[1, 2]),
            "syn_human_v2/test-00000-of-00001.parquet": _parquet(x=[8]),  # another config
            "syn_human/old/test-00000.parquet": _parquet(x=[9]),  # a nested folder
            "motif_human/test-00000.parquet": _parquet(x=[7]),
        },
    )
    fetched = fetch_hub_file(
        "org/bench", "syn_human/test-*", tmp_path / "syn.parquet", PERTURBATION_COMMIT
    )
    assert pl.read_parquet(tmp_path / "syn.parquet")["x"].to_list() == [1, 2, 3]
    assert fetched["commit"] == PERTURBATION_COMMIT
    assert fetched["files"] == [
        "syn_human/test-00000-of-00002.parquet",
        "syn_human/test-00001-of-00002.parquet",
    ]
    with pytest.raises(InputError, match="no file matches 'tata/test-\\*'"):
        fetch_hub_file("org/bench", "tata/test-*", tmp_path / "t.parquet", PERTURBATION_COMMIT)
    assert not (tmp_path / "t.parquet").exists()


def test_one_file_at_main_records_the_commit_main_resolved_to(offline_cache, tmp_path):
    hub_dataset_cache(offline_cache, "org/vep", MAIN_COMMIT, {"coding/c.parquet": _parquet(x=[5])})
    fetched = fetch_hub_file("org/vep", "coding/c.parquet", tmp_path / "c.parquet")
    assert fetched["commit"] == MAIN_COMMIT and fetched["files"] == ["coding/c.parquet"]
    assert pl.read_parquet(tmp_path / "c.parquet")["x"].to_list() == [5]


def test_a_revision_or_file_not_in_the_cache_names_the_repository(offline_cache, tmp_path):
    hub_dataset_cache(offline_cache, "org/vep", MAIN_COMMIT, {"a.parquet": _parquet(x=[1])})
    with pytest.raises(InputError, match=r"hf://datasets/org/vep@0{40}: cannot fetch 'a.parquet'"):
        fetch_hub_file("org/vep", "a.parquet", tmp_path / "a.parquet", "0" * 40)
    with pytest.raises(InputError, match="cannot fetch 'b.parquet'"):
        fetch_hub_file("org/vep", "b.parquet", tmp_path / "b.parquet")
    assert not list(tmp_path.glob("*.parquet"))


def test_offline_and_not_cached_says_where_to_fetch_it(offline_cache, tmp_path):
    """HF_HUB_OFFLINE=1 left set on the head node (a shell's profile), nothing cached: the
    error says that the offline switch, not the network, stops the download, and what fetches
    the file (it used to ask to check the internet connection)."""
    with pytest.raises(InputError) as err:
        fetch_hub_file("org/vep", "b.parquet", tmp_path / "b.parquet")
    message = str(err.value)
    assert f"it is not in the Hugging Face cache {offline_cache}" in message
    assert "HF_HUB_OFFLINE=1 forbids downloading it" in message
    assert "fetch_hub_<name> or fetch_niah_cell, or `carbon-vep fetch-hub`" in message
    assert "check your connection" not in message and not list(tmp_path.glob("*.parquet"))


def test_globs_match_folder_by_folder():
    assert glob_matches("data/niah_4k/test-00000-of-00001.parquet", "data/niah_4k/test-*.parquet")
    assert not glob_matches("data/niah_4k/x/test-0.parquet", "data/niah_4k/test-*.parquet")
    assert not glob_matches("data/niah_48k/test-0.parquet", "data/niah_4k/test-*.parquet")


# ---- config/suite.yaml's fetch rules, offline ---------------------------------------------
def _uids(cell: str, rows: int) -> list[str]:
    return [f"{cell}_{i}" for i in range(rows)]


def _suite_hub_cache(cache: Path) -> dict[str, list]:
    """Every Hub input of the published suite, where its card or the official code puts it; a
    distinct value in each file, so a file fetched into the wrong place is seen."""
    niah = {  # the Hub's 500 rows a cell, as config/suite.yaml's entries expect
        f"data/{name}/test-00000-of-00001.parquet": _parquet(uid=_uids(name, 500))
        for name in (niah_config_name(t, c) for t in NIAH_TASKS for c in NIAH_CONTEXTS)
    }
    assert len(niah) == 24
    hub_dataset_cache(cache, "HuggingFaceBio/genomic-niah", NIAH_REVISION, niah, main=False)
    hub_dataset_cache(
        cache,
        "HuggingFaceBio/perturbation-bench",
        PERTURBATION_COMMIT,
        {
            f"{config}/test-0000{i}-of-00002.parquet": _parquet(src=[f"{config}_{i}"])
            for config in ("motif_human", "syn_human", "syn_mouse")
            for i in range(2)
        },
        main=False,
    )
    singles = {
        ("HuggingFaceBio/brca2-vep", "brca2_vep.parquet"),
        ("HuggingFaceBio/traitgym", "mendelian_traits_vep.parquet"),
        ("HuggingFaceBio/clinvar-vep-final", "coding/clinvar_coding.parquet"),
        ("HuggingFaceBio/clinvar-vep-final", "non_coding/clinvar_non_coding.parquet"),
        ("GenerTeam/variant-effect-prediction", "hg38.parquet"),
        ("GenerTeam/sequence-recovery", "eukaryote/test.parquet"),
    }
    by_repo: dict[str, dict[str, bytes]] = {}
    for repo, path in singles:
        by_repo.setdefault(repo, {})[path] = _parquet(src=[f"{repo}/{path}"])
    for repo, files in by_repo.items():
        hub_dataset_cache(cache, repo, MAIN_COMMIT, files)
    return {"singles": sorted(singles)}


@pytest.mark.workflow
def test_the_suites_fetch_rules_fetch_every_hub_input_offline(tmp_path):
    config = yaml.safe_load((ROOT / "config/suite.yaml").read_text())
    _suite_hub_cache(tmp_path / "hf/hub")
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    fetch_rules = [f"fetch_hub_{name}" for name in config["hub_files"]] + ["fetch_niah_cell"]
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(tmp_path),
        "--configfile",
        str(ROOT / "config/suite.yaml"),
        "--cores",
        "2",
        "--until",
        *fetch_rules,
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for name, hub in config["hub_files"].items():  # each file from its own repository and path
        frame = pl.read_parquet(tmp_path / hub["out"])
        if "/test-*" in hub["filename"]:
            folder = hub["filename"].split("/")[0]
            assert frame["src"].to_list() == [f"{folder}_0", f"{folder}_1"], name
        else:
            assert frame["src"].to_list() == [f"{hub['repo_id']}/{hub['filename']}"], name
    cells = sorted((tmp_path / "results/niah").glob("*/cells/*.parquet"))
    expected = {
        (entry, niah_config_name(task, ctx))
        for entry, spec in config["niah"].items()
        for task in NIAH_TASKS
        for ctx in spec["contexts"]
    }
    assert {(c.parts[-3], c.stem) for c in cells} == expected and len(expected) == 28
    for cell in cells:
        assert pl.read_parquet(cell)["uid"].to_list() == _uids(cell.stem, 500)
    log = (tmp_path / "logs/fetch_hub_brca2.log").read_text()
    assert MAIN_COMMIT in log and "set `revision:" in log  # unpinned: the commit to pin


@pytest.mark.workflow
def test_a_hub_cell_holding_other_than_the_entrys_rows_stops_the_run_before_any_job(
    tmp_path, demo_model_dir
):
    """A niah entry's `rows` is what its score_niah jobs cut into row ranges. A Hub cell holding
    another number of rows used to be refused by merge_niah, after every model job had run;
    now once fetch_niah_cell (a checkpoint) has fetched it, and at once where it is there."""
    hub_dataset_cache(
        tmp_path / "hf/hub",
        "HuggingFaceBio/genomic-niah",
        NIAH_REVISION,
        {"data/niah_4k/test-00000-of-00001.parquet": _parquet(uid=_uids("niah_4k", 5))},
        main=False,
    )
    entry = {"source": "hub", "tasks": ["niah"], "contexts": [4096], "rows_per_job": 2}
    model = {"path": str(demo_model_dir), "trust_remote_code": True, "device": "cpu"}
    config = tmp_path / "config.yaml"
    env = workflow_env(HF_HOME=str(tmp_path / "hf"))
    env.pop("HF_HUB_CACHE", None)

    def run(rows: int, *extra: str) -> subprocess.CompletedProcess:
        niah = {"hubby": entry | {"rows": rows}}
        config.write_text(yaml.safe_dump({"models": {"demo": model}, "niah": niah}))
        return run_snakemake(tmp_path, config, "--cores", "1", *extra, env=env)

    refusal = (
        "niah.hubby: rows is 3, but its cell results/niah/hubby/cells/niah_4k.parquet "
        "(fetched from the Hub) holds 5 rows; set `rows: 5`"
    )
    first = run(3)  # the fetch runs, then the DAG stops before score_niah
    assert first.returncode != 0 and refusal in first.stderr, first.stderr[-3000:]
    assert (tmp_path / "results/niah/hubby/cells/niah_4k.parquet").exists()
    assert "rule score_niah:" not in first.stderr  # no such job started
    assert not list(tmp_path.glob("results/suite/niah/**/parts/*"))
    again = run(3, "-n")  # the cell there: refused while the DAG is built (a dry run's stdout)
    assert again.returncode != 0 and refusal in again.stdout + again.stderr, again.stderr[-3000:]
    mended = run(5, "-n")  # three jobs: rows 0:2, 2:4, 4:5
    assert mended.returncode == 0, mended.stderr[-3000:]
    assert mended.stdout.count("rule score_niah:") == 3
    assert "--row-range 4:5 " in mended.stdout
