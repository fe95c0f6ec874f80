"""The Batch twin: service jobs for SageMaker Training queue, share, wait and end as AWS Batch
documents, and their training jobs run in the SageMaker twin.

The jobs are the cheapest the twin runs: a shell as the container's entry (ContainerEntrypoint on the
default framework image) that exits, sleeps or fails. Each test starts its own moto and twins and
makes its own service environment and queue; a DISABLED environment holds submitted jobs until the
test enables it, so that an order can be read before anything runs.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.synth import synthesize
from trainstack import images
from trainstack.polling import poll_until
from trainstack_local.account_twin import TwinAccount
from trainstack_local.batch_api_checks import BatchClientError
from trainstack_local.batch_twin import BatchTwin
from trainstack_local.bridges import ApiFaults, moto_bridges
from trainstack_local.emulator import ACCOUNT, LOCAL_ENVIRONMENT, REGION, local_aws, training_files
from trainstack_local.event_feed import EventFeed
from trainstack_local.registry import ImageRegistry
from trainstack_local.sagemaker_twin import SageMakerTwin, TwinSettings
from trainstack_local.serve import refuse_other_keys

pytestmark = pytest.mark.timeout(300)  # the tests that run jobs are marked slow

TIME_LIMIT_SCALE = 0.002  # a 600 s RUNNABLE time limit acts after 1.2 s
OVER_CAP = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
NO_CAPACITY = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
OUTPUT_BUCKET = "batch-twin-output"
# What each recorded state change event was (see record_event): the event as the rule delivered it.
RECORDED_EVENTS: list[dict[str, Any]] = []


@dataclass
class BatchAws:
    """moto with the bridges, the SageMaker twin and the Batch twin, and what the tests read of them."""

    twin: SageMakerTwin
    batch: BatchTwin
    role_arn: str
    feed: list[str] = field(default_factory=list)

    @property
    def client(self) -> Any:
        return boto3.client("batch", region_name=REGION)


@pytest.fixture
def aws(tmp_path) -> Iterator[BatchAws]:
    """A fresh moto per test: the emulated stack's own test below starts moto and the bridges itself."""
    from moto import mock_aws

    lines: list[str] = []
    settings = TwinSettings(queue_time_limit_scale=TIME_LIMIT_SCALE, stop_grace_seconds=2)
    twin = SageMakerTwin(tmp_path, ImageRegistry(), region=REGION, settings=settings, feed=EventFeed(lines.append))
    batch = BatchTwin(twin, region=REGION, account=ACCOUNT)
    with (
        pytest.MonkeyPatch.context() as environment,
        mock_aws(config={"lambda": {"use_docker": False}}),
        moto_bridges(twin, REGION, ACCOUNT, ApiFaults(), batch, TwinAccount(twin.settings.account, REGION, ACCOUNT)),
    ):
        for key, value in LOCAL_ENVIRONMENT.items():
            environment.setenv(key, value)
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=OUTPUT_BUCKET)
        role = boto3.client("iam", region_name=REGION).create_role(RoleName="batch-twin", AssumeRolePolicyDocument="{}")
        try:
            yield BatchAws(twin, batch, role["Role"]["Arn"], lines)
        finally:
            batch.close()
            twin.close()


