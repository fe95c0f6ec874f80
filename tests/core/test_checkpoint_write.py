"""The plan's checkpoint write: the busiest host's share, its write time on the instance's checkpoint
storage (gp2 by volume size; unknown on local NVMe), and the warning when a save on SIGTERM cannot
finish inside SageMaker's grace. Pure: no AWS, no torch."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tests.core.specs import DDP
from trainstack.planner.checkpoint import (
    GP2_LARGE_VOLUME_THROUGHPUT,
    GP2_THROUGHPUT,
    MIB,
    SIGTERM_GRACE_SECONDS,
    CheckpointWrite,
    gp2_throughput,
)
from trainstack.planner.memory import checkpoint_bytes
from trainstack.preflight import preflight
from trainstack.spec import parse_spec
from trainstack_cli.plan_view import show

GPT_1_3B = {"model": "gpt-1.3b", "precision": "fp16"}  # a 15 GiB checkpoint: about 121 s at 128 MiB/s


def plan_of(**changes):
    data = {**DDP, "inputs": {}, "spot": {"enabled": False}, "warm_pool": None, "force": True, **changes}
    return preflight(parse_spec(data)).plan


def p3_plan(**changes):
    """ml.p3.16xlarge has no local NVMe: its checkpoints go to a gp2 volume of volume_size_gb."""
    return plan_of(**{"instance_type": "ml.p3.16xlarge", "hyperparameters": GPT_1_3B, **changes})


def test_a_gp2_volume_of_100_gb_writes_a_checkpoint_at_128_mib_per_second():
    plan = p3_plan(volume_size_gb=100)
    (option,) = plan.options
    assert option.checkpoint.seconds == pytest.approx(checkpoint_bytes(plan.workload) / (128 * MIB))


def test_a_gp2_volume_of_334_gib_or_more_writes_at_250_mib_per_second():
    (small,) = p3_plan(volume_size_gb=100).options
    (large,) = p3_plan(volume_size_gb=400).options
    assert large.checkpoint.throughput == 250 * MIB
    assert large.checkpoint.seconds == pytest.approx(small.checkpoint.seconds * 128 / 250)


def test_a_gp2_volume_between_170_and_334_gib_counts_128_mib_per_second_not_its_burst():
    assert gp2_throughput(300) == GP2_THROUGHPUT


def test_volume_size_in_gb_reaches_the_334_gib_band_only_at_359_gb():
    assert (gp2_throughput(358), gp2_throughput(359)) == (GP2_THROUGHPUT, GP2_LARGE_VOLUME_THROUGHPUT)


def test_on_local_nvme_the_write_time_is_unknown_and_says_why():
    plan = plan_of(hyperparameters=GPT_1_3B)  # ml.p4d.24xlarge: NVMe instance storage
    (option,) = plan.options
    report = plan.to_json()["options"][0]["checkpoint"]
    assert option.checkpoint.seconds is None and not option.warnings
    assert report["write_seconds"] is None and report["exceeds_sigterm_grace"] is None
    assert "AWS publishes no write bandwidth" in report["write_seconds_unknown"]


def test_a_replicated_strategy_counts_the_whole_checkpoint_on_one_host():
    plan = p3_plan()
    assert plan.options[0].checkpoint.bytes_per_host == checkpoint_bytes(plan.workload)


def test_fsdp_over_two_hosts_counts_half_the_checkpoint_per_host():
    plan = p3_plan(strategy="fsdp", distribution=None, framework_version="2.7.1")
    assert plan.options[0].checkpoint.bytes_per_host == checkpoint_bytes(plan.workload) // 2


def test_a_write_of_exactly_the_grace_brings_no_warning():
    at_grace = CheckpointWrite(SIGTERM_GRACE_SECONDS * GP2_THROUGHPUT, 100, GP2_THROUGHPUT)
    assert at_grace.seconds == SIGTERM_GRACE_SECONDS and at_grace.warning is None


def test_a_write_one_byte_over_the_grace_warns():
    over = CheckpointWrite(SIGTERM_GRACE_SECONDS * GP2_THROUGHPUT + 1, 100, GP2_THROUGHPUT)
    assert "relies on the last completed checkpoint" in over.warning


def test_the_warning_on_a_slow_gp2_volume_names_the_volume_size_that_writes_faster():
    over = CheckpointWrite(SIGTERM_GRACE_SECONDS * GP2_THROUGHPUT + 1, 100, GP2_THROUGHPUT)
    assert "volume_size_gb: 359 or more writes at 250 MiB/s" in over.warning


def test_the_plan_json_carries_the_write_time_and_the_warning_of_an_option_over_the_grace():
    (option,) = p3_plan(volume_size_gb=100).to_json()["options"]
    assert option["checkpoint"]["write_seconds"] > SIGTERM_GRACE_SECONDS and option["checkpoint"]["exceeds_sigterm_grace"]
    assert option["checkpoint"]["volume_size_gb"] == 100 and option["checkpoint"]["throughput_mib_per_second"] == 128
    assert len(option["warnings"]) == 1


def test_an_option_within_the_grace_has_no_warnings():
    (option,) = p3_plan(volume_size_gb=400).to_json()["options"]
    assert not option["checkpoint"]["exceeds_sigterm_grace"] and "warnings" not in option


def test_trainstack_plan_shows_the_write_time_and_the_warning():
    out = io.StringIO()
    show(p3_plan(volume_size_gb=100), "job.yaml", Console(file=out, width=400))
    text = out.getvalue()
    assert "about 121 s at gp2's 128 MiB/s (100 GB volume)" in text
    assert f"longer than SageMaker's {SIGTERM_GRACE_SECONDS} s between SIGTERM and SIGKILL" in text
