"""Create, Describe and Stop for a spec with `queue`: the calls to AWS Batch's service-job API, asserted
with botocore's Stubber on the exact calls (the twin runs them end to end: tests/local/test_queue_end_to_end.py)."""

from __future__ import annotations

import json

import botocore.session
import pytest
from botocore.stub import ANY, Stubber
from botocore.validate import ParamValidator

from tests.core.specs import DDP
from tests.core.stubbed import ENVIRONMENT as STACK_ENVIRONMENT
from tests.core.stubbed import stubbed_clients
from trainstack.errors import ControlPlaneError
from trainstack.handlers import create, describe, notify, stop
from trainstack.handlers.environment import environment
from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import check_or_raise
from trainstack.spec import parse_spec

QUEUE_ARN = "arn:aws:batch:us-east-1:123456789012:job-queue/trainstack-queue"
ENVIRONMENT = {
    **STACK_ENVIRONMENT,
    "JOB_QUEUE_ARN": QUEUE_ARN,
    "QUEUE_SHARES": "research,prod",
    "QUEUE_DEFAULT_SHARE": "research",
    "QUEUE_MAX_INSTANCES": "4",
}
RUN = {"lineage": "s3://b/jobs/x.yaml#v1", "resume": None}
QUEUED_SPEC = {**DDP, "inputs": {}, "queue": {"share": "prod", "priority": 9000}}


@pytest.fixture
def stubbed(monkeypatch):
    with stubbed_clients(monkeypatch, ENVIRONMENT, ("sagemaker", "batch", "sns")) as stubbers:
        yield stubbers


TEAM = "prod"  # the run's team, as Validate found it (the spec was uploaded under jobs/prod/)


def _create_event(spec: dict = QUEUED_SPEC) -> dict:
    trial = {"index": 0, "hyperparameters": {}}
    return {"spec": spec, "run": RUN, "team": TEAM, "trial": trial, "trial_count": 1, "execution": "exec-1"}


def _request(spec: dict = QUEUED_SPEC) -> dict:
    parsed = parse_spec(spec)
    resolution = check_or_raise(parsed, stack=environment().stack)
    return build_request(parsed, resolution, environment().stack, trial=Run(**RUN).trial(), execution="exec-1", team=TEAM)


def _submit_once(batch: Stubber) -> list[dict]:
    """Create of the queued spec, with Batch listing no job of its name: the SubmitServiceJob arguments it sent."""
    submitted: list[dict] = []

    def sent(params: dict, **_) -> None:
        submitted.append(dict(params))

    batch.add_response("list_service_jobs", {"jobSummaryList": []})
    batch.add_response("submit_service_job", {"jobName": _request()["TrainingJobName"], "jobId": "job-1"})
    batch.client.meta.events.register("provide-client-params.batch.SubmitServiceJob", sent)
    try:
        create.handler(_create_event())
    finally:
        batch.client.meta.events.unregister("provide-client-params.batch.SubmitServiceJob", sent)
    return submitted


def _summary(name: str, job_id: str, status: str = "RUNNABLE") -> dict:
    return {"jobId": job_id, "jobName": name, "serviceJobType": "SAGEMAKER_TRAINING", "status": status}


def _service_job(status: str, training_job: str = "", **extra) -> dict:
    job = {
        "jobId": "job-1",
        "jobName": "trainstack-x",
        "jobQueue": QUEUE_ARN,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "startedAt": 0,
        "status": status,
        "shareIdentifier": "prod",
        "schedulingPriority": 9000,
        **extra,
    }
    if training_job:
        arn = f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{training_job}"
        job["latestAttempt"] = {"serviceResourceId": {"name": "TrainingJobArn", "value": arn}}
    return job


def _training_job(name: str, status: str, reason: str = "") -> dict:
    return {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:1:training-job/{name}",
        "TrainingJobStatus": status,
        "SecondaryStatus": "Training" if status == "InProgress" else status,
        "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "ModelArtifacts": {"S3ModelArtifacts": ""},
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "CreationTime": "2026-01-01",
        **({"FailureReason": reason} if reason else {}),
    }


def test_create_submits_the_request_it_would_create_as_the_service_jobs_payload_byte_for_byte(stubbed):
    request = _request()
    name = request["TrainingJobName"]
    stubbed["batch"].add_response("list_service_jobs", {"jobSummaryList": []}, {"jobQueue": QUEUE_ARN, "filters": ANY})
    expected = {
        "jobName": name,
        "jobQueue": QUEUE_ARN,
        "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": json.dumps(request),
        "shareIdentifier": "prod",
        "schedulingPriority": 9000,
        "clientToken": name,
        "tags": {tag["Key"]: tag["Value"] for tag in request["Tags"]},
    }
    stubbed["batch"].add_response("submit_service_job", {"jobName": name, "jobId": "job-1"}, expected)
    result = create.handler(_create_event())
    assert result["service_job_id"] == "job-1" and result["created"] is True and result["job_name"] == name