def _queue(aws: BatchAws, *, cap: int = 1, shares: dict[str, float] | None = None, limits: dict[str, int] | None = None) -> str:
    """A new queue on a new environment of `cap` instances, DISABLED until `_enable`; fair share
    with these weights when `shares` is given; `limits`: RUNNABLE time limits (reason -> seconds)."""
    name = f"q{len(aws.batch.queues) + 1}"
    environment = aws.client.create_service_environment(
        serviceEnvironmentName=name,
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        state="DISABLED",
        capacityLimits=[{"maxCapacity": cap, "capacityUnit": "NUM_INSTANCES"}],
    )
    queue: dict[str, Any] = {
        "jobQueueName": name,
        "priority": 1,
        "jobQueueType": "SAGEMAKER_TRAINING",
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": environment["serviceEnvironmentArn"]}],
        "jobStateTimeLimitActions": [
            {"reason": reason, "state": "RUNNABLE", "maxTimeSeconds": seconds, "action": "TERMINATE"}
            for reason, seconds in (limits or {}).items()
        ],
    }
    if shares is not None:
        distribution = [{"shareIdentifier": share, "weightFactor": weight} for share, weight in shares.items()]
        queue["schedulingPolicyArn"] = aws.client.create_scheduling_policy(
            name=name, fairsharePolicy={"shareDistribution": distribution}
        )["arn"]
    return aws.client.create_job_queue(**queue)["jobQueueArn"]


def _enable(aws: BatchAws, queue: str, cap: int | None = None) -> None:
    environment = aws.client.describe_job_queues(jobQueues=[queue])["jobQueues"][0]["serviceEnvironmentOrder"][0]
    update: dict[str, Any] = {"serviceEnvironment": environment["serviceEnvironment"], "state": "ENABLED"}
    if cap is not None:
        update["capacityLimits"] = [{"maxCapacity": cap, "capacityUnit": "NUM_INSTANCES"}]
    aws.client.update_service_environment(**update)


def _payload(aws: BatchAws, script: str = "exit 0", *, instances: int = 1, instance_type: str = "ml.m5.large") -> str:
    """A CreateTrainingJob request whose hosts run `script` under /bin/sh (the twin's cheapest job)."""
    request = {
        "TrainingJobName": "batch-twin",
        "RoleArn": aws.role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": images.default_base_image(REGION),
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["/bin/sh", "-c", script],
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://{OUTPUT_BUCKET}/"},
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": instances, "VolumeSizeInGB": 1},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "HyperParameters": {},
    }
    return json.dumps(request)


def _submit(aws: BatchAws, queue: str, name: str, payload: str | None = None, **extra: Any) -> str:
    return aws.client.submit_service_job(
        jobName=name,
        jobQueue=queue,
        serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=payload or _payload(aws),
        **extra,
    )["jobId"]


def _describe(aws: BatchAws, job_id: str) -> dict[str, Any]:
    return aws.client.describe_service_job(jobId=job_id)


def _wait(aws: BatchAws, job_id: str, *statuses: str, timeout: float = 120) -> dict[str, Any]:
    return poll_until(
        lambda: _describe(aws, job_id), lambda job: job["status"] in statuses, timeout=timeout, interval=0.1,
        what=f"service job {job_id} to be {' or '.join(statuses)}",
    )  # fmt: skip


def _dispatch_order(aws: BatchAws, jobs: dict[str, str]) -> list[str]:
    """The jobs' names (name -> id) in the order they were dispatched, once all have ended."""
    ended = {name: _wait(aws, job_id, "SUCCEEDED", "FAILED") for name, job_id in jobs.items()}
    return sorted(ended, key=lambda name: ended[name]["scheduledAt"])


def _snapshot_order(aws: BatchAws, queue: str, jobs: dict[str, str]) -> list[str]:
    names = {aws.client.describe_service_job(jobId=job_id)["jobArn"]: name for name, job_id in jobs.items()}
    return [names[job["jobArn"]] for job in aws.client.get_job_queue_snapshot(jobQueue=queue)["frontOfQueue"]["jobs"]]


def _wait_runnable(aws: BatchAws, jobs: dict[str, str]) -> None:
    for job_id in jobs.values():
        _wait(aws, job_id, "RUNNABLE")


def _refusal(error: pytest.ExceptionInfo[ClientError]) -> tuple[str, int, str]:
    response = error.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Message"]


def record_event(event: dict[str, Any], _context: Any) -> None:
    """A Lambda handler (run in-process by the bridges) that keeps each event its rule delivers."""
    RECORDED_EVENTS.append(event)


