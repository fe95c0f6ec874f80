"""The failure-trace bench's own logic (tools/bench_goodput.py): the trace it replays, which faults
each job of a run gets, and the prediction it sets beside each measurement. The bench itself is run
by `make bench-goodput`, never as a test (README, "Benchmark")."""

from __future__ import annotations

import statistics

import pytest

from tools.bench_goodput import (
    HANG,
    KINDS,
    SPOT,
    TRANSPORT,
    Failure,
    failure_trace,
    fault_variable,
    job_faults,
)
from trainstack_contract import fault_hooks


def test_the_trace_is_the_seeds_and_each_block_of_six_gaps_covers_the_distribution():
    trace = failure_trace(mttf_steps=1000, count=60, seed=3)
    assert trace == failure_trace(mttf_steps=1000, count=60, seed=3) != failure_trace(mttf_steps=1000, count=60, seed=4)
    for block in range(0, 60, 6):
        # one gap from each sixth of the exponential: below and above the median, and its mean near the MTTF
        gaps = sorted(failure.steps for failure in trace[block : block + 6])
        assert gaps[2] < 1000 * 0.694 < gaps[3]  # the median of an exponential is ln 2 x its mean
    assert statistics.fmean(failure.steps for failure in trace) == pytest.approx(1000, rel=0.15)


def test_each_block_of_three_failures_holds_each_kind_once():
    trace = failure_trace(mttf_steps=50, count=30, seed=0)
    for block in range(0, 30, 3):
        assert sorted(failure.kind for failure in trace[block : block + 3]) == sorted(KINDS)


def test_a_job_gets_the_spot_reclaims_before_its_first_failing_fault_and_that_fault():
    trace = [Failure(SPOT, 100), Failure(SPOT, 50), Failure(HANG, 30), Failure(TRANSPORT, 10)]
    faults = job_faults(trace, index=0, resume_step=400)
    assert (faults.spot_steps, faults.failing, faults.next_index) == ((500, 550), (HANG, 580), 3)
    following = job_faults(trace, faults.next_index, resume_step=560)  # resumed from its last checkpoint
    assert (following.spot_steps, following.failing, following.next_index) == ((), (TRANSPORT, 570), 4)
    assert job_faults(trace, 4, 570).failing is None


def test_a_hang_stops_the_second_hosts_rank_and_a_transport_error_fails_rank_0_on_every_host():
    assert fault_variable(HANG, 12) == (fault_hooks.INJECT_HANG, "1:12", "algo-2")
    assert fault_variable(TRANSPORT, 7) == (fault_hooks.INJECT_TRANSPORT_ERROR, "0:7", None)
