"""Failures rehearsed on the served twin with `trainstack local fault`, as a user would before they happen
on AWS: the control plane failing for a while, or intermittently, leaves a healthy job training to
completion with no restart; a spot reclaim is SageMaker's to handle, and the job resumes from its
checkpoints; a Batch preemption of a queued job is no failure and no restart, and the job resumes from
its checkpoints; a stopped run's queued job is terminated while the Stop function's calls fail."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import yaml

from tests.cli.served import BIN, Served, serving
from trainstack.polling import poll_until
from trainstack_cli.stack import EXIT_BAD_INPUT, EXIT_NO_STACK

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def served(default_stack, tmp_path_factory):
    with serving(default_stack.json, tmp_path_factory.mktemp("rehearsal")) as stack:
        yield stack


@pytest.fixture(scope="module")
def served_queue(queue_stack, tmp_path_factory):
    """The served twin of a stack with a team queue, for the rehearsals of queued runs."""
    with serving(queue_stack.json, tmp_path_factory.mktemp("rehearsal-queue")) as stack:
        yield stack


def spec_file(tmp_path, name: str, steps: int, share: str | None = None) -> str:
    """A job spec; with `share`, one that goes through the team queue as that team's, on its own data."""
    spec = {
        "name": name,
        "instance_type": "ml.g5.12xlarge",
        "strategy": "ddp",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": steps, "log_every": 10, "checkpoint_every": 20},
        "inputs": {"train": {"s3_uri": f"s3://trainstack-local-trigger/datasets/{share or 'default'}/sample/", "mode": "File"}},
        "max_runtime": "1h",
        **({"queue": {"share": share}} if share else {}),
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def submit(served, tmp_path, name: str, steps: int, share: str | None = None) -> str:
    """The run of `spec_file`'s spec, submitted with the CLI; with `share`, as that team's."""
    team = ["--team", share] if share else []
    result = served.trainstack("submit", spec_file(tmp_path, name, steps, share), "--inline", "--json", *team)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["run"]


def training(view: dict) -> bool:
    return bool(view["trials"]) and view["trials"][0]["secondary_status"] == "Training"


def fault(served: Served, *arguments: str) -> None:
    """`trainstack local fault ...`, which must take."""
    result = served.trainstack("local", "fault", *arguments)
    assert result.returncode == 0, result.stderr


@contextmanager
def failing_intermittently(served: Served, actions: tuple[str, ...], code: str) -> Iterator[None]:
    """Each of `actions` (SERVICE:Action) answering `code` to 3 of every 4 calls, as a user sets it with
    `trainstack local fault api ... --fail 3 --every 4`; cleared after the block."""
    try:
        for action in actions:
            fault(served, "api", action, "--code", code, "--fail", "3", "--every", "4")
        yield
    finally:
        fault(served, "clear")


def execution_arn(served: Served, run: str) -> str:
    return served.outputs["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{run}"


def execution_end(served: Served, run: str) -> str:
    """The run's execution status once it ends, read from Step Functions (no call a fault here fails)."""
    return poll_until(
        lambda: served.aws_json("stepfunctions", "describe-execution", "--execution-arn", execution_arn(served, run))["status"],
        lambda status: status != "RUNNING",
        timeout=300,
        interval=1,
        what=f"run {run} to end",
    )


def unread_polls(served: Served, run: str) -> list[str]:
    """Why each of the run's polls that could not read its job's status failed, from its execution
    history (the Describe state's answer is Unknown, and the loop asks again at its next poll)."""
    history = served.aws_json("stepfunctions", "get-execution-history", "--execution-arn", execution_arn(served, run))
    polls = [
        json.loads(event["stateExitedEventDetails"]["output"])["job"]
        for event in history["events"]
        if event.get("stateExitedEventDetails", {}).get("name") == "Describe"
    ]
    return [poll["secondary_status"] for poll in polls if poll["status"] == "Unknown"]


def function_log(served: Served, function: str) -> list[str]:
    """What a function of the stack printed, from its log group, as a user reads it with the AWS CLI
    (nothing before its first invocation, which creates the group)."""
    group = f"/aws/lambda/{function}"
    if not served.aws_json("logs", "describe-log-groups", "--log-group-name-prefix", group)["logGroups"]:
        return []
    return [event["message"] for event in served.aws_json("logs", "filter-log-events", "--log-group-name", group)["events"]]


def test_describe_failing_for_a_while_leaves_the_job_training_to_completion_with_no_restart(served, tmp_path):
    # A user follows the run with `submit --wait`; the outage must end neither the run nor the watch.
    command = [str(BIN / "trainstack"), "submit", spec_file(tmp_path, "outage", 300), "--inline", "--wait"]
    following = subprocess.Popen(command, env=served.environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (run,) = re.findall(r"^run (\S+) started", following.stdout.readline())
    served.wait_until(run, training)
    fault = served.trainstack(
        "local", "fault", "api", "sagemaker:DescribeTrainingJob", "--code", "ServiceUnavailable", "--for", "15s"
    )
    assert fault.returncode == 0, fault.stderr
    assert fault.stdout.strip() == "trainstack local fault: sagemaker DescribeTrainingJob answers ServiceUnavailable for 15s"
    _, errors = following.communicate(timeout=300)
    assert following.returncode == 0, errors[-2000:]  # the run succeeded, and the watch lived through the outage
    ended = served.status(run)
    assert ended["status"] == "SUCCEEDED"
    (trial,) = ended["trials"]  # one job: neither stopped nor created again
    assert (trial["status"], trial["attempt"]) == ("Completed", 0)
    unread = unread_polls(served, run)  # the outage did reach the pipeline, whose polls read no status and asked again
    assert any(why.startswith("not read: DescribeTrainingJob: ServiceUnavailable") for why in unread), unread


def test_a_spot_reclaim_is_sagemakers_to_restart_and_the_job_resumes_from_its_checkpoint(served, tmp_path):
    run = submit(served, tmp_path, "reclaimed", steps=600)
    job = served.wait_until(run, lambda view: training(view) and view["trials"][0]["metrics"].get("train:step", 0) >= 40)
    name = job["trials"][0]["job_name"]
    fault = served.trainstack("local", "fault", "spot", name)
    assert fault.returncode == 0, fault.stderr
    ended = served.wait_until(run, lambda view: view["status"] != "RUNNING")
    assert ended["status"] == "SUCCEEDED"
    (trial,) = ended["trials"]
    assert trial["job_name"] == name and trial["attempt"] == 0  # the same job, started again by SageMaker
    transitions = [t["Status"] for t in served.aws_json("sagemaker", "describe-training-job", "--training-job-name", name)[
        "SecondaryStatusTransitions"
    ]]  # fmt: skip
    assert "Interrupted" in transitions
    log = served.trainstack("logs", run)
    assert "resumed from" in log.stdout


def test_a_fault_the_twin_cannot_make_is_one_line_naming_the_fix(served):
    result = served.trainstack("local", "fault", "spot", "no-such-job")
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stderr.strip().splitlines() == [
        "trainstack local: spot: no-such-job is no training job in progress; name one `trainstack status` shows"
    ]


def test_intermittent_api_faults_need_fail_below_every_said_in_one_line(served):
    result = served.trainstack(
        "local", "fault", "api", "sagemaker:DescribeTrainingJob", "--code", "ServiceUnavailable", "--fail", "4", "--every", "4"
    )
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stderr.strip().splitlines() == [
        "trainstack local: --fail 4 --every 4: fail must be at least 1 and below every, e.g. --fail 3 --every 4"
    ]


def test_an_intermittent_api_fault_needs_both_fail_and_every_said_in_one_line(served):
    result = served.trainstack("local", "fault", "api", "sns:Publish", "--code", "ServiceUnavailable", "--fail", "3")
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stderr.strip().splitlines() == [
        "trainstack local: --fail and --every: give both, e.g. --fail 3 --every 4 (the first 3 of every 4 calls fail)"
    ]


def test_without_a_served_twin_a_fault_says_how_to_start_one(served):
    result = served.trainstack("local", "fault", "clear", AWS_ENDPOINT_URL="")
    assert result.returncode == EXIT_NO_STACK
    assert "run `trainstack local serve`" in result.stderr


def test_a_preempted_queued_job_resumes_at_its_checkpoint_and_its_run_reports_one_preemption_and_no_failure(
    served_queue, tmp_path
):
    served = served_queue
    run = submit(served, tmp_path, "preempted", steps=600, share="research")
    served.wait_until(run, lambda view: training(view) and view["trials"][0]["metrics"].get("train:step", 0) >= 40)
    fault = served.trainstack("local", "fault", "preempt", run)
    assert fault.returncode == 0, fault.stderr
    assert fault.stdout.strip().endswith(
        ": preempted by Batch; back in the queue, it resumes from its checkpoints when dispatched again"
    )
    ended = served.wait_until(run, lambda view: view["status"] != "RUNNING")
    listed = served.trainstack("runs").stdout
    shown = served.trainstack("status", run).stdout
    (trial,) = ended["trials"]
    service_job = served.aws_json("batch", "describe-service-job", "--job-id", trial["queue"]["service_job_id"])
    (preempted,) = service_job["preemptionSummary"]["recentPreemptedAttempts"]
    first = preempted["serviceResourceId"]["value"].split("/", 1)[1]
    metrics = served.aws_json("sagemaker", "describe-training-job", "--training-job-name", first)["FinalMetricDataList"]
    checkpoint = int(next(m["Value"] for m in metrics if m["MetricName"] == "train:checkpoint_step"))
    log = served.trainstack("logs", run).stdout

    assert ended["status"] == "SUCCEEDED"
    assert (trial["status"], trial["attempt"], trial["failure"], trial["preemptions"]) == ("Completed", 0, "", 1)
    assert trial["training_job_name"] != first  # Batch dispatched it again as a new training job ...
    assert checkpoint >= 40 and f"at step {checkpoint}, example position" in log  # ... which resumed at the checkpoint
    assert "Completed (SUCCEEDED, share research, priority 0, preempted 1x)" in " ".join(listed.split())
    assert f"{trial['job_name']}: preempted 1x by Batch: no failure and no restart spent" in " ".join(shown.split())
    assert 0 < ended["goodput"]["goodput"] < 1 and "goodput " in shown


def sqs(served: Served, *arguments: str) -> dict:
    # The AWS CLI (v1) puts its own default endpoint on SQS over AWS_ENDPOINT_URL: named again here.
    return served.aws_json("sqs", *arguments, "--endpoint-url", served.environment["AWS_ENDPOINT_URL"])


def subscribed_queue(served: Served, name: str) -> str:
    """An SQS queue subscribed to the stack's topic, as a user subscribes to its notifications; its URL."""
    url = sqs(served, "create-queue", "--queue-name", name)["QueueUrl"]
    queue = sqs(served, "get-queue-attributes", "--queue-url", url, "--attribute-names", "QueueArn")["Attributes"]["QueueArn"]
    subscribe = ["sns", "subscribe", "--topic-arn", served.outputs["TopicArn"], "--protocol", "sqs"]
    served.aws_json(*subscribe, "--notification-endpoint", queue, "--attributes", "RawMessageDelivery=true")
    return url


def notification(served: Served, queue_url: str, run: str) -> dict:
    """The run's notification, of those the subscribed queue received."""
    received = sqs(served, "receive-message", "--queue-url", queue_url, "--max-number-of-messages", "10")
    messages = [json.loads(message["Body"]) for message in received.get("Messages", [])]
    (message,) = [m for m in messages if m["execution_arn"].endswith(f":{run}")]
    return message


# The pipeline's every call while a queued job trains, then its notification: each fails 3 of every 4
# times (botocore's three attempts of one call all fail, then the next call is answered).
INTERMITTENT = ("batch:DescribeServiceJob", "sagemaker:DescribeTrainingJob", "sns:Publish")


def test_a_queued_job_trains_to_completion_through_intermittent_control_plane_failures_with_no_restart_and_is_notified(
    served_queue, tmp_path
):
    served = served_queue
    notifications = subscribed_queue(served, "flaky-notifications")
    with failing_intermittently(served, INTERMITTENT, "ServiceUnavailable"):
        run = submit(served, tmp_path, "flaky", steps=200, share="prod")
        # Followed on Step Functions alone: a user's own reads of the job would count among the failing calls.
        ended = execution_end(served, run)
    assert ended == "SUCCEEDED"
    unread = unread_polls(served, run)  # failures botocore's retries did not absorb reached the pipeline, which asked again
    assert any(why.startswith("not read: DescribeServiceJob: ServiceUnavailable") for why in unread), unread
    assert any(why.startswith("not read: DescribeTrainingJob: ServiceUnavailable") for why in unread), unread
    assert any(line.startswith("SNS Publish: ServiceUnavailable") for line in function_log(served, "trainstack-notify"))
    (trial,) = served.status(run)["trials"]  # one job: neither stopped nor created again
    assert (trial["status"], trial["attempt"], trial["preemptions"]) == ("Completed", 0, 0)
    (notified,) = notification(served, notifications, run)["trials"]  # published, on the fourth call
    assert (notified["status"], notified["restarts"], notified["preemptions"]) == ("Completed", 0, 0)
    (attempt,) = notified["attempts"]
    assert (attempt["status"], attempt["decision"]) == ("Completed", "")


# What Validate calls once per job of the month to read a budgeted team's month: each fails 3 of every 4
# times, so every call needs asking again (one Validate that started over at each failing call would
# spend the state machine's retries on the month's first jobs and never reach the last).
BUDGET_CALLS = ("sagemaker:ListTags", "sagemaker:DescribeTrainingJob")


def test_a_budgeted_teams_run_passes_validate_while_the_calls_reading_its_month_fail_intermittently(served_queue, tmp_path):
    served = served_queue
    month = [submit(served, tmp_path, f"month{index}", steps=10, share="research") for index in range(2)]
    assert [execution_end(served, run) for run in month] == ["SUCCEEDED", "SUCCEEDED"]  # research's jobs of the month
    with failing_intermittently(served, BUDGET_CALLS, "ServiceUnavailable"):
        run = submit(served, tmp_path, "budgeted", steps=10, share="research")
        ended = execution_end(served, run)
    assert ended == "SUCCEEDED"
    asked_again = [line for line in function_log(served, "trainstack-validate") if "asking again" in line]
    for call in ("ListTags", "DescribeTrainingJob"):
        assert any(line.startswith(f"{call} ") and ": ServiceUnavailable" in line for line in asked_again), (call, asked_again)


def set_queue(served: Served, state: str) -> None:
    """Hold the team queue (DISABLED: Batch dispatches nothing from it) or let it go, as an operator does."""
    (environment,) = served.aws_json("batch", "describe-service-environments")["serviceEnvironments"]
    arn = environment["serviceEnvironmentArn"]
    served.aws_json("batch", "update-service-environment", "--service-environment", arn, "--state", state)


# The Stop function's calls, each failing 3 of every 4 times.
STOP_CALLS = ("sagemaker:ListTrainingJobs", "batch:ListServiceJobs", "batch:DescribeServiceJob", "batch:TerminateServiceJob")


def test_a_stopped_runs_waiting_job_is_terminated_while_the_stop_functions_calls_fail_intermittently(served_queue, tmp_path):
    served = served_queue
    set_queue(served, "DISABLED")  # nothing is dispatched: the job waits in the queue
    try:
        run = submit(served, tmp_path, "flakystop", steps=20, share="research")
        waiting = served.wait_until(
            run, lambda view: bool(view["trials"]) and (view["trials"][0]["queue"] or {}).get("status") == "RUNNABLE"
        )
        queued = waiting["trials"][0]["queue"]
        with failing_intermittently(served, STOP_CALLS, "ThrottlingException"):
            # Stopped through Step Functions, as from the console: `trainstack stop` would terminate the job itself.
            stopped = served.aws("stepfunctions", "stop-execution", "--execution-arn", execution_arn(served, run))
            assert stopped.returncode == 0, stopped.stderr
            assert execution_end(served, run) == "ABORTED"
            terminated = f"{run} ABORTED: terminated {queued['job_name']}"
            stop_log = poll_until(
                lambda: function_log(served, "trainstack-stop"),
                lambda lines: any(line.startswith(terminated) for line in lines),
                timeout=60,
                interval=1,
                what="the Stop rule to terminate the waiting job",
            )
    finally:
        set_queue(served, "ENABLED")
    asked_again = [line for line in stop_log if "ThrottlingException" in line and "asking again" in line]
    for subject in ("ListTrainingJobs", "ListServiceJobs", f"TerminateServiceJob {queued['job_name']}"):
        assert any(line.startswith(f"{subject}: ThrottlingException") for line in asked_again), (subject, stop_log)
    ended = served.aws_json("batch", "describe-service-job", "--job-id", queued["service_job_id"])
    assert (ended["status"], ended["isTerminated"]) == ("FAILED", True) and "latestAttempt" not in ended
