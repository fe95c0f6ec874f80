"""The test-only fault hooks act only where the twin says so, and a malformed value is no crash."""

from __future__ import annotations

import logging

import pytest
import torch.distributed

from trainstack_contract import fault_hooks
from trainstack_training.faults import FaultHooks

HOOKS = {
    "TRAINSTACK_INJECT_HANG": "1:3",
    "TRAINSTACK_INJECT_NAN": "0:5",
    "TRAINSTACK_INJECT_TRANSPORT_ERROR": "0:7",
    "TRAINSTACK_FREEZE": "blocks.1",
}


def test_outside_the_twin_no_hook_acts_whatever_the_environment_says():
    assert FaultHooks.read(1, HOOKS) == FaultHooks()


def test_in_the_twin_each_rank_reads_its_own_faults():
    environ = {fault_hooks.TWIN: "1", **HOOKS}
    assert FaultHooks.read(1, environ) == FaultHooks(hang_at=3, frozen_layer="blocks.1")
    assert FaultHooks.read(0, environ) == FaultHooks(nan_at=5, frozen_layer="blocks.1", transport_error_at=7)


def test_a_malformed_value_is_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="trainstack"):
        hooks = FaultHooks.read(1, {fault_hooks.TWIN: "1", "TRAINSTACK_INJECT_HANG": "soon"})
    assert hooks.hang_at is None
    assert "TRAINSTACK_INJECT_HANG='soon' ignored: expected <rank>:<step>" in caplog.text


def test_an_injected_transport_error_is_what_nccl_raises_when_a_peer_or_the_network_fails():
    with pytest.raises(torch.distributed.DistBackendError, match="remote process exited or there was a network error"):
        FaultHooks(transport_error_at=7).before_batch(7)


def test_an_injected_transport_error_acts_at_its_step_only():
    FaultHooks(transport_error_at=7).before_batch(6)
