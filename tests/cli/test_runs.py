"""What `status` and `runs` make of the APIs' answers: trials, cost so far, metrics, position."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from trainstack import facts
from trainstack.identity import Run
from trainstack.run_report import mlflow_ui_call
from trainstack_cli.run_reading import mlflow_ui_link
from trainstack_cli.runs import (
    Attempted,
    RunView,
    latest_metrics,
    position,
    run_account,
    run_identity,
    run_view,
    trial_index,
    trial_view,
)
from trainstack_cli.stack import EXIT_BAD_INPUT, EXIT_NO_STACK, CliError, aws_errors, find_stack
from trainstack_cli.views import console, runs_table, status_view
from trainstack_contract.metric_lines import metric_definitions

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
PRICE = facts.instance("ml.p4d.24xlarge").price_per_hour


def job(**overrides) -> dict:
    return {
        "TrainingJobName": "trainstack-gpt-0123456789ab-t2",
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Training",
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 4},
        "TrainingStartTime": NOW - timedelta(minutes=30),
        **overrides,
    }


def test_a_training_job_costs_its_instances_times_the_seconds_since_it_started_training():
    trial = trial_view(job(), NOW)

    assert trial.billable_seconds == 1800
    assert trial.cost_usd == pytest.approx(PRICE * 4 * 0.5, abs=1e-4)


def test_an_ended_job_costs_what_sagemaker_billed_on_the_instance_type_it_selected():
    ended = job(
        TrainingJobStatus="Completed",
        TrainingEndTime=NOW,
        BillableTimeInSeconds=600,
        ResourceConfig={
            "InstancePreferences": [{"InstanceType": "ml.p5.48xlarge"}, {"InstanceType": "ml.p4d.24xlarge"}],
            "InstanceCount": 2,
        },
        SelectedInstanceType="ml.p4d.24xlarge",
    )

    trial = trial_view(ended, NOW)

    assert (trial.instance_type, trial.billable_seconds) == ("ml.p4d.24xlarge", 600)
    assert trial.cost_usd == pytest.approx(PRICE * 2 * 600 / 3600, abs=1e-4)


def test_a_run_with_a_trial_of_unknown_price_has_an_unknown_cost_not_a_partial_one():
    known = trial_view(job(), NOW)
    unknown = trial_view(
        job(TrainingJobName="trainstack-gpt-0123456789ab-t3", ResourceConfig={"InstanceType": "ml.x9.nothing"}), NOW
    )
    execution = {"name": "r", "executionArn": "arn", "status": "RUNNING", "startDate": NOW - timedelta(hours=1)}

    run = run_view(execution, [], [unknown, known], NOW)

    assert unknown.cost_usd is None and run.cost_usd is None
    assert [t.trial for t in run.trials] == [2, 3] and run.duration_seconds == 3600


def test_metrics_are_each_definitions_last_value_in_the_log():
    lines = ["step=5 loss=4.5 tokens_per_sec=10.0", "noise loss=oops", "step=10 loss=4.25 tokens_per_sec=12.5"]

    found = latest_metrics(metric_definitions(), lines)

    assert found == {"train:step": 10, "train:loss": 4.25, "train:tokens_per_sec": 12.5}


def test_an_ended_job_without_log_metrics_shows_sagemakers_final_metrics():
    ended = job(TrainingJobStatus="Completed", FinalMetricDataList=[{"MetricName": "train:loss", "Value": 3.5}])

    assert trial_view(ended, NOW).metrics == {"train:loss": 3.5}


def test_a_restarted_jobs_failure_says_whose_it_was_its_attempt_and_the_steps_it_lost():
    failed = job(
        TrainingJobName="trainstack-gpt-0123456789ab-t2-a1",
        TrainingJobStatus="Failed",
        FailureReason="AlgorithmError: rank 3: StepTimeout: no optimizer step completed for 301 s",
        FinalMetricDataList=[
            {"MetricName": "train:step", "Value": 130.0},
            {"MetricName": "train:checkpoint_step", "Value": 100.0},
        ],
    )

    trial = trial_view(failed, NOW)

    assert (trial.attempt, trial.failure, trial.steps_lost) == (1, "infrastructure (hang)", 30)
    assert "infrastructure (hang) failure; newest checkpoint step 100, 30 steps lost" in _printed(trial)


def test_status_says_where_a_tracked_jobs_mlflow_run_is():
    arn = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/team"
    tracked = job(
        MlflowConfig={"MlflowResourceArn": arn, "MlflowExperimentName": "gpt", "MlflowRunName": "trainstack-gpt-0123456789ab-t2"},
        MlflowDetails={"MlflowExperimentId": "7", "MlflowRunId": "f00d"},
    )

    printed = " ".join(_printed(trial_view(tracked, NOW)).split())  # the console wraps long lines

    assert f"MLflow run trainstack-gpt-0123456789ab-t2 (id f00d, experiment id 7) in experiment gpt on {arn}" in printed
    assert "MLflow" not in _printed(trial_view(job(), NOW))


def _printed(trial) -> str:
    """What `trainstack status` prints for a run of this one trial, off a terminal."""
    run = RunView("r", "arn:aws:states:us-east-1:1:execution:m:r", "RUNNING", "WaitForJob", "", "", 0, "", [trial])
    out = io.StringIO()
    console(out).print(status_view(run))
    return out.getvalue()


def test_the_position_is_the_last_state_the_execution_entered():
    history = [
        {"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": "Validate"}},
        {"type": "TaskStateExited", "stateExitedEventDetails": {"name": "Validate"}},
        {"type": "WaitStateEntered", "stateEnteredEventDetails": {"name": "WaitForJob"}},
    ]

    assert position(history) == "WaitForJob"


def test_a_trial_is_read_from_its_job_name_and_a_single_job_is_trial_zero():
    assert [trial_index(n) for n in ("p-spec-0123456789ab-t12-a1", "p-spec-0123456789ab", "p-spec-0123456789ab-r1a2b3")] == [
        12,
        0,
        0,
    ]


def test_a_run_is_identified_as_the_stop_handler_identifies_it():
    inline = {"name": "exec-1", "input": json.dumps({"spec": {}, "lineage": "nightly"})}
    upload = {
        "name": "x",
        "input": json.dumps({"detail": {"bucket": {"name": "b"}, "object": {"key": "jobs/a.yaml", "version-id": "v1"}}}),
    }

    assert run_identity(inline) == Run("execution:nightly")
    assert run_identity(upload) == Run("s3://b/jobs/a.yaml#v1")


def test_an_unreadable_outputs_file_is_bad_input_and_no_stack_named_is_a_stack_error(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINSTACK_STACK", raising=False)
    monkeypatch.delenv("TRAINSTACK_OUTPUTS", raising=False)
    with pytest.raises(CliError) as missing_file:
        find_stack(None, tmp_path / "nope.json", None, "us-east-1")
    with pytest.raises(CliError) as unnamed:
        find_stack(None, None, None, "us-east-1")

    assert missing_file.value.exit_code == EXIT_BAD_INPUT and "cdk deploy --outputs-file" in str(missing_file.value)
    assert unnamed.value.exit_code == EXIT_NO_STACK and "--stack" in str(unnamed.value)


def test_an_outputs_file_names_the_stack_and_its_values(tmp_path):
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps({"prod": {"TriggerBucketName": "trigger", "StateMachineArn": "arn:sm"}}))

    stack = find_stack(None, Path(outputs), None, "eu-west-1")

    assert (stack.name, stack.region, stack.trigger_bucket, stack.state_machine_arn) == ("prod", "eu-west-1", "trigger", "arn:sm")


@pytest.mark.parametrize(
    ("code", "message", "words"),
    [
        ("InvalidClientTokenId", "The security token included in the request is invalid.", "refused the credentials"),
        ("ValidationError", "Stack with id prod does not exist", "stack prod not found"),
        ("ThrottlingException", "Rate exceeded", "ThrottlingException: Rate exceeded"),
    ],
)
def test_aws_refusals_become_one_line_naming_the_fix(code, message, words):
    with pytest.raises(CliError) as refused, aws_errors("stack prod"):
        raise ClientError({"Error": {"Code": code, "Message": message}}, "DescribeStacks")

    assert words in str(refused.value) and "\n" not in str(refused.value) and refused.value.exit_code == EXIT_NO_STACK


def test_a_trials_history_keeps_spot_interruptions_in_order():
    transitions = [
        {"Status": "Training", "StartTime": NOW - timedelta(minutes=20), "StatusMessage": "Training image download completed."},
        {"Status": "Interrupted", "StartTime": NOW - timedelta(minutes=10), "StatusMessage": "Job interrupted by spot."},
        {"Status": "Training", "StartTime": NOW - timedelta(minutes=5), "StatusMessage": "Restarted from a checkpoint."},
    ]

    trial = trial_view(job(SecondaryStatusTransitions=transitions), NOW)

    assert [(t.status, t.message) for t in trial.transitions] == [(t["Status"], t["StatusMessage"]) for t in transitions]


def test_a_spec_named_like_a_trial_is_not_read_as_one():
    name = Run("s3://b/jobs/x.yaml#v1").trial().job_name("p", "gpt-t5-small")  # a single job, not trial 5
    assert trial_index(name) == 0
    assert trial_index(Run("s3://b/jobs/x.yaml#v1").trial(2).job_name("p", "gpt-t5-small", attempt=1)) == 2


def test_off_a_terminal_the_runs_table_prints_every_value_whole(tmp_path):
    long_name = "trainstack-" + "a-very-long-spec-name-" * 3 + "0123456789ab"
    run = RunView(long_name, "arn:aws:states:us-east-1:1:execution:sm:x", "RUNNING", "WaitForJob", "2026-11-25 10:00", "", 5, "")
    with (tmp_path / "out.txt").open("w") as piped:
        console(piped).print(runs_table([run]))
    printed = (tmp_path / "out.txt").read_text()
    assert long_name in printed and "WaitForJob" in printed and "…" not in printed
    assert "est. cost" in printed and "estimate: billable seconds x" in printed  # a cost is said to be an estimate


def test_runs_and_status_show_the_goodput_so_far_of_a_job_still_training():
    # 30 minutes on 4 instances, of which 600 steps of 2 s stepped: 20 of the 30 minutes were productive
    running = job(CreationTime=NOW - timedelta(minutes=31))
    account = run_account([Attempted(0, running, {"train:step": 600, "train:step_time": 2.0})], NOW)
    execution = {"name": "r", "executionArn": "arn:aws:states:us-east-1:1:execution:m:r", "status": "RUNNING", "startDate": NOW}
    run = run_view(execution, [], [trial_view(running, NOW)], NOW, account)
    listed, shown = io.StringIO(), io.StringIO()
    console(listed).print(runs_table([run]))
    console(shown).print(status_view(run))
    assert (account["billed"], account["productive"], account["waiting"]) == (7200, 4800, 240)
    assert run.to_json()["goodput"]["goodput"] == pytest.approx(2 / 3, abs=1e-4)
    assert "goodput" in listed.getvalue() and "67%" in listed.getvalue()
    assert "goodput 67% of 7,200 billed instance-seconds" in " ".join(shown.getvalue().split())


def test_every_command_and_option_of_the_cli_says_what_it_does():
    from trainstack_cli.main import build_parser

    undocumented = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {choice.dest: choice.help for choice in action._choices_actions}
                for name, sub in action.choices.items():
                    if not helps.get(name):
                        undocumented.append(f"{path} {name}")
                    walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                undocumented.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "trainstack")
    assert undocumented == []


@pytest.mark.parametrize(
    ("arn", "call"),
    [
        (
            "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/team",
            ("create_presigned_mlflow_tracking_server_url", {"TrackingServerName": "team", "ExpiresInSeconds": 300}),
        ),
        (
            "arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-GBU5I6LYU4G7",
            (
                "create_presigned_mlflow_app_url",
                {"Arn": "arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-GBU5I6LYU4G7", "ExpiresInSeconds": 300},
            ),
        ),
    ],
)
def test_the_ui_link_of_a_tracked_job_is_asked_of_its_server_kind_for_as_long_as_the_api_allows(arn, call):
    assert mlflow_ui_call(job(MlflowConfig={"MlflowResourceArn": arn})) == call
    assert mlflow_ui_call(job()) is None


def test_status_prints_the_signed_in_ui_link_and_without_one_only_the_runs_reference():
    arn = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/team"
    trial = trial_view(job(MlflowConfig={"MlflowResourceArn": arn}), NOW)
    with_link = " ".join(_printed(dataclasses.replace(trial, mlflow_ui="https://t-1.example/auth?authToken=x")).split())
    assert "MLflow UI, signed in for 5 minutes: https://t-1.example/auth?authToken=x" in with_link
    assert "MLflow UI" not in _printed(trial) and "MLflow run" in " ".join(_printed(trial).split())


def test_a_ui_link_that_cannot_be_made_leaves_status_with_the_runs_reference():
    class Refusing:
        def create_presigned_mlflow_tracking_server_url(self, **arguments):
            raise ClientError(
                {"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "CreatePresignedMlflowTrackingServerUrl"
            )

    class Stack:
        def client(self, service):
            return Refusing()

    arn = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/team"
    assert mlflow_ui_link(Stack(), job(MlflowConfig={"MlflowResourceArn": arn})) == ""
