"""What `runs`, `status`, `logs`, `stop` and `queue` make of the team queue (AWS Batch service jobs for
SageMaker Training): first from DescribeServiceJob and GetJobQueueSnapshot answers as plain data,
then against the in-process twin, whose Batch emulation dispatches the queue's jobs to SageMaker."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.cli.outputs import STACK_OUTPUTS
from tests.synth import synthesize
from trainstack.polling import poll_until
from trainstack_cli.logs import follow_logs
from trainstack_cli.main import main
from trainstack_cli.queue_reading import read_queue
from trainstack_cli.run_reading import list_runs, read_run
from trainstack_cli.runs import (
    QUEUED_STATUS,
    JobRecord,
    RunView,
    StopView,
    TrialView,
    queued_trial_view,
    service_job_ids,
    trial_view,
)
from trainstack_cli.stack import EXIT_UNKNOWN_RUN, CliError, Stack, find_stack
from trainstack_cli.stop import stop
from trainstack_cli.submit import submit
from trainstack_cli.team_queue import FRONT_OF_QUEUE_LENGTH, batch_time, queue_view, service_job_view
from trainstack_cli.views import console, live_line, queue_table, runs_table, status_view, stopped_view
from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.pipeline import upload_sample_data

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
QUEUE_ARN = "arn:aws:batch:us-east-1:123456789012:job-queue/trainstack-queue"
JOB_NAME = "trainstack-gpt-0123456789ab-t2-a1"
TRAINING_JOB_NAME = f"AWSBatch{JOB_NAME}88b610a69aa8380ca5b0a7aba3f81cb8"


def millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def arn_of(job_id: str) -> str:
    return f"arn:aws:batch:us-east-1:123456789012:service-job/{job_id}"


def service_job(job_id: str = "job-1", status: str = "RUNNABLE", **overrides) -> dict:
    """DescribeServiceJob of a job trainstack submitted: its payload is the CreateTrainingJob request."""
    request = {
        "TrainingJobName": overrides.get("jobName", JOB_NAME),
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
    }
    return {
        "jobId": job_id,
        "jobArn": arn_of(job_id),
        "jobName": JOB_NAME,
        "jobQueue": QUEUE_ARN,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "status": status,
        "shareIdentifier": "research",
        "schedulingPriority": 9000,
        "createdAt": millis(NOW - timedelta(minutes=5)),
        "serviceRequestPayload": json.dumps(request),
        **overrides,
    }


def snapshot(*job_ids: str, usage: dict[str, float] | None = None) -> dict:
    """GetJobQueueSnapshot: the RUNNABLE jobs in dispatch order, and instances in use per share."""
    shares = [
        {"shareIdentifier": share, "capacityUsage": [{"capacityUnit": "NUM_INSTANCES", "quantity": quantity}]}
        for share, quantity in (usage or {}).items()
    ]
    total = sum((usage or {}).values())
    return {
        "frontOfQueue": {"jobs": [{"jobArn": arn_of(job_id), "earliestTimeAtPosition": millis(NOW)} for job_id in job_ids]},
        "queueUtilization": {
            "totalCapacityUsage": [{"capacityUnit": "NUM_INSTANCES", "quantity": total}],
            "fairshareUtilization": {"activeShareCount": len(shares), "topCapacityUtilization": shares},
            "lastUpdatedAt": millis(NOW),
        },
    }


def front(*job_ids: str) -> list[str]:
    return [arn_of(job_id) for job_id in job_ids]


def printed(renderable) -> str:
    out = io.StringIO()
    console(out).print(renderable)
    return out.getvalue()


def run_of(*trials) -> RunView:
    return RunView(
        "nightly", "arn:aws:states:us-east-1:1:execution:m:nightly", "RUNNING", "WaitForJob", "", "", 0, "", list(trials)
    )


# -- where a job stands ---------------------------------------------------------------------------
def test_a_runnable_jobs_position_is_its_place_in_the_front_of_the_queue_counted_from_one():
    job = service_job_view(service_job("job-3"), front("job-7", "job-1", "job-3"), NOW)

    assert (job.position, job.place) == (3, "3")


def test_a_runnable_job_behind_the_hundred_jobs_the_snapshot_lists_is_said_to_be_beyond_them():
    listed = front(*(f"other-{n}" for n in range(FRONT_OF_QUEUE_LENGTH)))

    job = service_job_view(service_job("job-1"), listed, NOW)

    assert (job.position, job.beyond_front, job.place) == (None, True, "beyond the first 100")


def test_a_dispatched_job_has_no_position_even_where_a_stale_snapshot_still_lists_it():
    job = service_job_view(service_job("job-1", status="RUNNING"), front("job-1"), NOW)

    assert (job.position, job.beyond_front, job.place) == (None, False, "-")


def test_a_job_asks_for_the_instances_of_its_payloads_resource_config_and_its_age_counts_from_submission():
    job = service_job_view(service_job(), [], NOW)

    assert (job.instance_type, job.instances, job.age_seconds, job.priority, job.share) == (
        "ml.p4d.24xlarge",
        2,
        300,
        9000,
        "research",
    )


def test_batch_times_are_read_as_milliseconds_and_the_user_guides_second_values_as_seconds():
    assert batch_time(millis(NOW)) == NOW == batch_time(int(NOW.timestamp()))
    assert batch_time(None) is None


# -- a run's jobs in the queue --------------------------------------------------------------------
def exited(state: str, job: dict) -> dict:
    return {"type": "TaskStateExited", "stateExitedEventDetails": {"name": state, "output": json.dumps({"job": job})}}


def test_a_runs_service_jobs_are_those_its_create_and_describe_tasks_named_once_each_in_order():
    history = [
        exited("Create", {"job_name": "direct", "service_job_id": "", "created": True}),
        exited("Create", {"job_name": JOB_NAME, "service_job_id": "job-2", "created": True}),
        exited("WaitForJob", {"job_name": JOB_NAME, "service_job_id": "job-9"}),  # passes the job on; names nothing new
        exited("Describe", {"job_name": JOB_NAME, "service_job_id": "job-2", "status": "InProgress"}),
        exited("Describe", {"job_name": JOB_NAME, "service_job_id": "job-1", "status": "InProgress"}),
        {"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": "Create", "input": "{}"}},
    ]

    assert service_job_ids(history) == ["job-2", "job-1"]


def test_a_queued_job_is_ordered_by_its_submission_not_by_when_batch_created_its_training_job():
    training = {"TrainingJobName": TRAINING_JOB_NAME, "CreationTime": NOW}

    assert JobRecord(training, service_job()).created == NOW - timedelta(minutes=5)
    assert JobRecord(training, service_job()).job_name == JOB_NAME


def test_a_waiting_trial_is_queued_under_trainstacks_job_name_with_its_batch_state_and_no_training_job():
    trial = queued_trial_view(service_job("job-1"), None, NOW, front("job-0", "job-1"))

    assert (trial.trial, trial.attempt, trial.job_name, trial.training_job_name) == (2, 1, JOB_NAME, "")
    assert (trial.status, trial.secondary_status, trial.instance_count, trial.billable_seconds, trial.cost_usd) == (
        QUEUED_STATUS,
        "RUNNABLE",
        2,
        0,
        0.0,
    )
    assert (trial.queue.share, trial.queue.priority, trial.queue.position) == ("research", 9000, 2)


def test_a_dispatched_trial_is_its_training_job_read_under_trainstacks_name():
    dispatched = service_job(
        status="RUNNING",
        latestAttempt={
            "serviceResourceId": {
                "name": "TrainingJobArn",
                "value": f"arn:aws:sagemaker:us-east-1:1:training-job/{TRAINING_JOB_NAME}",
            }
        },
    )
    training = {
        "TrainingJobName": TRAINING_JOB_NAME,
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training",
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
        "TrainingStartTime": NOW - timedelta(minutes=1),
    }

    trial = queued_trial_view(dispatched, training, NOW, [])

    assert (trial.trial, trial.attempt, trial.job_name, trial.training_job_name) == (2, 1, JOB_NAME, TRAINING_JOB_NAME)
    assert (trial.status, trial.secondary_status, trial.billable_seconds, trial.queue.status) == (
        "InProgress",
        "Training",
        60,
        "RUNNING",
    )


def test_a_job_terminated_in_the_queue_is_a_trial_that_did_not_start_with_batchs_reason():
    reason = "Terminated by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
    terminated = service_job(status="FAILED", isTerminated=True, statusReason=reason, stoppedAt=millis(NOW))

    trial = queued_trial_view(terminated, None, NOW, [])

    assert (trial.status, trial.failure_reason, trial.ended) == ("NotStarted", reason, NOW.isoformat(timespec="seconds"))


# -- what runs, status and stop print -------------------------------------------------------------
def test_runs_lists_a_queued_trial_with_its_batch_state_share_priority_and_position():
    trial = queued_trial_view(service_job("job-1"), None, NOW, front("job-0", "job-5", "job-1"))

    assert "Queued (RUNNABLE, share research, priority 9000, position 3)" in printed(runs_table([run_of(trial)]))


def test_status_shows_the_team_queue_column_and_that_batch_has_not_created_the_training_job_yet():
    waiting = service_job("job-1", statusReason="CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Unable to provision")
    trial = queued_trial_view(waiting, None, NOW, front("job-1"))

    shown = " ".join(printed(status_view(run_of(trial))).split())

    assert "team queue" in shown and "RUNNABLE, share research, priority 9000, position 1" in shown
    assert f"{JOB_NAME}: service job job-1, training job none yet" in shown
    assert f"{JOB_NAME}: waiting: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY" in shown
    assert "#/jobs/" not in shown  # no console link to a training job that does not exist


def test_status_of_a_direct_run_has_no_team_queue_column():
    direct = {"TrainingJobName": "trainstack-gpt-0123456789ab", "TrainingJobStatus": "InProgress", "ResourceConfig": {}}
    assert "team queue" not in printed(status_view(run_of(trial_view(direct, NOW))))


def test_a_runs_live_line_says_where_its_job_waits_in_the_queue():
    trial = queued_trial_view(service_job("job-1"), None, NOW, front("job-4", "job-1"))

    assert live_line(run_of(trial)).plain.endswith(f"{JOB_NAME} Queued: RUNNABLE, share research, priority 9000, position 2")


def test_stop_says_which_queued_jobs_it_terminated_and_where_they_stood():
    was = service_job_view(service_job("job-1"), front("job-1"), NOW)
    stopped = StopView(run_of(), [was])

    shown = " ".join(printed(stopped_view(stopped)).split())

    assert (
        f"terminated {JOB_NAME} in the team queue (service job job-1, was RUNNABLE, share research, priority 9000, position 1)"
        in shown
    )
    assert stopped.to_json()["terminated"][0]["service_job_id"] == "job-1"


# -- the queue by share ---------------------------------------------------------------------------
def test_the_queue_lists_every_declared_share_in_order_then_any_other_a_job_names():
    jobs = [service_job("a", shareIdentifier="prod"), service_job("b", shareIdentifier="legacy")]

    view = queue_view(QUEUE_ARN, ("research", "prod"), 8, jobs, snapshot("a", "b"), NOW)

    assert [(s.share, [j.service_job_id for j in s.jobs]) for s in view.shares] == [
        ("research", []),
        ("prod", ["a"]),
        ("legacy", ["b"]),
    ]


def test_a_shares_jobs_are_listed_running_first_then_in_dispatch_order_then_those_not_yet_runnable():
    jobs = [
        service_job("submitted", status="SUBMITTED"),
        service_job("second", schedulingPriority=9999),
        service_job("running", status="RUNNING"),
        service_job("first", schedulingPriority=0),
    ]

    (share,) = queue_view(QUEUE_ARN, ("research",), 8, jobs, snapshot("first", "second"), NOW).shares

    assert [j.service_job_id for j in share.jobs] == ["running", "first", "second", "submitted"]


def test_the_queue_shows_each_shares_and_the_queues_capacity_in_use_from_the_snapshot():
    view = queue_view(QUEUE_ARN, ("research", "prod"), 8, [], snapshot(usage={"research": 6, "prod": 2}), NOW)

    assert [s.capacity_in_use for s in view.shares] == [{"NUM_INSTANCES": 6}, {"NUM_INSTANCES": 2}]
    assert (view.name, view.capacity_in_use, view.active_shares) == ("trainstack-queue", {"NUM_INSTANCES": 8}, 2)


def test_the_queue_prints_a_table_per_share_and_one_line_for_a_share_with_no_active_jobs():
    jobs = [service_job("job-1"), service_job("job-2", status="RUNNING", jobName="trainstack-bert-0123456789ab")]
    view = queue_view(QUEUE_ARN, ("research", "prod"), 8, jobs, snapshot("job-1", usage={"research": 2}), NOW)

    shown = printed(queue_table(view))

    assert "queue trainstack-queue  in use: 2 instances, at most 8 instances  active shares: 1" in shown
    assert "share research: 2 instances in use" in shown and "share prod: nothing in use, no active jobs" in shown
    (waiting,) = [line for line in shown.splitlines() if JOB_NAME in line]
    assert all(cell in waiting for cell in ("RUNNABLE", "9000", "2 x ml.p4d.24xlarge", "5m00s"))
    assert waiting.split("│")[5].strip() == "1"  # the position column


def test_queue_on_a_stack_without_a_team_queue_says_how_to_enable_it_in_one_line(tmp_path, capsys):
    outputs = {"trainstack": STACK_OUTPUTS}
    (tmp_path / "cdk-outputs.json").write_text(json.dumps(outputs))

    code = main(["queue", "--outputs", str(tmp_path / "cdk-outputs.json"), "--region", "us-east-1"])

    error = capsys.readouterr().err
    assert code == 3 and len(error.strip().splitlines()) == 1
    assert "stack trainstack has no team queue" in error and "-c queue=true" in error


@pytest.mark.parametrize("status", ["SUBMITTED", "PENDING"])
def test_a_job_not_yet_runnable_waits_without_a_position(status):
    trial = queued_trial_view(service_job("job-1", status=status), None, NOW, front("job-1"))

    assert (trial.status, trial.secondary_status, trial.queue.place) == (QUEUED_STATUS, status, "-")


# -- against the twin: the pipeline submits to the emulated queue, the CLI reads it back ------------
# The commands' own functions (submit.py, run_reading.py, logs.py, stop.py, queue_reading.py), called
# in this process where moto answers: the emulated functions redirect the process's stdout into their
# logs while they run, so what `main` prints here could land in a function's log; the views print
# what these functions return (tested above).
SHARES = "research:1,prod:1"  # as `-c queue_shares=...` gives them: in this order, research the default
DATA = "s3://trainstack-local-trigger/datasets/{team}/sample/"  # each team's jobs read its own folder
LONG = {"model": "gpt-tiny", "max_steps": 100_000, "log_every": 1, "seed": 0}  # trains until stopped


@dataclass
class QueueStack:
    """The emulated stack with a team queue of one instance, as the CLI finds it from its outputs."""

    stack: Stack

    def submit(self, tmp_path: Path, name: str, hyperparameters: dict | None = None, **queue: Any) -> str:
        """`trainstack submit SPEC --inline --team SHARE` of a one-instance spec with `queue`, as the team of
        its share (the default one's without); the run's name."""
        team = queue.get("share") or self.stack.context.default_team
        spec = {
            "name": name,
            "instance_type": "ml.g5.12xlarge",
            "strategy": "ddp",
            "framework_version": "2.10.0",
            "hyperparameters": hyperparameters or LONG,
            "inputs": {"train": {"s3_uri": DATA.format(team=team), "mode": "File"}},
            "max_runtime": "1h",
            "queue": queue,
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return submit(self.stack, path, inline=True, team=team)

    def trial(self, run: str, done: Callable[[TrialView], bool], timeout: float = 120) -> TrialView:
        """The run's one trial once `done` holds for it, as `trainstack status` reads it."""
        view = poll_until(
            lambda: read_run(self.stack, run), lambda v: len(v.trials) == 1 and done(v.trials[0]), timeout=timeout,
            interval=0.5, what=f"the trial of run {run} to get there",
        )  # fmt: skip
        return view.trials[0]


def batch_status(trial: TrialView) -> str:
    return trial.queue.status if trial.queue else ""


@pytest.fixture
def team_queue(tmp_path):
    """A fresh emulated stack for each test: what one test leaves in the queue never orders another's jobs."""
    synthesized = synthesize(queue=True, queue_max_instances=1, queue_shares=SHARES)
    with local_aws(synthesized.json, tmp_path / "twin", files=training_files(tmp_path)) as (local, _twin):
        upload_sample_data(local)
        outputs = tmp_path / "cdk-outputs.json"
        outputs.write_text(json.dumps({"trainstack-local": local.outputs}))
        yield QueueStack(find_stack(None, outputs, None, REGION))


def running_blocker(team_queue: QueueStack, tmp_path: Path, share: str = "research") -> tuple[str, TrialView]:
    """A run whose job holds the queue's one instance until it is stopped."""
    run = team_queue.submit(tmp_path, "blocker", share=share)
    return run, team_queue.trial(run, lambda t: batch_status(t) == "RUNNING")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_status_and_runs_show_a_queued_trial_with_its_batch_state_share_priority_and_position(team_queue, tmp_path):
    _, running = running_blocker(team_queue, tmp_path)
    waiting = team_queue.submit(tmp_path, "waiting", share="research", priority=9000)

    trial = team_queue.trial(waiting, lambda t: batch_status(t) == "RUNNABLE")

    assert (trial.status, trial.secondary_status, trial.training_job_name) == (QUEUED_STATUS, "RUNNABLE", "")
    assert (trial.queue.share, trial.queue.priority, trial.queue.position) == ("research", 9000, 1)
    runs = list_runs(team_queue.stack, 10)
    (listed,) = [run for run in runs if run.name == waiting]
    assert listed.to_json()["trials"][0]["queue"]["position"] == 1
    assert "Queued (RUNNABLE, share research, priority 9000, position 1)" in " ".join(printed(runs_table(runs)).split())
    # the dispatched job: trainstack's name, read through the training job Batch created under its own
    assert running.training_job_name.startswith(f"AWSBatch{running.job_name}")
    assert (running.status, running.trial, running.queue.position) == ("InProgress", 0, None)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_logs_of_a_queued_run_wait_for_dispatch_then_come_from_the_training_job_batch_created(team_queue, tmp_path):
    blocker, _ = running_blocker(team_queue, tmp_path)
    short = {"model": "gpt-tiny", "max_steps": 6, "log_every": 2, "seed": 0}
    run = team_queue.submit(tmp_path, "short", short, share="research")
    team_queue.trial(run, lambda t: batch_status(t) == "RUNNABLE")

    with pytest.raises(CliError) as queued:
        list(follow_logs(team_queue.stack, run, None, None, follow=False))
    with ThreadPoolExecutor(1) as pool:  # `logs --follow` started while the job waits
        following = pool.submit(lambda: list(follow_logs(team_queue.stack, run, None, None, follow=True, interval=0.5)))
        stop(team_queue.stack, blocker)
        trial = team_queue.trial(run, lambda t: (t.status, t.queue.status) == ("Completed", "SUCCEEDED"), timeout=300)
        followed = [line.message for line in following.result(timeout=60)]

    assert queued.value.exit_code == EXIT_UNKNOWN_RUN and "\n" not in str(queued.value)
    assert "waits in the team queue (RUNNABLE, share research, position 1)" in str(queued.value)
    logs = [line.message for line in follow_logs(team_queue.stack, run, None, None, follow=False)]
    assert [line.split()[0] for line in logs if line.startswith("step=")] == ["step=2", "step=4", "step=6"]
    assert followed == logs
    assert trial.metrics["train:step"] == 6 and trial.billable_seconds >= 1  # metrics from the AWSBatch job's log
    assert trial.training_job_name.startswith("AWSBatch")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stop_terminates_a_queued_runs_service_job_so_it_never_gets_a_training_job(team_queue, tmp_path):
    running_blocker(team_queue, tmp_path)
    waiting = team_queue.submit(tmp_path, "waiting", share="research")
    queued = team_queue.trial(waiting, lambda t: batch_status(t) == "RUNNABLE")

    stopped = stop(team_queue.stack, waiting)

    (terminated,) = stopped.terminated
    assert (terminated.job_name, terminated.status, terminated.position) == (queued.job_name, "RUNNABLE", 1)
    (trial,) = stopped.run.trials
    assert (stopped.run.status, trial.status, trial.training_job_name) == ("ABORTED", "NotStarted", "")
    batch = boto3.client("batch", region_name=REGION)
    assert batch.describe_service_job(jobId=terminated.service_job_id).get("isTerminated") is True
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    assert sagemaker.list_training_jobs(NameContains=queued.job_name)["TrainingJobSummaries"] == []  # never dispatched
    said = " ".join(printed(stopped_view(stopped)).split())
    assert f"terminated {queued.job_name} in the team queue (service job {terminated.service_job_id}, was RUNNABLE" in said


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stop_terminates_a_dispatched_queued_job_and_batch_stops_its_training_job(team_queue, tmp_path):
    blocker, running = running_blocker(team_queue, tmp_path)

    stopped = stop(team_queue.stack, blocker)

    (terminated,) = stopped.terminated
    assert (terminated.job_name, terminated.status) == (running.job_name, "RUNNING")
    (trial,) = stopped.run.trials
    assert (trial.status, trial.training_job_name, trial.queue.status) == ("Stopped", running.training_job_name, "FAILED")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_queue_lists_each_shares_jobs_in_dispatch_order_with_the_capacity_each_share_uses(team_queue, tmp_path):
    _, running = running_blocker(team_queue, tmp_path, share="research")
    researching = team_queue.submit(tmp_path, "later", share="research", priority=9999)
    producing = team_queue.submit(tmp_path, "sooner", share="prod")
    for run in (researching, producing):
        team_queue.trial(run, lambda t: batch_status(t) == "RUNNABLE")

    view = read_queue(team_queue.stack)

    shares = {share.share: share for share in view.shares}
    assert list(shares) == ["research", "prod"]
    # research uses the one instance, so prod's job goes next, whatever the priority of research's
    assert [(j.job_name.split("-")[1], j.status, j.position) for j in shares["research"].jobs] == [
        ("blocker", "RUNNING", None),
        ("later", "RUNNABLE", 2),
    ]
    assert [(j.job_name.split("-")[1], j.position, j.instances) for j in shares["prod"].jobs] == [("sooner", 1, 1)]
    assert (shares["research"].capacity_in_use, shares["prod"].capacity_in_use, view.max_instances) == (
        {"NUM_INSTANCES": 1.0},
        {},
        1,
    )
    shown = printed(queue_table(view))
    assert "share research: 1 instance in use" in shown and running.job_name in shown and "share prod: nothing in use" in shown


def test_a_job_terminated_in_the_queue_after_a_capacity_failure_did_not_start_either():
    reason = "Terminated by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
    terminated = service_job(status="FAILED", isTerminated=True, statusReason=reason, stoppedAt=millis(NOW))
    capacity_failed = {
        "TrainingJobName": "AWSBatchtrainstack-x88b610a69aa8380ca5b0a7aba3f81cb8",
        "TrainingJobStatus": "Failed",
        "FailureReason": "CapacityError: Unable to provision requested ML compute capacity.",
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
    }

    trial = queued_trial_view(terminated, capacity_failed, NOW, [])

    assert (trial.status, trial.failure_reason) == ("NotStarted", reason)
