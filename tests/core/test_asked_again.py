"""The calls whose failure would lose an event are asked again while AWS fails on its side: Notify's
Publish (the run's notification), and every call of Stop (invoked asynchronously by EventBridge: a
failed invocation leaves the run's jobs billed until Lambda's own retries or its dead-letter queue).
So is each of the calls Validate makes per job of the month to read a budgeted team's month: started
over at each failure, a month of many jobs would never be read whole.
Asserted with botocore's Stubber on the exact calls (each stubbed error is one answer: Stubber takes
botocore's own retries out); the served twin runs them under intermittent failures end to end, as
a user rehearses them (tests/cli/test_rehearsal_served.py)."""

from __future__ import annotations

import json

import pytest
from botocore.stub import ANY

from tests.core.stubbed import ACCOUNT_SERVICES, ENVIRONMENT, stubbed_clients
from tests.core.test_handlers import _description
from tests.core.test_queue_handlers import ENVIRONMENT as QUEUE_ENVIRONMENT
from tests.core.test_queue_handlers import _service_job, _summary
from trainstack.account import read_account
from trainstack.budgets import team_budget
from trainstack.errors import ControlPlaneError
from trainstack.handlers import notify, stop
from trainstack.handlers.environment import asked_again, client
from trainstack.identity import Run
from trainstack.workflow import IN_FUNCTION_RETRY

TRIES = len(IN_FUNCTION_RETRY.waits()) + 1  # each wait, then the last try
EVENT_INPUT = {"detail": {"bucket": {"name": "b"}, "object": {"key": "jobs/x.yaml", "version-id": "v1"}}}
DIGEST = Run("s3://b/jobs/x.yaml#v1").digest


# Local mode's poll interval, which shortens the waits between tries (1, 2, 4, 8 s become 1/60 of that).
SHORT_WAITS = {"FIRST_POLL_SECONDS": "1"}


@pytest.fixture
def stubbed(monkeypatch):
    with stubbed_clients(monkeypatch, {**ENVIRONMENT, **SHORT_WAITS}, ("sagemaker", "sns")) as stubbers:
        yield stubbers


@pytest.fixture
def queued(monkeypatch):
    """A stack with the team queue."""
    with stubbed_clients(monkeypatch, {**QUEUE_ENVIRONMENT, **SHORT_WAITS}, ("sagemaker", "batch")) as stubbers:
        yield stubbers


def _unavailable(stubber, operation: str, times: int) -> None:
    for _ in range(times):
        stubber.add_client_error(operation, service_error_code="ServiceUnavailable", http_status_code=503)


def _stop() -> dict:
    return stop.handler({"detail": {"input": json.dumps(EVENT_INPUT), "name": "exec-1", "status": "ABORTED"}})


def _in_progress(*names: str) -> dict:
    arn = "arn:aws:sagemaker:us-east-1:1:training-job/{}"
    jobs = [
        {"TrainingJobName": n, "TrainingJobArn": arn.format(n), "CreationTime": "2026-01-01", "TrainingJobStatus": "InProgress"}
        for n in names
    ]
    return {"TrainingJobSummaries": jobs}


def test_notify_publishes_once_sns_answers_again(stubbed):
    _unavailable(stubbed["sns"], "publish", TRIES - 1)
    stubbed["sns"].add_response("publish", {"MessageId": "1"})
    results = [{"job_name": "j", "status": "Completed", "failure_reason": ""}]
    assert notify.handler({"results": results}) == {"status": "Completed", "reason": "all trials completed", "notified": True}


def test_notify_reports_the_runs_outcome_unnotified_when_sns_fails_past_every_try(stubbed):
    _unavailable(stubbed["sns"], "publish", TRIES)
    results = [{"job_name": "j", "status": "Completed", "failure_reason": ""}]
    assert notify.handler({"results": results})["notified"] is False


def test_stop_asks_again_for_the_runs_jobs_and_stops_them(stubbed):
    name = f"trainstack-x-{DIGEST}"
    _unavailable(stubbed["sagemaker"], "list_training_jobs", 2)
    stubbed["sagemaker"].add_response("list_training_jobs", _in_progress(name))
    _unavailable(stubbed["sagemaker"], "list_tags", 1)
    stubbed["sagemaker"].add_response("list_tags", {"Tags": [{"Key": "trainstack:execution", "Value": "exec-1"}]})
    _unavailable(stubbed["sagemaker"], "stop_training_job", 3)
    stubbed["sagemaker"].add_response("stop_training_job", {}, {"TrainingJobName": name})
    assert _stop()["stopped"] == [name]


def test_a_job_whose_calls_keep_failing_leaves_stop_to_stop_the_others_then_fail_for_lambda_to_deliver_it_again(stubbed):
    stuck, other = f"trainstack-x-{DIGEST}", f"trainstack-x-{DIGEST}-a1"
    stubbed["sagemaker"].add_response("list_training_jobs", _in_progress(stuck, other))
    _unavailable(stubbed["sagemaker"], "list_tags", TRIES)
    stubbed["sagemaker"].add_response("list_tags", {"Tags": [{"Key": "trainstack:execution", "Value": "exec-1"}]})
    stubbed["sagemaker"].add_response("stop_training_job", {}, {"TrainingJobName": other})
    with pytest.raises(ControlPlaneError) as failed:
        _stop()
    assert f"ListTags {stuck}: ServiceUnavailable" in str(failed.value) and f"stopped ['{other}']" in str(failed.value)


