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
