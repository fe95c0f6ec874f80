"""The account of a run's time (trainstack/goodput.py): what each attempt's billed instance-seconds
went to, from DescribeTrainingJob's billable time and secondary-status transitions and the script's
metric lines, and the time it waited unbilled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from trainstack.goodput import attempt_account, goodput, report, total, words
from trainstack_contract.metric_lines import CHECKPOINT_STEP, STEP

CREATED = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
NOW = CREATED + timedelta(days=1)


def _at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


def _job(phases: list[tuple[str, float, float]], *, billable: int | None, instances: int = 2, status: str = "Completed") -> dict:
    """A description whose transitions are (status, start, end) in seconds after CREATED; billing
    from the first phase that is not Starting to the last end."""
    billed = [(start, end) for status_, start, end in phases if status_ not in ("Starting", *("Completed", "Stopped"))]
    return {
        "TrainingJobName": "trainstack-x",
        "TrainingJobStatus": status,
        "CreationTime": CREATED,
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": instances},
        "TrainingStartTime": _at(billed[0][0]),
        **({"TrainingEndTime": _at(phases[-1][2]), "BillableTimeInSeconds": billable} if billable is not None else {}),
        "SecondaryStatusTransitions": [
            {"Status": name, "StartTime": _at(start), **({"EndTime": _at(end)} if end is not None else {})}
            for name, start, end in phases
        ],
    }


# 5 minutes waiting for instances, 2 downloading, 60 training (1,000 steps of 3 s: 50 minutes), 3 uploading.
COMPLETED = _job(
    [
        ("Starting", 0, 300),
        ("Downloading", 300, 420),
        ("Training", 420, 4020),
        ("Uploading", 4020, 4200),
        ("Completed", 4200, 4200),
    ],
    billable=3900,
)
STEPS = {STEP: 1000, CHECKPOINT_STEP: 1000, "train:step_time": 3.0}


def test_a_completed_jobs_billed_time_is_its_steps_its_start_up_its_script_overhead_and_its_upload():
    account = attempt_account(COMPLETED, STEPS, resumed_from=0, retrained=False, waiting_since=None, now=NOW)
    assert account == {
        "billed": 7800,  # 3,900 s x 2 instances
        "productive": 6000,  # 1,000 steps x 3 s x 2
        "retrained": 0,
        "startup": 240,  # downloading
        "script": 1200,  # training that was not stepping: the script's start-up, its saves, the export
        "stops": 360,  # uploading
        "waiting": 600,  # Starting, from the job's creation
    }
    assert sum(account[part] for part in ("productive", "retrained", "startup", "script", "stops")) == account["billed"]
    assert goodput(account) == pytest.approx(6000 / 7800, abs=1e-4)


def test_the_steps_after_the_newest_checkpoint_are_trained_again_only_when_another_attempt_follows():
    preempted = {STEP: 1000, CHECKPOINT_STEP: 800, "train:step_time": 3.0}
    followed = attempt_account(COMPLETED, preempted, resumed_from=0, retrained=True, waiting_since=None, now=NOW)
    last = attempt_account(COMPLETED, preempted, resumed_from=0, retrained=False, waiting_since=None, now=NOW)
    assert (followed["productive"], followed["retrained"]) == (4800, 1200)  # 200 steps x 3 s x 2 trained again
    assert (last["productive"], last["retrained"]) == (6000, 0)


def test_an_attempt_counts_only_the_steps_it_trained_since_the_checkpoint_it_resumed_from():
    resumed = attempt_account(COMPLETED, STEPS, resumed_from=600, retrained=False, waiting_since=None, now=NOW)
    assert (resumed["productive"], resumed["script"]) == (2400, 4800)  # 400 steps; the rest of the training phase


def test_an_attempt_waits_from_the_end_of_the_one_before_or_its_submission_to_the_queue():
    since = CREATED - timedelta(minutes=20)  # requeued by a preemption (or submitted) 20 minutes before the job
    account = attempt_account(COMPLETED, STEPS, resumed_from=0, retrained=False, waiting_since=since, now=NOW)
    assert account["waiting"] == 2 * (1200 + 300)


def test_a_spot_reclaims_wait_is_waiting_and_the_billable_seconds_are_divided_as_the_billed_phases_ran():
    reclaimed = _job(
        [
            ("Downloading", 0, 100),
            ("Training", 100, 1100),
            ("Interrupted", 1100, 1700),
            ("Starting", 1700, 1800),
            ("Downloading", 1800, 1900),
            ("Training", 1900, 2900),
            ("Completed", 2900, 2900),
        ],
        billable=1100,  # spot: SageMaker bills less than the phases ran
        instances=1,
    )
    account = attempt_account(reclaimed, {STEP: 0}, resumed_from=0, retrained=False, waiting_since=None, now=NOW)
    assert account["waiting"] == 700  # Interrupted and Starting, inside training
    assert (account["startup"], account["script"]) == (100, 1000)  # 200 : 2,000 of the 1,100 billed seconds


def test_a_job_still_training_is_billed_since_its_training_start_and_its_open_phase_runs_until_now():
    running = _job([("Downloading", 0, 60), ("Training", 60, None)], billable=None, instances=1, status="InProgress")
    account = attempt_account(
        running, {STEP: 100, "train:step_time": 2.0}, resumed_from=0, retrained=False, waiting_since=None, now=_at(660)
    )
    assert account == {"billed": 660, "productive": 200, "retrained": 0, "startup": 60, "script": 400, "stops": 0, "waiting": 0}


def test_a_job_that_never_had_instances_is_all_waiting():
    failed = {
        "TrainingJobStatus": "Failed",
        "CreationTime": CREATED,
        "LastModifiedTime": _at(90),
        "ResourceConfig": {"InstanceCount": 4},
    }
    account = attempt_account(failed, {}, resumed_from=0, retrained=False, waiting_since=None, now=NOW)
    assert account == {"billed": 0, "productive": 0, "retrained": 0, "startup": 0, "script": 0, "stops": 0, "waiting": 360}
    assert goodput(account) is None


def test_a_runs_account_adds_its_attempts_part_by_part_and_reports_each_part_as_a_share_of_the_billed_time():
    first = attempt_account(
        COMPLETED, {**STEPS, STEP: 500, CHECKPOINT_STEP: 400}, resumed_from=0, retrained=True, waiting_since=None, now=NOW
    )
    second = attempt_account(COMPLETED, STEPS, resumed_from=400, retrained=False, waiting_since=None, now=NOW)
    run = total([first, second])
    assert run["billed"] == 15600 and run["retrained"] == 600 and run["productive"] == 2400 + 3600
    shared = report(run)
    assert shared["goodput"] == pytest.approx(6000 / 15600, abs=1e-4)
    assert shared["shares"]["retrained"] == pytest.approx(600 / 15600, abs=1e-4)
    assert words(run).startswith("goodput 38% of 15,600 billed instance-seconds (the rest: steps trained again 4%, start-up 3%, ")
    assert words(run).endswith("; waited 1,200 instance-seconds for the queue or capacity (not billed)")