def test_stop_asks_again_for_the_runs_service_jobs_and_terminates_them(queued):
    stubbed = queued
    name = f"trainstack-x-{DIGEST}"
    stubbed["sagemaker"].add_response("list_training_jobs", _in_progress())
    _unavailable(stubbed["batch"], "list_service_jobs", 1)
    stubbed["batch"].add_response("list_service_jobs", {"jobSummaryList": [_summary(name, "job-1", "RUNNING")]})
    _unavailable(stubbed["batch"], "describe_service_job", 1)  # the listing is read again from the start
    stubbed["batch"].add_response("list_service_jobs", {"jobSummaryList": [_summary(name, "job-1", "RUNNING")]})
    stubbed["batch"].add_response(
        "describe_service_job", _service_job("RUNNING", jobName=name, tags={"trainstack:execution": "exec-1"})
    )
    _unavailable(stubbed["batch"], "terminate_service_job", 2)
    stubbed["batch"].add_response("terminate_service_job", {}, {"jobId": "job-1", "reason": "exec-1 ABORTED"})
    assert _stop()["stopped"] == [name]


def _month_page(*jobs: tuple[str, str], token: str | None = None) -> dict:
    arn = "arn:aws:sagemaker:us-east-1:1:training-job/{}"
    summaries = [
        {"TrainingJobName": n, "TrainingJobArn": arn.format(n), "CreationTime": "2026-11-02", "TrainingJobStatus": status}
        for n, status in jobs
    ]
    return {"TrainingJobSummaries": summaries, **({"NextToken": token} if token else {})}


def _tagged(team: str) -> dict:
    return {"Tags": [{"Key": "trainstack:team", "Value": team}]}


def test_a_budgets_month_is_read_asking_each_page_tag_and_description_again_on_its_own(stubbed):
    sagemaker = stubbed["sagemaker"]
    _unavailable(sagemaker, "list_training_jobs", 1)
    sagemaker.add_response("list_training_jobs", _month_page(("a", "Completed"), token="page2"))
    _unavailable(sagemaker, "list_tags", 1)
    sagemaker.add_response("list_tags", _tagged("research"))
    _unavailable(sagemaker, "describe_training_job", 1)
    billed_a = {**_description("Completed"), "TrainingJobName": "a", "BillableTimeInSeconds": 3600}
    sagemaker.add_response("describe_training_job", billed_a, {"TrainingJobName": "a"})
    _unavailable(sagemaker, "list_training_jobs", 1)  # the second page, asked again with its token
    sagemaker.add_response(
        "list_training_jobs",
        _month_page(("b", "Completed"), ("c", "Completed")),
        {"CreationTimeAfter": ANY, "NextToken": "page2"},
    )
    sagemaker.add_response("list_tags", _tagged("prod"))  # another team's: not described
    _unavailable(sagemaker, "list_tags", 1)
    sagemaker.add_response("list_tags", _tagged("research"))
    billed_c = {**billed_a, "TrainingJobName": "c", "BillableTimeInSeconds": 1800}
    sagemaker.add_response("describe_training_job", billed_c, {"TrainingJobName": "c"})

    budget = team_budget(client, "research", 500.0, [], ask=asked_again)

    (a, a_usd), (c, c_usd) = budget.spent
    assert (a, c) == ("a", "c") and a_usd == pytest.approx(2 * c_usd) and a_usd > 0


def test_a_budget_whose_account_read_missed_the_jobs_in_progress_reads_them_itself_asking_again(stubbed):
    sagemaker = stubbed["sagemaker"]
    _unavailable(sagemaker, "list_training_jobs", 1)
    sagemaker.add_response("list_training_jobs", _in_progress("r"), {"StatusEquals": "InProgress"})
    _unavailable(sagemaker, "describe_training_job", 1)
    sagemaker.add_response(
        "describe_training_job", {**_description("InProgress"), "TrainingJobName": "r"}, {"TrainingJobName": "r"}
    )
    sagemaker.add_response("list_tags", _tagged("research"))
    sagemaker.add_response("list_training_jobs", _month_page(("r", "InProgress")))  # the month: r is not ended

    budget = team_budget(client, "research", 500.0, None, ask=asked_again)  # None: the account read could not list them

    ((name, usd),) = budget.committed
    assert name == "r" and usd > 0  # what the running job may still cost counts against the budget


def test_an_account_read_that_cannot_list_the_jobs_in_progress_leaves_them_unknown_not_none(monkeypatch):
    with stubbed_clients(monkeypatch, ENVIRONMENT, ACCOUNT_SERVICES) as stubbers:
        stubbers["service-quotas"].add_response("list_service_quotas", {"Quotas": []}, {"ServiceCode": "sagemaker"})
        _unavailable(stubbers["sagemaker"], "list_training_jobs", 1)
        stubbers["ec2"].add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": []})
        view = read_account(client, "us-east-1", ["ml.p4d.24xlarge"], [])
    assert view.jobs_in_progress is None  # so a team's budget reads them itself (above)
    assert any(line.startswith("SageMaker training jobs in progress (in use: not counted)") for line in view.unreadable)
