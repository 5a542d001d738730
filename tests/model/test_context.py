"""A model's usable context, defined once (model.context): the positions a stretch of bases
takes and the one refusal that the scan's plan (from a local config.json) and the engine (from
the loaded model) both give."""

from __future__ import annotations

import pytest

from carbon_vep.config.fields import INTERFACE_VARIABLE
from carbon_vep.errors import ContextTooLongError
from carbon_vep.model.context import check_context, positions_needed, usable_bp


def test_positions_are_whole_kmers_and_the_prefix():
    assert [positions_needed(bp, 6) for bp in (0, 5, 6, 11, 12, 49_146)] == [1, 1, 2, 2, 3, 8_192]
    assert usable_bp(8_192, 6) == 49_146
    assert positions_needed(usable_bp(8_192, 6), 6) == 8_192


def test_the_usable_context_is_accepted_and_one_kmer_more_refused():
    def check(bp):
        check_context(bp, 6, 8_192, what="scan tiles", model="model m", setting="tile_bp")

    check(49_146)
    check(49_151)  # a partial 6-mer at the end takes no position
    with pytest.raises(ContextTooLongError) as refused:
        check(49_152)
    assert str(refused.value) == (
        "scan tiles of 49,152 bp need 8,193 positions (whole 6-mers + the prefix) but model m "
        "supports 8,192, 49,146 bp; lower `--tile-bp` to at most 49,146 (and min_context below "
        "it)"
    )


def test_unknown_positions_check_nothing_and_the_setting_is_spelled_for_the_workflow(
    monkeypatch,
):
    check_context(10**9, 6, None, what="scan tiles", model="m", setting="tile_bp")
    monkeypatch.setenv(INTERFACE_VARIABLE, "workflow")
    lower = r"lower the config key `window_bp` to at most 60$"
    with pytest.raises(ContextTooLongError, match=lower):
        check_context(66, 6, 11, what="centered windows", model="m", setting="window_bp")


def _run_with_window(tmp_path, recipe: str, models: dict, **scoring):
    from carbon_vep.config.run import RunConfig

    dataset = {"panel": "p.vcf", "reference": "r.fa", "build": "hg38", "recipe": recipe}
    return RunConfig.from_dict({"models": models, "datasets": {"ds": dataset | scoring}})


def test_a_datasets_windows_are_checked_against_each_local_models_positions(tmp_path):
    """The workflow's parse-time check (scoring.context): the window (or a scan recipe's tile)
    against a local checkpoint's config.json, an unbuilt demo model's positions; a Hub id is
    left to its jobs, and a recipe with no model checks nothing."""
    import json

    from carbon_vep.scoring.context import check_dataset_contexts

    small = tmp_path / "small"
    small.mkdir()
    (small / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    fits = usable_bp(512, 6)  # 3,066 bp
    local = {"m": {"path": str(small)}, "hub": {"path": "HuggingFaceBio/Carbon-3B"}}
    check_dataset_contexts(_run_with_window(tmp_path, "centered", local, window_bp=fits))
    with pytest.raises(ContextTooLongError, match=r"datasets\.ds: nexttoken windows of 3,072 bp"):
        check_dataset_contexts(_run_with_window(tmp_path, "nexttoken", local, window_bp=fits + 6))
    with pytest.raises(ContextTooLongError, match="centered windows of 8,192 bp"):  # the default
        check_dataset_contexts(_run_with_window(tmp_path, "centered", local))
    tiles = {"tile_bp": fits + 6, "min_context": 60}
    with pytest.raises(ContextTooLongError, match=r"lower `--tile-bp`"):
        check_dataset_contexts(_run_with_window(tmp_path, "scan", local, **tiles))
    demo = {"d": {"path": str(tmp_path / "not_built"), "build_demo": True}}
    with pytest.raises(ContextTooLongError, match="the positions the demo model is built with"):
        check_dataset_contexts(_run_with_window(tmp_path, "centered", demo, window_bp=60_000))
    hub_only = {"hub": {"path": "HuggingFaceBio/Carbon-3B"}}
    check_dataset_contexts(_run_with_window(tmp_path, "centered", hub_only, window_bp=10**6))