def test_the_submitted_payload_is_a_request_createtrainingjob_accepts_tags_included(stubbed):
    (submitted,) = _submit_once(stubbed["batch"])
    payload = json.loads(submitted["serviceRequestPayload"])  # what Batch hands CreateTrainingJob unchanged
    create_training_job = botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob")
    report = ParamValidator().validate(payload, create_training_job.input_shape)
    assert not report.has_errors(), report.generate_report()
    assert payload["Tags"] == [{"Key": key, "Value": value} for key, value in submitted["tags"].items()]  # unlike the SDK's


def test_create_polls_the_queued_job_of_the_same_name_on_redelivery(stubbed):
    name = _request()["TrainingJobName"]
    listed = [_summary(name.upper(), "other-case"), _summary(name, "job-1")]  # the filter ignores case
    stubbed["batch"].add_response(
        "list_service_jobs",
        {"jobSummaryList": listed},
        {"jobQueue": QUEUE_ARN, "filters": [{"name": "JOB_NAME", "values": [name]}]},
    )
    result = create.handler(_create_event())  # the stub refuses any submit_service_job
    assert result["service_job_id"] == "job-1" and result["created"] is False


def test_a_redelivered_create_that_finds_no_job_yet_resubmits_the_identical_request_under_the_same_client_token(stubbed):
    # Batch's SubmitServiceJob (botocore's model, clientToken): "two submit requests with identical payloads
    # and clientTokens ... are considered the same request and the second request is rejected". botocore
    # would fill a missing token with a fresh UUID (idempotencyToken), which no rejection would match.
    submitted = _submit_once(stubbed["batch"]) + _submit_once(stubbed["batch"])
    first, again = submitted
    assert "clientToken" in first and again == first


def test_create_whose_submission_batch_rejects_as_a_repeat_polls_the_first_submission(stubbed):
    name = _request()["TrainingJobName"]
    stubbed["batch"].add_response("list_service_jobs", {"jobSummaryList": []})  # the first is not listed yet
    stubbed["batch"].add_client_error(
        "submit_service_job", service_error_code="ClientException", service_message="Request rejected: repeated clientToken"
    )
    stubbed["batch"].add_response("list_service_jobs", {"jobSummaryList": [_summary(name, "job-1")]})
    assert create.handler(_create_event()) == {
        "job_name": name,
        "service_job_id": "job-1",
        "created": False,
        "poll_seconds": ANY,
    }


def test_create_submits_under_the_stacks_default_share_for_a_run_without_a_team(stubbed):
    spec = {**QUEUED_SPEC, "queue": {}}  # started before runs carried their team: the default team's
    name = _request(spec)["TrainingJobName"]
    stubbed["batch"].add_response("list_service_jobs", {"jobSummaryList": []})
    stubbed["batch"].add_response(
        "submit_service_job",
        {"jobName": name, "jobId": "job-2"},
        {**{key: ANY for key in ("jobName", "jobQueue", "serviceJobType", "serviceRequestPayload", "clientToken", "tags")},
         "shareIdentifier": "research", "schedulingPriority": 0},
    )  # fmt: skip
    event = {key: value for key, value in _create_event(spec).items() if key != "team"}
    assert create.handler(event)["service_job_id"] == "job-2"


def test_create_of_a_spec_without_queue_creates_the_training_job_and_names_no_service_job(stubbed):
    spec = {**DDP, "inputs": {}}
    stubbed["sagemaker"].add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/x"})
    assert create.handler(_create_event(spec))["service_job_id"] == ""


