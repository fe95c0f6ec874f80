"""Handlers at the edges moto does not model: SageMaker's capacity and throttling errors and
StopTrainingJob, asserted with botocore's Stubber on the exact calls."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError

from tests.core.specs import DDP
from tests.core.stubbed import ACCOUNT_SERVICES, ENVIRONMENT, account_answers, stubbed_clients
from trainstack import facts
from trainstack.errors import CapacityUnavailableError, ControlPlaneError, SpecInvalidError
from trainstack.handlers import create, describe, notify, stop, validate
from trainstack.handlers.environment import environment
from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import Resolution, check_or_raise, resolve
from trainstack.spec import parse_spec
from trainstack.workflow import run_deadline_seconds


@pytest.fixture
def stubbed(monkeypatch):
    with stubbed_clients(monkeypatch, ENVIRONMENT, ("sns", "s3", *ACCOUNT_SERVICES)) as stubbers:
        yield stubbers


def _create_event() -> dict:
    spec = {**DDP, "inputs": {}}
    run = {"lineage": "s3://b/jobs/x.yaml#v1", "resume": None}
    return {"spec": spec, "run": run, "trial": {"index": 0, "hyperparameters": {}}, "trial_count": 1, "execution": "exec-1"}


def test_create_sends_the_built_request_tagged_with_its_execution(stubbed):
    event = _create_event()
    spec = parse_spec(event["spec"])
    plan = check_or_raise(spec, lambda uri: 64)
    expected = build_request(spec, plan, environment().stack, trial=Run(**event["run"]).trial(), execution="exec-1")
    assert {"Key": "trainstack:execution", "Value": "exec-1"} in expected["Tags"]
    stubbed["sagemaker"].add_response(
        "create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/x"}, expected
    )
    result = create.handler(event)
    assert result["created"] is True and result["poll_seconds"] == 60


def test_create_treats_an_existing_job_as_its_own(stubbed):
    message = "Training job names must be unique ... a training job with this name already exists"
    stubbed["sagemaker"].add_client_error(
        "create_training_job", service_error_code="ValidationException", service_message=message
    )
    assert create.handler(_create_event())["created"] is False


def test_create_turns_a_quota_refusal_into_the_retried_capacity_error_with_advice(stubbed):
    stubbed["sagemaker"].add_client_error(
        "create_training_job",
        service_error_code="ResourceLimitExceeded",
        service_message="The account-level service limit 'ml.p4d.24xlarge for training job usage' is 0",
    )
    with pytest.raises(CapacityUnavailableError, match=re.escape("Request a quota increase for 2 x ml.p4d.24xlarge")):
        create.handler(_create_event())


@pytest.mark.parametrize(
    ("code", "http_status"),
    [("ThrottlingException", 400), ("ServiceUnavailable", 503), ("InternalFailure", 500), ("RequestTimeout", 408)],
)
def test_create_turns_a_control_plane_error_into_the_retried_error(stubbed, code, http_status):
    stubbed["sagemaker"].add_client_error(
        "create_training_job", service_error_code=code, service_message="try again", http_status_code=http_status
    )
    with pytest.raises(ControlPlaneError, match=f"CreateTrainingJob .*: {code}: try again"):
        create.handler(_create_event())


def test_create_passes_a_refusal_of_the_request_through_unretried(stubbed):
    stubbed["sagemaker"].add_client_error(
        "create_training_job", service_error_code="AccessDeniedException", service_message="not authorized"
    )
    with pytest.raises(ClientError, match="not authorized"):
        create.handler(_create_event())


def test_describe_doubles_the_poll_interval_up_to_the_cap(stubbed):
    for _ in range(2):
        stubbed["sagemaker"].add_response(
            "describe_training_job", _description("InProgress"), {"TrainingJobName": "trainstack-x"}
        )
    assert describe.handler({"job_name": "trainstack-x", "poll_seconds": 60})["poll_seconds"] == 120
    assert describe.handler({"job_name": "trainstack-x", "poll_seconds": 1800})["poll_seconds"] == 1800


def test_stop_stops_only_this_runs_in_progress_jobs(stubbed):
    from trainstack.identity import Run

    event_input = {"detail": {"bucket": {"name": "b"}, "object": {"key": "jobs/x.yaml", "version-id": "v1"}}}
    digest = Run("s3://b/jobs/x.yaml#v1").digest
    summaries = [
        {
            "TrainingJobName": f"trainstack-x-{digest}",
            "TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/a",
            "CreationTime": "2026-01-01",
            "TrainingJobStatus": "InProgress",
        }
    ]
    stubbed["sagemaker"].add_response(
        "list_training_jobs", {"TrainingJobSummaries": summaries}, {"NameContains": digest, "StatusEquals": "InProgress"}
    )
    stubbed["sagemaker"].add_response(
        "list_tags",
        {"Tags": [{"Key": "trainstack:execution", "Value": "exec-1"}]},
        {"ResourceArn": summaries[0]["TrainingJobArn"]},
    )
    stubbed["sagemaker"].add_response("stop_training_job", {}, {"TrainingJobName": f"trainstack-x-{digest}"})
    result = stop.handler(
        {"detail": {"input": json.dumps(event_input), "name": "exec-1", "executionArn": "arn:x", "status": "ABORTED"}}
    )
    assert result["stopped"] == [f"trainstack-x-{digest}"]


def test_stop_of_a_duplicate_execution_leaves_the_job_another_execution_created(stubbed):
    from trainstack.identity import Run

    event_input = {"detail": {"bucket": {"name": "b"}, "object": {"key": "jobs/x.yaml", "version-id": "v1"}}}
    name = Run("s3://b/jobs/x.yaml#v1").trial().job_name("trainstack", "x")
    arn = f"arn:aws:sagemaker:us-east-1:1:training-job/{name}"
    summary = {"TrainingJobName": name, "TrainingJobArn": arn, "CreationTime": "2026-01-01", "TrainingJobStatus": "InProgress"}
    stubbed["sagemaker"].add_response("list_training_jobs", {"TrainingJobSummaries": [summary]})
    stubbed["sagemaker"].add_response("list_tags", {"Tags": [{"Key": "trainstack:execution", "Value": "original"}]})
    duplicate = {"detail": {"input": json.dumps(event_input), "name": "redelivered", "status": "FAILED"}}
    assert stop.handler(duplicate)["stopped"] == []  # the stub refuses any stop_training_job call


def test_validate_refuses_a_missing_spec_with_where_it_looked(stubbed):
    stubbed["s3"].add_client_error("get_object", service_error_code="NoSuchKey", http_status_code=404)
    event = {
        "input": {"detail": {"bucket": {"name": "b"}, "object": {"key": "datasets/x/_SUCCESS", "version-id": "v1"}}},
        "execution": "e",
    }
    with pytest.raises(SpecInvalidError, match=re.escape("no job spec at s3://b/datasets/x/job.yaml")):
        validate.handler(event)


def test_validate_turns_s3_failing_on_its_side_into_the_retried_error_never_a_rejection(stubbed):
    stubbed["s3"].add_client_error("get_object", service_error_code="SlowDown", http_status_code=503)
    event = {
        "input": {"detail": {"bucket": {"name": "b"}, "object": {"key": "jobs/x.yaml", "version-id": "v1"}}},
        "execution": "e",
    }
    with pytest.raises(ControlPlaneError, match=re.escape("GetObject s3://b/jobs/x.yaml: SlowDown")):
        validate.handler(event)


def test_notify_reports_a_rejection_with_the_validators_message(stubbed):
    stubbed["sns"].add_response("publish", {"MessageId": "1"})
    cause = json.dumps(
        {
            "errorMessage": "jobs/x.yaml: warm_pool = 25200: warm pools keep instances at most 6 hours",
            "errorType": "SpecInvalidError",
        }
    )
    result = notify.handler({"error": {"Error": "SpecInvalidError", "Cause": cause}})
    assert result == {
        "status": "Rejected",
        "reason": "jobs/x.yaml: warm_pool = 25200: warm pools keep instances at most 6 hours",
        "notified": True,
    }


def _description(status: str) -> dict:
    return {
        "TrainingJobName": "trainstack-x",
        "TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/x",
        "TrainingJobStatus": status,
        "SecondaryStatus": "Training",
        "AlgorithmSpecification": {"TrainingInputMode": "File"},
        "ModelArtifacts": {"S3ModelArtifacts": ""},
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
        "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        "CreationTime": "2026-01-01",
    }


RESTARTS = {"max": 3, "on": ["infrastructure"], "exit_codes": [], "within": 172800}  # the spec's defaults, as dumped


def _describe_failed(stubbed, reason: str, attempts: list[dict]) -> dict:
    failed = {**_description("Failed"), "FailureReason": reason}
    stubbed["sagemaker"].add_response("describe_training_job", failed, {"TrainingJobName": "trainstack-x"})
    started = datetime.now(UTC).isoformat()
    return describe.handler(
        {"job_name": "trainstack-x", "poll_seconds": 60, "attempts": attempts, "restarts": RESTARTS, "run_started": started}
    )


def test_describe_recreates_a_job_that_found_no_capacity_after_a_doubling_wait(stubbed):
    earlier = [{"decision": "capacity retry 1 of 3"}]
    result = _describe_failed(stubbed, "CapacityError: Unable to provision requested ML compute capacity.", earlier)
    assert (result["retry"], result["restart"], result["retry_wait_seconds"]) == (True, False, 600)
    assert result["attempts"][-1]["decision"] == "capacity retry 2 of 3"


def test_describe_restarts_a_job_the_watchdog_ended_after_a_minute(stubbed):
    result = _describe_failed(stubbed, "AlgorithmError: rank 1: StepTimeout: no optimizer step completed for 312 s", [])
    assert (result["retry"], result["restart"], result["retry_wait_seconds"]) == (True, True, 60)
    assert result["failure"] == {"kind": "infrastructure", "cause": "hang"}
    assert result["attempts"][-1]["decision"] == "restart 1 of 3"


def test_describe_reads_the_runs_start_as_step_functions_writes_it_and_restarts_nothing_past_within(stubbed):
    failed = {**_description("Failed"), "FailureReason": "AlgorithmError: rank 1: StepTimeout: no optimizer step"}
    stubbed["sagemaker"].add_response("describe_training_job", failed, {"TrainingJobName": "trainstack-x"})
    three_days_ago = (datetime.now(UTC) - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    event = {"job_name": "trainstack-x", "poll_seconds": 60, "attempts": [], "restarts": RESTARTS, "run_started": three_days_ago}
    result = describe.handler(event)
    assert result["retry"] is False
    assert result["attempts"][-1]["decision"] == "not restarted: the run started more than restarts.within = 172800 s ago"


def test_describe_does_not_retry_a_job_that_failed_for_its_own_reasons(stubbed):
    result = _describe_failed(stubbed, "AlgorithmError: rank 0: ModuleNotFoundError: No module named 'flash_attn'", [])
    assert (result["retry"], result["restart"]) == (False, False)
    assert result["attempts"][-1]["decision"] == "not restarted: a user failure (code or environment)"


def test_notify_reports_the_runs_outcome_even_when_sns_refuses_the_message(stubbed):
    stubbed["sns"].add_client_error("publish", service_error_code="InvalidParameter", service_message="Subject")
    results = [{"job_name": "j", "status": "Failed", "failure_reason": "AlgorithmError: loss is NaN"}]
    result = notify.handler({"results": results})
    assert result == {"status": "Failed", "reason": "j: Failed: AlgorithmError: loss is NaN", "notified": False}


def test_notify_reports_a_failed_map_as_the_runs_failure(stubbed):
    stubbed["sns"].add_response("publish", {"MessageId": "1"})
    error = {"Error": "States.Runtime", "Cause": "An error occurred while executing the state 'RunTrials'"}
    result = notify.handler({"error": error, "stage": "run"})
    assert result["status"] == "Failed" and "could not be followed" in result["reason"]


def test_notify_names_an_unwatched_trial_and_why(stubbed):
    stubbed["sns"].add_response("publish", {"MessageId": "1"})
    cause = json.dumps({"errorMessage": "j: not authorized to describe", "errorType": "ClientError"})
    results = [{"status": "Unwatched", "job_name": "j", "error": {"Error": "ClientError", "Cause": cause}}]
    result = notify.handler({"results": results})
    assert result["status"] == "Failed"
    assert result["reason"] == "j: Unwatched: could not be described (j: not authorized to describe); stopped with the run"


@pytest.mark.parametrize(
    ("code", "http_status"),
    [("ThrottlingException", 400), ("ServiceUnavailable", 503), ("InternalFailure", 500), ("RequestTimeout", 408)],
)
def test_describe_answers_unknown_on_a_control_plane_error_and_asks_again_after_the_same_wait(stubbed, code, http_status):
    stubbed["sagemaker"].add_client_error(
        "describe_training_job", service_error_code=code, service_message="try again", http_status_code=http_status
    )
    attempts = [{"job_name": "trainstack-x-0", "outcome": "restart"}]
    result = describe.handler({"job_name": "trainstack-x", "poll_seconds": 240, "attempts": attempts})
    assert (result["status"], result["poll_seconds"], result["retry"], result["restart"]) == ("Unknown", 240, False, False)
    assert result["attempts"] == attempts  # nothing is decided on no news
    assert result["secondary_status"] == f"not read: DescribeTrainingJob: {code}: try again"


def test_describe_answers_unknown_when_sagemaker_cannot_be_reached(stubbed):
    stubbed["sagemaker"].add_client_error("describe_training_job", http_status_code=502, service_error_code="BadGateway")
    assert describe.handler({"job_name": "trainstack-x", "poll_seconds": 60})["status"] == "Unknown"


def test_describe_raises_a_refusal_of_the_request_so_the_trial_ends_unwatched(stubbed):
    stubbed["sagemaker"].add_client_error(
        "describe_training_job",
        service_error_code="AccessDeniedException",
        service_message="not authorized",
        http_status_code=400,
    )
    with pytest.raises(ClientError, match="not authorized"):
        describe.handler({"job_name": "trainstack-x", "poll_seconds": 60})


def _inline(spec: dict) -> dict:
    return {"input": {"spec": spec}, "execution": "e"}


def test_validate_carries_the_resolution_it_computed_and_create_builds_from_it_without_checking_again(stubbed, monkeypatch):
    import trainstack.rules

    spec = {**DDP, "inputs": {}, "spot": {"enabled": False}}
    account_answers(stubbed)
    validated = validate.handler(_inline(spec))
    assert Resolution.from_json(validated["resolution"]) == resolve(parse_spec(validated["spec"]))
    monkeypatch.setattr(trainstack.rules, "checked", lambda *args: pytest.fail("Create checked the rules again"))
    event = {**_create_event(), "spec": validated["spec"], "resolution": validated["resolution"]}
    expected = build_request(parse_spec(validated["spec"]), resolve(parse_spec(validated["spec"])), environment().stack,
                             trial=Run(**event["run"]).trial(), execution="exec-1")  # fmt: skip
    stubbed["sagemaker"].add_response(
        "create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:us-east-1:1:training-job/x"}, expected
    )
    assert create.handler(event)["created"] is True


def test_validate_gives_the_run_a_deadline_its_spec_allows(stubbed):
    spec = {**DDP, "inputs": {}, "spot": {"enabled": False}, "max_runtime": "2h"}
    started = datetime.now(UTC)
    account_answers(stubbed)
    result = validate.handler(_inline(spec))
    deadline = datetime.strptime(result["deadline"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    expected = run_deadline_seconds(parse_spec(spec), 1)
    assert 2 * 3600 < expected < 2 * 86400  # two hours of training and the worst of retries, not 30 days
    assert abs((deadline - started).total_seconds() - expected) < 5


def test_validate_refuses_a_sweep_that_could_outlast_an_execution(stubbed):
    trials = [{"lr": 1e-4 * (i + 1)} for i in range(20)]
    spec = {
        **DDP,
        "inputs": {},
        "max_runtime": "28d",
        "spot": {"enabled": False},
        "sweep": {"max_concurrency": 1, "trials": trials},
    }
    account_answers(stubbed)
    with pytest.raises(
        SpecInvalidError, match=r"sweep = 20 trials at max_concurrency 1 may take up to \d+ days.*raise max_concurrency"
    ):
        validate.handler(_inline(spec))


def test_validate_refuses_a_spec_the_accounts_quota_never_lets_start_naming_the_increase(stubbed):
    account_answers(stubbed, quota=0)
    with pytest.raises(SpecInvalidError, match=r"quota 'ml.p4d.24xlarge for training job usage' is 0 .*--quota-code L-00000000"):
        validate.handler(_inline({**DDP, "inputs": {}, "spot": {"enabled": False}}))


def test_validate_launches_with_a_warning_where_the_quotas_may_not_be_read(stubbed, capsys):
    stubbed["service-quotas"].add_client_error("list_service_quotas", service_error_code="AccessDeniedException")
    stubbed["sagemaker"].add_response("list_training_jobs", {"TrainingJobSummaries": []})
    stubbed["ec2"].add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": []})
    stubbed["ec2"].add_response("describe_subnets", {"Subnets": [{"SubnetId": "subnet-1", "AvailabilityZoneId": "use1-az4"}]})
    result = validate.handler(_inline({**DDP, "inputs": {}, "spot": {"enabled": False}}))
    (warning,) = result["warnings"]
    assert warning.startswith("Service Quotas (the account's quotas: not checked): AccessDeniedException")
    assert f"warning: {warning}" in capsys.readouterr().out  # in the function's log


def test_notify_prints_what_the_runs_team_was_billed_under_the_team_for_the_dashboard(stubbed, capsys):
    ended = {**_description("Completed"), "BillableTimeInSeconds": 1800}
    stubbed["sagemaker"].add_response("describe_training_job", ended, {"TrainingJobName": "trainstack-x"})
    trial = describe.handler({"job_name": "trainstack-x", "poll_seconds": 60})
    stubbed["sns"].add_response("publish", {"MessageId": "1"})

    notify.handler(
        {"results": [trial], "execution": "arn:aws:states:eu-west-1:123456789012:execution:trainstack:run-1", "team": "research"}
    )

    (line,) = [json.loads(text) for text in capsys.readouterr().out.splitlines() if '"Team"' in text]
    hourly = facts.instance("ml.p4d.24xlarge").price_per_hour
    assert (line["Prefix"], line["Team"], line["BillableInstanceSeconds"]) == ("trainstack", "research", 2 * 1800)
    assert line["EstimatedCostUSD"] == pytest.approx(hourly)


def test_notify_sends_final_metrics_duration_billable_seconds_cost_and_links(stubbed, capsys):
    ended = {
        **_description("Completed"),
        "TrainingStartTime": datetime(2026, 1, 1, 10, 0, tzinfo=UTC),
        "TrainingEndTime": datetime(2026, 1, 1, 11, 0, tzinfo=UTC),
        "BillableTimeInSeconds": 3600,
        "FinalMetricDataList": [{"MetricName": "train:loss", "Value": 2.5, "Timestamp": datetime(2026, 1, 1, tzinfo=UTC)}],
    }
    stubbed["sagemaker"].add_response("describe_training_job", ended, {"TrainingJobName": "trainstack-x"})
    trial = describe.handler({"job_name": "trainstack-x", "poll_seconds": 60})
    execution = "arn:aws:states:eu-west-1:123456789012:execution:trainstack:run-1"
    sent = {}
    stubbed["sns"].add_response("publish", {"MessageId": "1"})
    stubbed["sns"].client.meta.events.register("provide-client-params.sns.Publish", lambda params, **_: sent.update(params))

    notify.handler({"results": [trial], "execution": execution})

    message = json.loads(sent["Message"])
    (reported,) = message["trials"]
    hourly = facts.instance("ml.p4d.24xlarge").price_per_hour
    assert (reported["final_metrics"], reported["duration_seconds"], reported["billable_seconds"]) == (
        {"train:loss": 2.5},
        3600,
        3600,
    )
    assert reported["cost_usd"] == message["cost_usd"] == pytest.approx(2 * hourly)
    assert (
        message["cost_basis"].startswith("estimate: billable seconds x EC2 on-demand")
        and "not your bill" in message["cost_basis"]
    )
    assert message["links"]["execution"].startswith("https://eu-west-1.console.aws.amazon.com/states/home?region=eu-west-1#")
    assert reported["links"]["job"].endswith("#/jobs/trainstack-x")
    assert "$252Faws$252Fsagemaker$252FTrainingJobs$3FlogStreamNameFilter$3Dtrainstack-x" in reported["links"]["logs"]
    (line,) = [json.loads(text) for text in capsys.readouterr().out.splitlines() if '"Status"' in text]
    assert (line["Prefix"], line["Status"], line["TrainingJobs"], line["BillableInstanceSeconds"]) == (
        "trainstack",
        "Completed",
        1,
        7200,
    )
    assert line["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Prefix", "Status"]]


def test_a_late_stop_of_a_stopped_run_leaves_the_jobs_of_the_run_that_resumed_it(stubbed):
    from trainstack.identity import Run

    first = {"spec": {"name": "x"}, "lineage": "nightly"}
    original, resumed = Run("execution:nightly"), Run("execution:nightly", resume="nightly-resume-1")
    names = [original.trial().job_name("trainstack", "x"), resumed.trial().job_name("trainstack", "x")]
    summaries = [
        {"TrainingJobName": name, "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:1:training-job/{name}",
         "CreationTime": "2026-01-01", "TrainingJobStatus": "InProgress"}
        for name in names
    ]  # fmt: skip
    listing = {"NameContains": original.digest, "StatusEquals": "InProgress"}  # the lineage's digest: both runs' jobs
    stubbed["sagemaker"].add_response("list_training_jobs", {"TrainingJobSummaries": summaries}, listing)
    stubbed["sagemaker"].add_response("list_tags", {"Tags": [{"Key": "trainstack:execution", "Value": "nightly"}]})
    stubbed["sagemaker"].add_response("stop_training_job", {}, {"TrainingJobName": names[0]})
    stopped = stop.handler({"detail": {"input": json.dumps(first), "name": "nightly", "status": "ABORTED"}})["stopped"]
    assert stopped == [names[0]]  # the stopped run's own job, not the resumed run's
    stubbed["sagemaker"].add_response("list_training_jobs", {"TrainingJobSummaries": summaries}, listing)
    stubbed["sagemaker"].add_response("list_tags", {"Tags": []})  # created before jobs carried the tag: stopped
    stubbed["sagemaker"].add_response("stop_training_job", {}, {"TrainingJobName": names[1]})
    resume_event = {"detail": {"input": json.dumps({**first, "resume": True}), "name": "nightly-resume-1", "status": "FAILED"}}
    assert stop.handler(resume_event)["stopped"] == [names[1]]  # and the resumed run stops only its own


def test_notify_prints_a_restarted_trials_restarts_for_the_dashboard(stubbed, capsys):
    restarted = _describe_failed(stubbed, "AlgorithmError: rank 1: StepTimeout: no optimizer step completed for 312 s", [])
    stubbed["sns"].add_response("publish", {"MessageId": "1"})
    notify.handler({"results": [restarted]})
    lines = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    (restarts,) = [line for line in lines if "FailureKind" in line]
    assert (restarts["Prefix"], restarts["FailureKind"], restarts["Restarts"]) == ("trainstack", "infrastructure", 1)