@pytest.mark.slow
def test_the_environment_cap_is_never_exceeded(aws):
    queue = _queue(aws, cap=2)
    sizes = {"one-a": 1, "two": 2, "one-b": 1, "one-c": 1, "one-d": 1}
    jobs = {name: _submit(aws, queue, name, _payload(aws, "sleep 1", instances=n)) for name, n in sizes.items()}
    _enable(aws, queue)
    ended = {name: _wait(aws, job_id, "SUCCEEDED", "FAILED") for name, job_id in jobs.items()}
    assert {job["status"] for job in ended.values()} == {"SUCCEEDED"}
    for moment in (job["scheduledAt"] for job in ended.values()):  # what ran at each dispatch, its own included
        running = [name for name, job in ended.items() if job["scheduledAt"] <= moment < job["stoppedAt"]]
        assert sum(sizes[name] for name in running) <= 2, running


@pytest.mark.slow
def test_fair_share_alternates_between_two_shares_of_equal_weight(aws):
    queue = _queue(aws, shares={"red": 1.0, "blue": 1.0})
    names = ("red-1", "red-2", "blue-1", "blue-2")
    jobs = {name: _submit(aws, queue, name, shareIdentifier=name.split("-")[0]) for name in names}
    _wait_runnable(aws, jobs)
    _enable(aws, queue)
    assert _dispatch_order(aws, jobs) == ["red-1", "blue-1", "red-2", "blue-2"]


def test_a_share_of_lower_weight_gets_more_turns(aws):
    queue = _queue(aws, shares={"red": 1.0, "blue": 0.5})
    names = ("red-1", "red-2", "red-3", "blue-1", "blue-2", "blue-3")
    jobs = {name: _submit(aws, queue, name, shareIdentifier=name.split("-")[0]) for name in names}
    _wait_runnable(aws, jobs)
    assert _snapshot_order(aws, queue, jobs) == ["red-1", "blue-1", "blue-2", "red-2", "blue-3", "red-3"]


def test_within_a_share_the_higher_priority_goes_first(aws):
    queue = _queue(aws, shares={"red": 1.0})
    priorities = {"low": 0, "high": 9000, "middle": 10}
    jobs = {name: _submit(aws, queue, name, shareIdentifier="red", schedulingPriority=p) for name, p in priorities.items()}
    _wait_runnable(aws, jobs)
    assert _snapshot_order(aws, queue, jobs) == ["high", "middle", "low"]


def test_a_fifo_queue_ignores_priority(aws):
    queue = _queue(aws)
    jobs = {name: _submit(aws, queue, name, schedulingPriority=p) for name, p in (("first", 0), ("second", 9999))}
    _wait_runnable(aws, jobs)
    assert _snapshot_order(aws, queue, jobs) == ["first", "second"]


def test_update_service_job_moves_a_job_up_its_share(aws):
    queue = _queue(aws, shares={"red": 1.0})
    jobs = {name: _submit(aws, queue, name, shareIdentifier="red") for name in ("first", "second")}
    _wait_runnable(aws, jobs)
    aws.client.update_service_job(jobId=jobs["second"], schedulingPriority=5)
    assert _snapshot_order(aws, queue, jobs) == ["second", "first"]
    assert _describe(aws, jobs["second"])["schedulingPriority"] == 5


@pytest.mark.slow
def test_the_snapshot_lists_runnable_jobs_in_the_order_they_are_dispatched(aws):
    queue = _queue(aws, shares={"red": 1.0, "blue": 1.0})
    submitted = (("red-a", "red", 0), ("red-b", "red", 50), ("blue-a", "blue", 0), ("red-c", "red", 0), ("blue-b", "blue", 9))
    jobs = {name: _submit(aws, queue, name, shareIdentifier=share, schedulingPriority=p) for name, share, p in submitted}
    _wait_runnable(aws, jobs)
    snapshot = _snapshot_order(aws, queue, jobs)
    _enable(aws, queue)
    assert _dispatch_order(aws, jobs) == snapshot == ["red-b", "blue-b", "red-a", "blue-a", "red-c"]


