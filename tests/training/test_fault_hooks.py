"""The test-only fault hooks act only where the twin says so, and a malformed value is no crash."""

from __future__ import annotations

import logging

from trainstack_contract import fault_hooks
from trainstack_training.faults import FaultHooks

HOOKS = {"TRAINSTACK_INJECT_HANG": "1:3", "TRAINSTACK_INJECT_NAN": "0:5", "TRAINSTACK_FREEZE": "blocks.1"}


def test_outside_the_twin_no_hook_acts_whatever_the_environment_says():
    assert FaultHooks.read(1, HOOKS) == FaultHooks()


def test_in_the_twin_each_rank_reads_its_own_faults():
    environ = {fault_hooks.TWIN: "1", **HOOKS}
    assert FaultHooks.read(1, environ) == FaultHooks(hang_at=3, nan_at=None, frozen_layer="blocks.1")
    assert FaultHooks.read(0, environ) == FaultHooks(hang_at=None, nan_at=5, frozen_layer="blocks.1")


def test_a_malformed_value_is_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="trainstack"):
        hooks = FaultHooks.read(1, {fault_hooks.TWIN: "1", "TRAINSTACK_INJECT_HANG": "soon"})
    assert hooks.hang_at is None
    assert "TRAINSTACK_INJECT_HANG='soon' ignored: expected <rank>:<step>" in caplog.text
