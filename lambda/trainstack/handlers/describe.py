"""Describe: the job's status and how long to wait before asking again; for a job that ended, the
attempt's record and whether to create the trial's job again (a capacity failure, or a failure that
is not the user's under the spec's `restarts`), after `retry_wait_seconds`.

A job submitted to the team queue (`service_job_id`) is followed through its service job: queued,
it has no training job yet; dispatched, Batch's own training job (named AWSBatch...) says how it
runs. The service job says when it ended: Batch puts a job that failed for capacity back in the
queue itself, so the pipeline re-creates nothing for capacity there. A job Batch preempted (its
training job stopped, the service job requeued, `preemptionSummary`) is a preemption, not a failure:
it resumes from its checkpoint when Batch dispatches it again, spends no restart, and once the
service job ends each preempted attempt gets a record of its own (restarts.PREEMPTED).

A call that fails for the service's sake (throttled, timed out, a 5xx: `is_control_plane_error`)
says nothing of the job: the answer is the status Unknown, and the loop asks again at its next poll.
Only the job's own status ends a trial (SkyPilot #10155: status-fetch timeouts read as failures
recovered a healthy job 24 times in 19 hours)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from trainstack.errors import ControlPlaneError
from trainstack.failures import Failure
from trainstack.handlers.environment import client, control_plane_retried, environment
from trainstack.restarts import (
    CAPACITY_RETRY,
    PREEMPTED,
    PREEMPTION,
    REASON_CHARS,
    RESTART,
    RestartPolicy,
    after_job,
    attempt_record,
    decided,
)
from trainstack.service_jobs import FINAL, QUEUED, ended_in_queue, preempted_training_jobs, training_job_name
from trainstack.workflow import (
    CAPACITY_RETRIES,
    ENDED,
    NOT_STARTED,
    UNKNOWN,
    capacity_wait_seconds,
    next_poll_seconds,
    restart_wait_seconds,
    summary,
)


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    service_job_id = event.get("service_job_id", "")
    env = environment()
    attempts = event.get("attempts", [])
    waiting_since = None  # a direct job waits from its creation
    try:
        if service_job_id:
            description, result, service_job = _queued(event["job_name"], service_job_id)
            if "createdAt" in service_job:  # its submission to the queue
                waiting_since = datetime.fromtimestamp(service_job["createdAt"] / 1000, UTC)
            if result["status"] in (*ENDED, NOT_STARTED):
                attempts = _preempted(event["job_name"], service_job, attempts, waiting_since)
        else:
            with control_plane_retried("DescribeTrainingJob"):
                description = client("sagemaker").describe_training_job(TrainingJobName=event["job_name"])
            result = summary(description)
    except ControlPlaneError as error:
        return _unknown(event, service_job_id, str(error))
    answer = {
        **result,
        "service_job_id": service_job_id,
        "poll_seconds": next_poll_seconds(event.get("poll_seconds"), env.first_poll_seconds, env.max_poll_seconds),
        "retry": False,
        "restart": False,
        "attempts": attempts,
    }
    if result["status"] not in (*ENDED, NOT_STARTED):
        return answer
    policy = RestartPolicy.from_spec_json(event["restarts"]) if "restarts" in event else RestartPolicy(0, (), (), 0)
    elapsed = (datetime.now(UTC) - _started(event)).total_seconds()
    capacity_retries = 0 if service_job_id else CAPACITY_RETRIES
    answer.update(after_job(description, result, policy, attempts, elapsed, capacity_retries, waiting_since))
    if answer["restart"]:
        answer["retry_wait_seconds"] = restart_wait_seconds(decided(attempts, RESTART), env.first_poll_seconds)
    elif answer["retry"]:
        # 5, 10, 20 minutes; local mode scales it with its shortened poll interval
        answer["retry_wait_seconds"] = capacity_wait_seconds(decided(attempts, CAPACITY_RETRY), env.first_poll_seconds * 5)
    return answer


def _queued(job_name: str, service_job_id: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The training job's description (empty while none was created), the trial's summary and the
    service job, for a job in the team queue: `job_name` stays trainstack's, `training_job_name` is
    Batch's."""
    with control_plane_retried("DescribeServiceJob"):
        service_job = client("batch").describe_service_job(jobId=service_job_id)
    status = service_job["status"]
    training_job = training_job_name(service_job)
    description = _dispatched(job_name, training_job, waiting=status not in FINAL) if training_job else {}
    result = summary(description or {"TrainingJobName": job_name, "TrainingJobStatus": NOT_STARTED})
    if status not in FINAL and (not description or result["status"] in ENDED):
        # Queued; or dispatched, and its training job ended while the service job did not: Batch is
        # ending it, or requeues it (capacity). Either way the trial waits on the service job.
        result["status"] = "InProgress"
        result["secondary_status"] = f"Queued ({status})" if status in QUEUED else f"Service job {status}"
        result["failure_reason"] = service_job.get("statusReason", "")
    elif ended_in_queue(service_job, description.get("TrainingJobStatus")):
        result["status"] = NOT_STARTED
        result["failure_reason"] = service_job.get("statusReason", "")
    elif service_job.get("isTerminated") and not result["failure_reason"]:
        result["failure_reason"] = service_job.get("statusReason", "")  # ended by Batch: its preemption retries spent
    preemptions = (service_job.get("preemptionSummary") or {}).get("preemptedAttemptCount", 0)
    return (
        description,
        {
            **result,
            "job_name": job_name,
            "training_job_name": training_job,
            "queue": {
                "status": status,
                "share": service_job.get("shareIdentifier", ""),
                "priority": service_job.get("schedulingPriority", 0),
                "preemptions": preemptions,
            },
        },
        service_job,
    )