def test_terminating_a_queued_job_ends_it_without_a_training_job(aws):
    queue = _queue(aws)
    job_id = _submit(aws, queue, "queued-then-terminated")
    _wait(aws, job_id, "RUNNABLE")
    aws.client.terminate_service_job(jobId=job_id, reason="no longer wanted")
    _enable(aws, queue)
    aws.batch.wait_for_passes(10)  # any of which would have dispatched it
    job = _describe(aws, job_id)
    assert (job["status"], job["isTerminated"], job["statusReason"]) == ("FAILED", True, "no longer wanted")
    assert "latestAttempt" not in job and job["attempts"] == []
    training_jobs = boto3.client("sagemaker", region_name=REGION).list_training_jobs(NameContains="queued-then-terminated")
    assert training_jobs["TrainingJobSummaries"] == []


@pytest.mark.slow
def test_terminating_a_running_job_stops_its_training_job(aws):
    queue = _queue(aws)
    job_id = _submit(aws, queue, "running-then-terminated", _payload(aws, "trap 'exit 0' TERM; sleep 120 & wait"))
    _enable(aws, queue)
    running = _wait(aws, job_id, "RUNNING")
    aws.client.terminate_service_job(jobId=job_id, reason="stopped by its team")
    job = _wait(aws, job_id, "SUCCEEDED", "FAILED")
    assert (job["status"], job["isTerminated"], job["statusReason"]) == ("FAILED", True, "stopped by its team")
    training_job = running["latestAttempt"]["serviceResourceId"]["value"].split("/", 1)[1]
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    assert sagemaker.describe_training_job(TrainingJobName=training_job)["TrainingJobStatus"] == "Stopped"


def test_a_job_larger_than_the_cap_waits_at_the_head_and_holds_the_queue(aws):
    queue = _queue(aws)
    too_big = _submit(aws, queue, "too-big", _payload(aws, instances=2))
    behind = _submit(aws, queue, "behind")
    _enable(aws, queue)
    blocked = poll_until(lambda: _describe(aws, too_big), lambda job: "statusReason" in job, timeout=30, what="a blocked reason")
    assert blocked["status"] == "RUNNABLE" and blocked["statusReason"].startswith(f"{OVER_CAP} - ")
    aws.batch.wait_for_passes(10)
    assert _describe(aws, behind)["status"] == "RUNNABLE"
    for job_id in (too_big, behind):
        aws.client.terminate_service_job(jobId=job_id, reason="test over")


