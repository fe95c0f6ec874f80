"""Describe and Notify for a queued job Batch preempted: the preemption is an attempt of its own, not
a failure and not a restart; the next attempt resumes from its checkpoint; the run reports it, and
its goodput counts the steps it trained again. Asserted with botocore's Stubber on the exact calls
(the twin runs it end to end: tests/cli/test_rehearsal_served.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.core.stubbed import stubbed_clients
from tests.core.test_queue_handlers import ENVIRONMENT, _service_job
from trainstack.handlers import describe, notify
from trainstack.restarts import PREEMPTED, PREEMPTION

SUBMITTED = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
FIRST, SECOND = "AWSBatchtrainstack-x" + "a" * 32, "AWSBatchtrainstack-x" + "b" * 32
RESTARTS = {"max": 3, "on": ["infrastructure"], "exit_codes": [], "within": 172800}
REASON = "Preempted: a job of quota share prod needed its instances"


@pytest.fixture
def stubbed(monkeypatch):
    with stubbed_clients(monkeypatch, ENVIRONMENT, ("sagemaker", "batch", "sns")) as stubbers:
        yield stubbers


def _arn(name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}"


def _trained(name: str, status: str, start: int, end: int, metrics: dict[str, float]) -> dict:
    """A training job Batch created, `start` to `end` minutes after the submission: one minute
    downloading, then training, then a minute stopping or uploading."""
    at = [SUBMITTED + timedelta(minutes=m) for m in (start, start + 1, end - 1, end)]
    return {
        "TrainingJobName": name,
        "TrainingJobArn": _arn(name),
        "TrainingJobStatus": status,
        "SecondaryStatus": status,
        "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "ModelArtifacts": {"S3ModelArtifacts": ""},
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "CreationTime": at[0],
        "TrainingStartTime": at[0],
        "TrainingEndTime": at[3],
        "BillableTimeInSeconds": (end - start) * 60,
        "SecondaryStatusTransitions": [
            {"Status": "Downloading", "StartTime": at[0], "EndTime": at[1]},
            {"Status": "Training", "StartTime": at[1], "EndTime": at[2]},
            {"Status": "Stopping" if status == "Stopped" else "Uploading", "StartTime": at[2], "EndTime": at[3]},
        ],
        "FinalMetricDataList": [{"MetricName": n, "Value": v, "Timestamp": at[3]} for n, v in metrics.items()],
    }


# Preempted after 10 minutes at step 250 (newest checkpoint 200); requeued 5 minutes; then 20 minutes to step 1,000.
PREEMPTED_JOB = _trained(FIRST, "Stopped", 0, 10, {"train:step": 250, "train:checkpoint_step": 200, "train:step_time": 1.5})
RESUMED_JOB = _trained(SECOND, "Completed", 15, 35, {"train:step": 1000, "train:checkpoint_step": 1000, "train:step_time": 1.0})
PREEMPTION_SUMMARY = {
    "preemptedAttemptCount": 1,
    "recentPreemptedAttempts": [{"serviceResourceId": {"name": "TrainingJobArn", "value": _arn(FIRST)}, "statusReason": REASON}],
}


def _describe(stubbed, status: str, training: dict, preempted: dict | None = None) -> dict:
    """Describe of the service job, its latest training job, then (once it ended) the one Batch preempted."""
    service = _service_job(status, training["TrainingJobName"], createdAt=int(SUBMITTED.timestamp() * 1000))
    service["preemptionSummary"] = PREEMPTION_SUMMARY
    stubbed["batch"].add_response("describe_service_job", service, {"jobId": "job-1"})
    for job in (training, preempted) if preempted else (training,):
        stubbed["sagemaker"].add_response("describe_training_job", job, {"TrainingJobName": job["TrainingJobName"]})
    event = {"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60, "attempts": []}
    return describe.handler({**event, "restarts": RESTARTS, "run_started": SUBMITTED.isoformat()})


def test_describe_of_a_running_job_batch_preempted_counts_the_preemption_and_decides_nothing(stubbed):
    running = {**RESUMED_JOB, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Training"}
    result = _describe(stubbed, "RUNNING", running)
    assert (result["status"], result["queue"]["preemptions"]) == ("InProgress", 1)
    assert (result["retry"], result["restart"], result["attempts"]) == (False, False, [])


def test_a_preempted_attempt_is_recorded_once_the_job_ends_and_the_next_resumed_from_its_checkpoint(stubbed):
    result = _describe(stubbed, "SUCCEEDED", RESUMED_JOB, PREEMPTED_JOB)

    preempted, resumed = result["attempts"]
    assert (result["status"], result["retry"], result["restart"]) == ("Completed", False, False)
    assert (
        preempted["job_name"],
        preempted["training_job_name"],
        preempted["status"],
        preempted["kind"],
        preempted["reason"],
    ) == (
        "trainstack-x",
        FIRST,
        "Stopped",
        PREEMPTION,
        REASON,
    )
    assert preempted["decision"].startswith(PREEMPTED) and not preempted["decision"].startswith("restart")
    assert (preempted["trained_to_step"], preempted["checkpoint_step"], preempted["steps_lost"]) == (250, 200, 50)
    assert (resumed["job_name"], resumed["training_job_name"], resumed["decision"], resumed["kind"]) == (
        "trainstack-x",
        SECOND,
        "",
        "",
    )
    # the preempted job's 50 lost steps (1.5 s, 2 instances) were trained again; the resumed job counts its 800 steps only
    assert preempted["account"]["retrained"] == 150 and preempted["account"]["productive"] == 600
    assert resumed["account"]["productive"] == 1600 and resumed["account"]["retrained"] == 0
    assert (preempted["account"]["waiting"], resumed["account"]["waiting"]) == (0, 2 * 5 * 60)  # the requeued wait


def test_notify_reports_one_preemption_no_failure_and_no_restart_with_the_runs_goodput(stubbed, capsys):
    trial = _describe(stubbed, "SUCCEEDED", RESUMED_JOB, PREEMPTED_JOB)
    sent: dict = {}
    stubbed["sns"].add_response("publish", {"MessageId": "1"})
    stubbed["sns"].client.meta.events.register("provide-client-params.sns.Publish", lambda params, **_: sent.update(params))

    outcome = notify.handler({"results": [trial]})

    message = json.loads(sent["Message"])
    (reported,) = message["trials"]
    assert outcome["status"] == "Completed" and outcome["notified"]
    assert (reported["status"], reported["preemptions"], reported["restarts"], reported["steps_lost"]) == ("Completed", 1, 0, 50)
    assert reported["reason"].startswith(
        f"attempt 1 (preempted by Batch, no failure): {REASON}; attempt 2 (no failure, Completed)"
    )
    billed = (10 + 20) * 60 * 2
    assert reported["goodput"]["instance_seconds"]["billed"] == message["goodput"]["instance_seconds"]["billed"] == billed
    assert message["goodput"]["goodput"] == pytest.approx((600 + 1600) / billed, abs=1e-4)
    lines = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    (preemptions,) = [line for line in lines if line.get("FailureKind") == PREEMPTION]
    (times,) = [line for line in lines if "ProductiveInstanceSeconds" in line]
    assert (preemptions["Restarts"], preemptions["StepsLost"]) == (1, 50)
    assert (times["BilledInstanceSeconds"], times["ProductiveInstanceSeconds"], times["RetrainedInstanceSeconds"]) == (
        billed,
        2200,
        150,
    )