def test_describe_reports_a_queued_job_in_progress_with_its_state_share_and_priority(stubbed):
    stubbed["batch"].add_response("describe_service_job", _service_job("RUNNABLE"), {"jobId": "job-1"})
    result = describe.handler({"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60})
    assert (result["status"], result["secondary_status"]) == ("InProgress", "Queued (RUNNABLE)")
    assert result["queue"] == {"status": "RUNNABLE", "share": "prod", "priority": 9000, "preemptions": 0}
    assert result["training_job_name"] == "" and result["service_job_id"] == "job-1"


def test_describe_follows_a_dispatched_job_through_the_training_job_batch_created(stubbed):
    renamed = "AWSBatchtrainstack-x88b610a69aa8380ca5b0a7aba3f81cb8"
    stubbed["batch"].add_response("describe_service_job", _service_job("RUNNING", renamed))
    stubbed["sagemaker"].add_response("describe_training_job", _training_job(renamed, "InProgress"), {"TrainingJobName": renamed})
    result = describe.handler({"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60})
    assert (result["status"], result["secondary_status"]) == ("InProgress", "Training")
    assert (result["job_name"], result["training_job_name"]) == ("trainstack-x", renamed)


def test_describe_waits_on_a_job_batch_requeues_after_a_capacity_failure_and_recreates_nothing(stubbed):
    renamed = "AWSBatchtrainstack-x88b610a69aa8380ca5b0a7aba3f81cb8"
    stubbed["batch"].add_response("describe_service_job", _service_job("RUNNABLE", renamed))
    failed = _training_job(renamed, "Failed", "CapacityError: Unable to provision requested ML compute capacity.")
    stubbed["sagemaker"].add_response("describe_training_job", failed)
    result = describe.handler({"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60, "attempts": []})
    assert (result["status"], result["retry"], result["attempts"]) == ("InProgress", False, [])


def test_describe_reports_a_job_terminated_in_the_queue_not_started_with_batchs_reason(stubbed):
    reason = "Terminated by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
    stubbed["batch"].add_response("describe_service_job", _service_job("FAILED", isTerminated=True, statusReason=reason))
    result = describe.handler({"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60, "attempts": []})
    assert (result["status"], result["failure_reason"], result["retry"]) == ("NotStarted", reason, False)
    assert result["attempts"][0]["status"] == "NotStarted"


def test_describe_restarts_a_queued_job_whose_training_failed_not_for_the_users_reasons(stubbed):
    renamed = "AWSBatchtrainstack-x88b610a69aa8380ca5b0a7aba3f81cb8"
    stubbed["batch"].add_response("describe_service_job", _service_job("FAILED", renamed))
    failed = _training_job(renamed, "Failed", "AlgorithmError: rank 1: StepTimeout: no optimizer step completed for 312 s")
    stubbed["sagemaker"].add_response("describe_training_job", failed)
    restarts = {"max": 3, "on": ["infrastructure"], "exit_codes": [], "within": 172800}
    event = {"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60, "attempts": [], "restarts": restarts}
    result = describe.handler(event)  # the restart's new attempt is a new service job (Create, attempt + 1)
    assert (result["status"], result["restart"]) == ("Failed", True)


def test_stop_terminates_this_runs_service_jobs_and_leaves_other_runs_and_executions(stubbed):
    digest = Run("s3://b/jobs/x.yaml#v1").digest
    ours, theirs, other_run = f"trainstack-x-{digest}", f"trainstack-x-{digest}-a1", "trainstack-x-0123456789ab"
    ended = f"trainstack-x-{digest}-a2"
    stubbed["sagemaker"].add_response("list_training_jobs", {"TrainingJobSummaries": []})
    # One listing by the stack's name prefix spans every status: a job Batch moves from RUNNING back to
    # RUNNABLE while it is read is listed once, never missed between two per-status listings.
    listed = [
        _summary(ours, "job-1", "RUNNING"),
        _summary(theirs, "job-2"),
        _summary(other_run, "job-3"),
        _summary(ended, "job-4", "SUCCEEDED"),
    ]
    stubbed["batch"].add_response(
        "list_service_jobs",
        {"jobSummaryList": listed},
        {"jobQueue": QUEUE_ARN, "filters": [{"name": "JOB_NAME", "values": ["trainstack-*"]}]},
    )
    stubbed["batch"].add_response(
        "describe_service_job", _service_job("RUNNING", jobName=ours, tags={"trainstack:execution": "exec-1"})
    )
    stubbed["batch"].add_response(
        "describe_service_job", _service_job("RUNNABLE", jobName=theirs, tags={"trainstack:execution": "other"})
    )
    stubbed["batch"].add_response("terminate_service_job", {}, {"jobId": "job-1", "reason": "exec-1 ABORTED"})
    event_input = {"detail": {"bucket": {"name": "b"}, "object": {"key": "jobs/x.yaml", "version-id": "v1"}}}
    result = stop.handler({"detail": {"input": json.dumps(event_input), "name": "exec-1", "status": "ABORTED"}})
    assert result["stopped"] == [ours]


def test_stop_passes_over_a_job_that_ended_between_the_listing_and_its_termination(stubbed):
    digest = Run("s3://b/jobs/x.yaml#v1").digest
    stubbed["sagemaker"].add_response("list_training_jobs", {"TrainingJobSummaries": []})
    stubbed["batch"].add_response("list_service_jobs", {"jobSummaryList": [_summary(f"trainstack-x-{digest}", "job-1")]})
    stubbed["batch"].add_response("describe_service_job", _service_job("RUNNABLE", tags={"trainstack:execution": "exec-1"}))
    stubbed["batch"].add_client_error("terminate_service_job", service_error_code="ClientException", service_message="ended")
    stubbed["batch"].add_response("describe_service_job", _service_job("FAILED"))
    event_input = {"detail": {"bucket": {"name": "b"}, "object": {"key": "jobs/x.yaml", "version-id": "v1"}}}
    assert stop.handler({"detail": {"input": json.dumps(event_input), "name": "exec-1", "status": "ABORTED"}})["stopped"] == []


def test_the_queued_payload_is_what_create_sends_createtrainingjob_for_the_same_spec_without_queue(stubbed):
    sent = {}
    sagemaker = stubbed["sagemaker"]
    sagemaker.client.meta.events.register(
        "provide-client-params.sagemaker.CreateTrainingJob", lambda params, **_: sent.update(params)
    )
    sagemaker.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/x"})
    create.handler(_create_event({key: value for key, value in QUEUED_SPEC.items() if key != "queue"}))
    submitted = {}
    stubbed["batch"].client.meta.events.register(
        "provide-client-params.batch.SubmitServiceJob", lambda params, **_: submitted.update(params)
    )
    stubbed["batch"].add_response("list_service_jobs", {"jobSummaryList": []})
    stubbed["batch"].add_response("submit_service_job", {"jobName": sent["TrainingJobName"], "jobId": "job-1"})
    create.handler(_create_event())
    assert submitted["serviceRequestPayload"] == json.dumps(sent)


def test_describe_reports_a_job_terminated_in_the_queue_after_a_capacity_requeue_not_started_with_batchs_reason(stubbed):
    renamed = "AWSBatchtrainstack-x88b610a69aa8380ca5b0a7aba3f81cb8"
    reason = "Terminated by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
    stubbed["batch"].add_response("describe_service_job", _service_job("FAILED", renamed, isTerminated=True, statusReason=reason))
    failed = _training_job(renamed, "Failed", "CapacityError: Unable to provision requested ML compute capacity.")
    stubbed["sagemaker"].add_response("describe_training_job", failed)
    result = describe.handler({"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60, "attempts": []})
    assert (result["status"], result["failure_reason"], result["retry"]) == ("NotStarted", reason, False)


def test_describe_waits_on_a_training_job_batch_created_a_moment_before_sagemaker_describes_it(stubbed):
    renamed = "AWSBatchtrainstack-x88b610a69aa8380ca5b0a7aba3f81cb8"
    stubbed["batch"].add_response("describe_service_job", _service_job("SCHEDULED", renamed))
    stubbed["sagemaker"].add_client_error(
        "describe_training_job", service_error_code="ValidationException", service_message="Requested resource not found."
    )
    result = describe.handler({"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60})
    assert (result["status"], result["secondary_status"]) == ("InProgress", "Service job SCHEDULED")


def test_create_turns_a_throttled_lookup_in_the_queue_into_the_retried_error(stubbed):
    stubbed["batch"].add_client_error(
        "list_service_jobs", service_error_code="TooManyRequestsException", service_message="Too many requests"
    )
    with pytest.raises(ControlPlaneError):
        create.handler(_create_event())


def test_notify_links_a_queued_trial_to_the_training_job_batch_created(stubbed):
    renamed = "AWSBatchtrainstack-x88b610a69aa8380ca5b0a7aba3f81cb8"
    stubbed["batch"].add_response("describe_service_job", _service_job("SUCCEEDED", renamed))
    stubbed["sagemaker"].add_response("describe_training_job", _training_job(renamed, "Completed"))
    trial = describe.handler({"job_name": "trainstack-x", "service_job_id": "job-1", "poll_seconds": 60, "attempts": []})
    sent = {}
    stubbed["sns"].add_response("publish", {"MessageId": "1"})
    stubbed["sns"].client.meta.events.register("provide-client-params.sns.Publish", lambda params, **_: sent.update(params))
    notify.handler({"results": [trial], "execution": "arn:aws:states:us-east-1:123456789012:execution:trainstack:run-1"})
    (reported,) = json.loads(sent["Message"])["trials"]
    assert reported["job_name"] == "trainstack-x" and reported["links"]["job"].endswith(f"#/jobs/{renamed}")