@pytest.mark.slow
def test_the_time_limit_terminates_the_blocked_head_and_the_next_job_runs(aws):
    queue = _queue(aws, limits={OVER_CAP: 600})
    too_big = _submit(aws, queue, "too-big", _payload(aws, instances=2))
    behind = _submit(aws, queue, "behind")
    _enable(aws, queue)
    ended = _wait(aws, too_big, "SUCCEEDED", "FAILED")
    assert (ended["status"], ended["isTerminated"]) == ("FAILED", True)
    assert ended["statusReason"] == f"Terminated by JobStateTimeLimit action due to reason: {OVER_CAP}"
    assert ended["stoppedAt"] - ended["createdAt"] >= 600 * TIME_LIMIT_SCALE * 1000
    assert _wait(aws, behind, "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"


@pytest.mark.slow
def test_a_capacity_error_requeues_the_job_without_using_an_attempt(aws):
    aws.twin.refuse_capacity("ml.c5.xlarge", times=1)
    queue = _queue(aws)
    job_id = _submit(aws, queue, "capacity-then-runs", _payload(aws, instance_type="ml.c5.xlarge"), retryStrategy={"attempts": 1})
    _enable(aws, queue)
    job = _wait(aws, job_id, "SUCCEEDED", "FAILED")
    assert job["status"] == "SUCCEEDED"
    first, second = job["attempts"]
    assert first["statusReason"].startswith("Received status from SageMaker: CapacityError")
    assert first["serviceResourceId"]["value"] != second["serviceResourceId"]["value"]
    waiting = f"{NO_CAPACITY} - Unable to provision requested compute resources"
    assert f"service job capacity-then-runs: RUNNABLE: {waiting}" in aws.feed


@pytest.mark.slow
def test_a_capacity_wait_past_the_time_limit_terminates_the_job(aws):
    aws.twin.refuse_capacity("ml.c5.2xlarge", times=-1)
    queue = _queue(aws, limits={NO_CAPACITY: 600})
    job_id = _submit(aws, queue, "never-gets-capacity", _payload(aws, instance_type="ml.c5.2xlarge"))
    _enable(aws, queue)
    job = _wait(aws, job_id, "SUCCEEDED", "FAILED")
    aws.twin.refuse_capacity("ml.c5.2xlarge", times=0)
    assert (job["status"], job["isTerminated"]) == ("FAILED", True)
    assert job["statusReason"] == f"Terminated by JobStateTimeLimit action due to reason: {NO_CAPACITY}"
    assert job["attempts"] and all("CapacityError" in attempt["statusReason"] for attempt in job["attempts"])


@pytest.mark.slow
def test_a_failed_attempt_is_retried_while_the_retry_strategy_allows(aws):
    queue = _queue(aws)
    job_id = _submit(aws, queue, "fails-twice", _payload(aws, "exit 3"), retryStrategy={"attempts": 2})
    _enable(aws, queue)
    job = _wait(aws, job_id, "SUCCEEDED", "FAILED")
    assert job["status"] == "FAILED" and not job["isTerminated"]
    assert len(job["attempts"]) == 2
    assert job["statusReason"].startswith("Received status from SageMaker: AlgorithmError")


@pytest.mark.slow
def test_describe_service_job_reports_the_training_job_batch_created(aws):
    queue = _queue(aws)
    job_id = _submit(aws, queue, "renamed", tags={"team": "red"})
    _enable(aws, queue)
    job = _wait(aws, job_id, "SUCCEEDED", "FAILED")
    arn = job["latestAttempt"]["serviceResourceId"]["value"]
    name = arn.split(":training-job/", 1)[1]
    assert name.startswith("AWSBatchrenamed") and len(name) == len("AWSBatchrenamed") + 32
    assert job["latestAttempt"]["serviceResourceId"]["name"] == "TrainingJobArn"
    assert job["capacityUsage"] == [{"capacityUnit": "NUM_INSTANCES", "quantity": 1.0}]
    assert job["createdAt"] <= job["scheduledAt"] <= job["startedAt"] <= job["stoppedAt"]
    assert job["tags"] == {"team": "red"} and json.loads(job["serviceRequestPayload"])["TrainingJobName"] == "batch-twin"
    training_job = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=name)
    assert (training_job["TrainingJobArn"], training_job["TrainingJobStatus"]) == (arn, "Completed")


def test_a_repeated_submission_with_the_same_client_token_is_refused(aws):
    queue = _queue(aws)
    first = _submit(aws, queue, "tokened", clientToken="run-1-attempt-1")
    with pytest.raises(ClientError) as refused:
        _submit(aws, queue, "tokened", clientToken="run-1-attempt-1")
    code, status, message = _refusal(refused)
    assert (code, status) == ("ClientException", 400) and first in message
    assert _submit(aws, queue, "tokened", clientToken="run-1-attempt-2") != first


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"schedulingPriority": 10000}, "schedulingPriority"),
        ({"clientToken": "x" * 65}, "clientToken"),
        ({"shareIdentifier": None}, "shareIdentifier must be specified"),
        ({"jobName": "has.a.dot"}, "jobName"),
        ({"timeoutConfig": {"attemptDurationSeconds": 60}}, "timeoutConfig"),
        ({"serviceRequestPayload": "not json"}, "serviceRequestPayload"),
        ({"retryStrategy": {"attempts": 11}}, "attempts"),
    ],
)
def test_a_submission_outside_batchs_limits_is_refused(aws, change, complaint):
    queue = _queue(aws, shares={"red": 1.0})
    request = {"jobName": "limits", "jobQueue": queue, "serviceJobType": "SAGEMAKER_TRAINING", "shareIdentifier": "red"}
    request["serviceRequestPayload"] = _payload(aws)
    request.update(change)
    with pytest.raises(ClientError) as refused:
        aws.client.submit_service_job(**{key: value for key, value in request.items() if value is not None})
    code, status, message = _refusal(refused)
    assert (code, status) == ("ClientException", 400) and complaint in message