def _preempted(
    job_name: str, service_job: dict[str, Any], attempts: list[dict[str, Any]], waiting_since: datetime | None
) -> list[dict[str, Any]]:
    """The trial's attempts with a record for each training job Batch preempted in this service job,
    oldest first (those DescribeServiceJob's preemptionSummary still lists), read once the service
    job has ended: each resumed from the one before and waited for the queue from its end."""
    latest = training_job_name(service_job)
    for training_job, reason in preempted_training_jobs(service_job):
        if training_job == latest:  # the last one, its preemption retries spent: the trial's end, recorded by after_job
            continue
        with control_plane_retried("DescribeTrainingJob"):
            description = client("sagemaker").describe_training_job(TrainingJobName=training_job)
        preempted = Failure(PREEMPTION, "preempted by Batch for another job")
        record = attempt_record(
            description,
            {**summary(description), "job_name": job_name, "training_job_name": training_job, "failure_reason": reason},
            preempted,
            f"{PREEMPTED}: requeued, resumes from its checkpoint",
            previous=attempts[-1] if attempts else None,
            followed=True,
            waiting_since=waiting_since,
        )
        record["reason"] = reason[:REASON_CHARS]
        attempts = [*attempts, record]
    return attempts


def _dispatched(job_name: str, training_job: str, waiting: bool) -> dict[str, Any]:
    """DescribeTrainingJob of the job Batch created; {} for one it created a moment ago that SageMaker
    does not describe yet (`waiting`: the service job has not ended), as the next poll will."""
    try:
        with control_plane_retried("DescribeTrainingJob"):
            return client("sagemaker").describe_training_job(TrainingJobName=training_job)
    except ClientError as error:
        if waiting and error.response["Error"]["Code"] == "ValidationException":
            return {}
        raise


def _unknown(event: dict[str, Any], service_job_id: str, reason: str) -> dict[str, Any]:
    """The answer when the job's status could not be read: Unknown, asked again after the same wait
    (the job's last known state stands; nothing is decided on no news)."""
    env = environment()
    return {
        "job_name": event["job_name"],
        "status": UNKNOWN,
        "secondary_status": f"not read: {reason}",
        "failure_reason": "",
        "service_job_id": service_job_id,
        "poll_seconds": event.get("poll_seconds") or env.first_poll_seconds,
        "retry": False,
        "restart": False,
        "attempts": event.get("attempts", []),
    }


def _started(event: dict[str, Any]) -> datetime:
    """When the run started (`$$.Execution.StartTime`, ISO 8601 in UTC); now, for an event without it."""
    if "run_started" not in event:
        return datetime.now(UTC)
    started = datetime.fromisoformat(event["run_started"])
    return started if started.tzinfo else started.replace(tzinfo=UTC)
