"""What the state machine decides, as pure functions."""

from __future__ import annotations

import pytest

from tests.core.specs import DDP
from trainstack.spec import Restarts, parse_spec
from trainstack.workflow import (
    CAPACITY_REFUSED_RETRY,
    CONTROL_PLANE_RETRY,
    SUBJECT_MAX,
    RetryPolicy,
    notification_subject,
    run_deadline_seconds,
)


def test_a_notification_subject_never_carries_line_breaks_or_control_characters():
    subject = notification_subject("Failed", "job-1: AlgorithmError: Traceback\n  File x\r\n\tboom")
    assert subject == "trainstack run Failed: job-1: AlgorithmError: Traceback File x boom"


def test_a_notification_subject_is_printable_ascii():
    assert notification_subject("Failed", "loss \u2192 NaN \U0001f525") == "trainstack run Failed: loss NaN"


@pytest.mark.parametrize("length", [10, 90, 500])
def test_a_notification_subject_stays_under_snss_limit(length):
    subject = notification_subject("Failed", "x" * length)
    assert len(subject) <= SUBJECT_MAX < 100
    assert subject.endswith("...") == (len("trainstack run Failed: ") + length > SUBJECT_MAX)


def _spec(**fields: object):
    return parse_spec({**DDP, "spot": {"enabled": False}, **fields})


def test_a_run_deadline_grows_with_the_jobs_own_limits():
    longer = run_deadline_seconds(_spec(max_runtime="48h"), 1) - run_deadline_seconds(_spec(max_runtime="24h"), 1)
    assert longer == 86400 * (1 + Restarts().max)  # the job and each restart it may get


def test_a_spot_jobs_deadline_counts_its_whole_max_wait():
    spot = _spec(max_runtime="24h", spot={"enabled": True, "max_wait": "72h"})
    assert run_deadline_seconds(spot, 1) - run_deadline_seconds(_spec(max_runtime="24h"), 1) == 2 * 86400 * (1 + Restarts().max)


def test_a_sweep_deadline_counts_its_trials_in_waves_of_max_concurrency():
    one = run_deadline_seconds(_spec(), 1)
    sweep = _spec(sweep={"max_concurrency": 2, "trials": [{}, {}, {}]})
    assert run_deadline_seconds(sweep, 3) == 2 * one  # 3 trials, 2 at a time: two waves


def test_each_restart_gets_its_backoff_and_a_whole_job():
    two = run_deadline_seconds(_spec(restarts={"max": 2}), 1) - run_deadline_seconds(_spec(restarts={"max": 0}), 1)
    assert two == (60 + 86400 + 3600) + (120 + 86400 + 3600)


def test_sagemakers_own_retries_each_get_the_whole_runtime():
    assert run_deadline_seconds(_spec(retry_attempts=2), 1) - run_deadline_seconds(_spec(), 1) == 2 * (86400 + 3600)


def test_a_retry_policy_counts_its_waits_as_step_functions_spaces_them():
    assert CONTROL_PLANE_RETRY.total_wait_seconds() == 5 + 10 + 20 + 40 + 80 + 160 + 300 + 300  # capped at 5 minutes
    assert CAPACITY_REFUSED_RETRY.total_wait_seconds() == (5 + 10 + 20 + 40) * 60  # under the one-hour cap
    assert RetryPolicy(("E",), interval_seconds=1200, max_attempts=3, max_delay_seconds=3600).total_wait_seconds() == (
        1200 + 2400 + 3600
    )