def test_a_share_identifier_on_a_queue_without_fair_share_is_refused(aws):
    with pytest.raises(ClientError) as refused:
        _submit(aws, _queue(aws), "no-shares-here", shareIdentifier="red")
    assert "don't specify shareIdentifier" in _refusal(refused)[2]


def test_a_queue_time_limit_outside_batchs_range_is_refused(aws):
    with pytest.raises(ClientError) as refused:
        _queue(aws, limits={OVER_CAP: 599})
    assert "maxTimeSeconds" in _refusal(refused)[2]


def test_list_service_jobs_matches_names_case_insensitively_newest_first(aws):
    queue = _queue(aws)
    jobs = {name: _submit(aws, queue, name) for name in ("Alpha-1", "alpha-2", "beta-1")}
    _wait_runnable(aws, jobs)

    def listed(value: str) -> list[str]:
        found = aws.client.list_service_jobs(jobQueue=queue, filters=[{"name": "JOB_NAME", "values": [value]}])
        return [job["jobName"] for job in found["jobSummaryList"]]

    assert listed("ALPHA*") == ["alpha-2", "Alpha-1"]
    assert listed("alpha-1") == ["Alpha-1"]


def test_list_service_jobs_pages_through_a_status(aws):
    queue = _queue(aws)
    jobs = {name: _submit(aws, queue, name) for name in ("page-1", "page-2", "page-3")}
    _wait_runnable(aws, jobs)
    assert aws.client.list_service_jobs(jobQueue=queue)["jobSummaryList"] == []  # no status: RUNNING jobs only
    paginator = aws.client.get_paginator("list_service_jobs")
    pages = paginator.paginate(jobQueue=queue, jobStatus="RUNNABLE", PaginationConfig={"PageSize": 2})
    assert [[job["jobName"] for job in page["jobSummaryList"]] for page in pages] == [["page-3", "page-2"], ["page-1"]]


def test_list_service_jobs_filters_a_share_by_status(aws):
    queue = _queue(aws, shares={"red": 1.0, "blue": 1.0})
    jobs = {name: _submit(aws, queue, name, shareIdentifier=name.split("-")[0]) for name in ("red-1", "blue-1")}
    _wait_runnable(aws, jobs)
    share = [{"name": "SHARE_IDENTIFIER", "values": ["blue"]}]
    found = aws.client.list_service_jobs(jobQueue=queue, jobStatus="RUNNABLE", filters=share)["jobSummaryList"]
    assert [job["jobName"] for job in found] == ["blue-1"]
    assert aws.client.list_service_jobs(jobQueue=queue, jobStatus="RUNNING", filters=share)["jobSummaryList"] == []


@pytest.mark.slow
def test_state_changes_reach_eventbridge_rules_without_the_submission(aws):
    queue = _queue(aws)
    function = boto3.client("lambda", region_name=REGION).create_function(
        FunctionName="record-batch-events",
        Runtime="python3.11",
        Role=aws.role_arn,
        Handler=f"{__name__}.record_event",
        Code={"ZipFile": _empty_zip()},
    )
    events = boto3.client("events", region_name=REGION)
    pattern = {"source": ["aws.batch"], "detail-type": ["Batch Service Job State Change"], "detail": {"jobQueue": [queue]}}
    events.put_rule(Name="batch-events", EventPattern=json.dumps(pattern))
    events.put_targets(Rule="batch-events", Targets=[{"Id": "record", "Arn": function["FunctionArn"]}])
    job_id = _submit(aws, queue, "eventful", tags={"team": "red"})
    _enable(aws, queue)
    _wait(aws, job_id, "SUCCEEDED")
    recorded = poll_until(
        lambda: [e for e in RECORDED_EVENTS if e["detail"]["jobId"] == job_id],
        lambda found: any(e["detail"]["status"] == "SUCCEEDED" for e in found), timeout=30, what="the SUCCEEDED event",
    )  # fmt: skip
    statuses = {event["detail"]["status"] for event in recorded}
    assert {"RUNNABLE", "SCHEDULED", "RUNNING", "SUCCEEDED"} <= statuses and "SUBMITTED" not in statuses
    assert all(event["resources"] == [_describe(aws, job_id)["jobArn"]] for event in recorded)
    assert not any({"tags", "serviceRequestPayload"} & set(event["detail"]) for event in recorded)


def test_the_served_endpoint_answers_boto3_and_the_aws_cli(aws):
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    queue = _queue(aws)
    app = refuse_other_keys(DomainDispatcherApplication(create_backend_app), LOCAL_ENVIRONMENT["AWS_ACCESS_KEY_ID"])
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    try:
        served = boto3.client("batch", region_name=REGION, endpoint_url=endpoint)
        job_id = served.submit_service_job(
            jobName="served", jobQueue=queue, serviceJobType="SAGEMAKER_TRAINING", serviceRequestPayload=_payload(aws)
        )["jobId"]
        _wait(aws, job_id, "RUNNABLE")
        cli = [str(Path(sys.executable).parent / "aws"), "batch", "get-job-queue-snapshot", "--job-queue", queue]
        cli += ["--endpoint-url", endpoint]
        answer = subprocess.run(cli, capture_output=True, text=True, check=True, env={**os.environ, **LOCAL_ENVIRONMENT})
        assert [job["jobArn"] for job in json.loads(answer.stdout)["frontOfQueue"]["jobs"]] == [_describe(aws, job_id)["jobArn"]]
    finally:
        server.shutdown()
        thread.join()


def test_the_emulated_stack_creates_its_team_queue_and_publishes_it(tmp_path):
    template = synthesize(queue=True, queue_shares="research:1,prod:0.5", queue_max_instances=3).json
    with local_aws(template, tmp_path, files=training_files(tmp_path)) as (stack, _twin):
        context = stack.context
        queue = boto3.client("batch", region_name=REGION).describe_job_queues(jobQueues=[context.job_queue_arn])["jobQueues"]
        assert queue[0]["jobQueueType"] == "SAGEMAKER_TRAINING" and queue[0]["schedulingPolicyArn"]
        published = (context.queue_shares, context.queue_default_share, context.queue_max_instances)
        assert published == (("research", "prod"), "research", 3)
        environment = boto3.client("batch", region_name=REGION).describe_service_environments()["serviceEnvironments"]
        assert [e["capacityLimits"][0]["maxCapacity"] for e in environment] == [3]


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "the handler runs in-process\n")
    return buffer.getvalue()


# A job that resumes: its first run waits to be stopped and saves a "checkpoint" when it is (SIGTERM);
# a run that finds the checkpoint its CheckpointConfig restored completes at once.
RESUMABLE = (
    "if [ -f /opt/ml/checkpoints/saved ]; then exit 0; fi; trap 'touch /opt/ml/checkpoints/saved; exit 0' TERM; sleep 120 & wait"
)
PREEMPTION = "a job of quota share prod needed its instances"


def _resumable(aws: BatchAws, name: str) -> str:
    request = json.loads(_payload(aws, RESUMABLE))
    request["CheckpointConfig"] = {"S3Uri": f"s3://{OUTPUT_BUCKET}/checkpoints/{name}/"}
    return json.dumps(request)


def _training_job(attempt: dict[str, Any]) -> str:
    return attempt["serviceResourceId"]["value"].split("/", 1)[1]


@pytest.mark.slow
def test_a_preempted_job_goes_back_to_the_queue_and_its_next_training_job_resumes_from_the_checkpoints(aws):
    queue = _queue(aws)
    job_id = _submit(aws, queue, "preempted", _resumable(aws, "preempted"), retryStrategy={"attempts": 1})
    _enable(aws, queue)
    first = _training_job(_wait(aws, job_id, "RUNNING")["latestAttempt"])

    assert aws.batch.preempt(job_id, PREEMPTION) == first
    job = _wait(aws, job_id, "SUCCEEDED", "FAILED")

    assert f"service job preempted: RUNNABLE: Preempted: {PREEMPTION}" in aws.feed  # back in the queue, not failed
    assert job["status"] == "SUCCEEDED"  # its one retryStrategy attempt is not spent by the preemption
    (preempted,) = job["preemptionSummary"]["recentPreemptedAttempts"]
    assert job["preemptionSummary"]["preemptedAttemptCount"] == 1
    assert (_training_job(preempted), preempted["statusReason"]) == (first, f"Preempted: {PREEMPTION}")
    second = _training_job(job["latestAttempt"])
    assert second != first and [_training_job(a) for a in job["attempts"]] == [first, second]
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    assert sagemaker.describe_training_job(TrainingJobName=first)["TrainingJobStatus"] == "Stopped"
    assert sagemaker.describe_training_job(TrainingJobName=second)["TrainingJobStatus"] == "Completed"


@pytest.mark.slow
@pytest.mark.parametrize("retries", [0, 1])
def test_a_job_is_terminated_once_its_preemption_retries_are_spent(aws, retries):
    queue = _queue(aws)
    payload = _payload(aws, "trap 'exit 0' TERM; sleep 120 & wait")
    job_id = _submit(aws, queue, "preempted", payload, preemptionConfiguration={"preemptionRetriesBeforeTermination": retries})
    _enable(aws, queue)
    for preemption in range(retries + 1):
        dispatched = preemption + 1
        poll_until(
            lambda: _describe(aws, job_id), lambda job, n=dispatched: job["status"] == "RUNNING" and len(job["attempts"]) == n,
            timeout=60, what=f"dispatch {dispatched}",
        )  # fmt: skip
        aws.batch.preempt(job_id, PREEMPTION)
    job = _wait(aws, job_id, "SUCCEEDED", "FAILED")
    assert (job["status"], job["isTerminated"]) == ("FAILED", True)
    assert job["statusReason"] == f"Preempted: {PREEMPTION} (preemptionRetriesBeforeTermination {retries} spent)"
    assert job["preemptionSummary"]["preemptedAttemptCount"] == len(job["attempts"]) == retries + 1


def test_only_a_dispatched_job_can_be_preempted(aws):
    queue = _queue(aws)
    job_id = _submit(aws, queue, "waiting")
    _wait(aws, job_id, "RUNNABLE")
    with pytest.raises(BatchClientError, match="is RUNNABLE: only a dispatched job can be preempted"):
        aws.batch.preempt(job_id, PREEMPTION)
    assert "preemptionSummary" not in _describe(aws, job_id)


def test_a_negative_preemption_retry_count_is_refused(aws):
    queue = _queue(aws)
    with pytest.raises(ClientError) as refused:
        _submit(aws, queue, "refused", preemptionConfiguration={"preemptionRetriesBeforeTermination": -1})
    assert _refusal(refused)[2] == "preemptionRetriesBeforeTermination must be 0 or more; got -1"
