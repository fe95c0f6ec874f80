"""The pipeline as synthesized: state machine, Lambdas, triggers, alarms, least privilege."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from aws_cdk.assertions import Match

from stacks.lambda_asset import LAMBDA_PYTHON
from tests.synth import synthesize
from trainstack.stack_context import FIELDS
from trainstack.workflow import LAMBDA_SERVICE_ERRORS, STEP_FUNCTIONS_MAX_SECONDS, WATCH_LAMBDA_RETRY
from trainstack_local.definition import render_definition


@pytest.fixture(scope="module")
def definition(default_stack) -> dict:
    return render_definition(default_stack.json)


def _states(definition: dict) -> dict:
    states = dict(definition["States"])
    states.update(definition["States"]["RunTrials"]["ItemProcessor"]["States"])
    return states


def test_standard_state_machine_logs_everything_and_traces(default_stack):
    default_stack.template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineType": "STANDARD",
            "TracingConfiguration": {"Enabled": True},
            "LoggingConfiguration": Match.object_like({"Level": "ALL", "IncludeExecutionData": True}),
        },
    )


def test_execution_timeout_outlasts_the_longest_job(definition):
    assert definition["TimeoutSeconds"] > 28 * 86400  # MaxWaitTimeInSeconds is at most 28 days


def test_capacity_refusals_are_retried_with_bounded_backoff_then_reported(definition):
    create = _states(definition)["Create"]
    capacity = next(r for r in create["Retry"] if r["ErrorEquals"] == ["CapacityUnavailableError"])
    assert (capacity["IntervalSeconds"], capacity["MaxAttempts"], capacity["BackoffRate"], capacity["MaxDelaySeconds"]) == (
        300,
        4,
        2,
        3600,
    )
    assert any(r["ErrorEquals"] == ["ControlPlaneError"] for r in create["Retry"])
    assert create["Catch"][0]["Next"] == "TrialNotStarted"


def test_every_job_status_is_handled(definition):
    choice = _states(definition)["JobStatus"]
    (loop,) = [c for c in choice["Choices"] if c["Next"] == "WaitForJob"]
    # Unknown: Describe could not read the status (a control-plane error); the loop asks again
    assert {c["StringEquals"] for c in loop["Or"]} == {"InProgress", "Stopping", "Unknown"}
    assert choice["Default"] == "TrialFinished"  # Completed, Failed, Stopped end the trial with their status
    assert _states(definition)["WaitForJob"]["SecondsPath"] == "$.job.poll_seconds"


def test_a_job_describe_says_to_retry_is_created_again_after_its_backoff_keeping_the_attempts(definition):
    # Describe decides (a capacity re-creation or a restart, each bounded: trainstack/restarts.py)
    states = _states(definition)
    (retry,) = [c for c in states["JobStatus"]["Choices"] if c["Next"] == "NextAttempt"]
    assert retry == {"Variable": "$.job.retry", "BooleanEquals": True, "Next": "NextAttempt"}
    assert states["NextAttempt"]["Parameters"]["attempt.$"] == "States.MathAdd($.attempt, 1)"
    assert states["NextAttempt"]["Parameters"]["attempts.$"] == "$.job.attempts"
    assert states["RetryBackoff"]["SecondsPath"] == "$.job.retry_wait_seconds"
    assert (states["NextAttempt"]["Next"], states["RetryBackoff"]["Next"]) == ("RetryBackoff", "Create")


def test_describe_reads_the_attempts_so_far_the_specs_restarts_and_when_the_run_started(definition):
    parameters = _states(definition)["Describe"]["Parameters"]
    assert (parameters["attempts.$"], parameters["restarts.$"]) == ("$.attempts", "$.spec.restarts")
    assert parameters["run_started.$"] == "$$.Execution.StartTime"


def test_runs_fail_with_the_reason_as_cause(definition):
    for name in ("Failed", "Rejected"):
        assert definition["States"][name]["CausePath"] == "$.reason"


def test_sweeps_run_in_a_map_with_the_specs_concurrency(definition):
    assert definition["States"]["RunTrials"]["MaxConcurrencyPath"] == "$.max_concurrency"


def test_uploads_of_specs_and_data_markers_start_runs(default_stack):
    keys = [
        r["Properties"]["EventPattern"]["detail"]["object"]["key"]
        for r in default_stack.resources("AWS::Events::Rule").values()
        if r["Properties"]["EventPattern"]["source"] == ["aws.s3"]
    ]
    assert sorted(json.dumps(k) for k in keys) == sorted(
        [
            json.dumps([{"wildcard": "jobs/*.yaml"}, {"wildcard": "jobs/*.yml"}, {"wildcard": "jobs/*.json"}]),
            json.dumps([{"wildcard": "datasets/*/_SUCCESS"}]),
        ]
    )


def test_stopped_timed_out_or_failed_executions_stop_their_jobs(default_stack):
    default_stack.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "source": ["aws.states"],
                "detail-type": ["Step Functions Execution Status Change"],
                "detail": Match.object_like({"status": ["ABORTED", "TIMED_OUT", "FAILED"]}),
            }
        },
    )


def test_every_task_in_a_trial_ends_the_trial_with_its_reason_when_it_fails(definition):
    trial = definition["States"]["RunTrials"]["ItemProcessor"]["States"]
    tasks = {name: state for name, state in trial.items() if state["Type"] == "Task"}
    assert set(tasks) == {"Create", "Describe"}
    for name, task in tasks.items():
        (catch,) = task["Catch"]
        assert catch["ErrorEquals"] == ["States.ALL"], name
        assert trial[catch["Next"]]["Type"] == "Pass" and trial[catch["Next"]].get("End") is True, name


def test_validate_retries_the_control_planes_errors_before_any_rejection(definition):
    validate = definition["States"]["Validate"]
    assert any(r["ErrorEquals"] == ["ControlPlaneError"] for r in validate["Retry"])
    assert validate["Catch"][0]["ErrorEquals"] == ["States.ALL"]  # what is left is the spec's own refusal


def test_describe_retries_lambdas_own_failures_for_about_an_hour_before_giving_the_trial_up(definition):
    describe = _states(definition)["Describe"]
    (lambda_retry,) = describe["Retry"]  # the API's errors are answered as Unknown by the function itself
    assert set(lambda_retry["ErrorEquals"]) == set(LAMBDA_SERVICE_ERRORS)
    assert 3000 <= WATCH_LAMBDA_RETRY.total_wait_seconds() <= 5400
    assert (lambda_retry["IntervalSeconds"], lambda_retry["MaxAttempts"], lambda_retry["MaxDelaySeconds"]) == (
        WATCH_LAMBDA_RETRY.interval_seconds,
        WATCH_LAMBDA_RETRY.max_attempts,
        WATCH_LAMBDA_RETRY.max_delay_seconds,
    )
    assert describe["Catch"][0]["Next"] == "TrialUnwatched"


def test_every_task_retries_lambdas_own_failures_with_one_retrier_of_its_own(definition):
    for name, state in _states(definition).items():
        if state["Type"] == "Task":
            matching = [r for r in state["Retry"] if "Lambda.ServiceException" in r["ErrorEquals"]]
            assert len(matching) == 1, name  # CDK's default retrier would match first and cut it short


def test_a_failing_map_is_reported_and_fails_the_run(definition):
    (catch,) = definition["States"]["RunTrials"]["Catch"]
    lost = definition["States"][catch["Next"]]
    assert lost["Type"] == "Task" and lost["Parameters"]["stage"] == "run"
    assert lost["Next"] == "RunOutcome"


def test_every_notification_task_has_a_catch_so_the_run_still_ends(definition):
    notifications = [n for n, s in definition["States"].items() if s["Type"] == "Task" and n.startswith("Notify")]
    assert sorted(notifications) == ["Notify", "NotifyRejected", "NotifyRunLost"]
    for name in notifications:
        assert definition["States"][name]["Catch"][0]["Next"] == "NotifyFailed", name


def test_failed_executions_and_failed_training_jobs_reach_the_encrypted_topic(default_stack):
    default_stack.template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})
    metrics = {r["Properties"]["MetricName"] for r in default_stack.resources("AWS::CloudWatch::Alarm").values()}
    assert metrics == {"ExecutionsFailed", "ExecutionsTimedOut", "ApproximateNumberOfMessagesVisible"}
    default_stack.template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": Match.object_like(
                {
                    "source": ["aws.sagemaker"],
                    "detail": {"TrainingJobStatus": ["Failed"], "TrainingJobName": [{"prefix": "trainstack-"}]},
                }
            )
        },
    )


def test_lambdas_run_the_python_the_asset_is_built_and_tested_for_traced_with_encrypted_environment(default_stack):
    ours = [
        r["Properties"]
        for r in default_stack.resources("AWS::Lambda::Function").values()
        if r["Properties"].get("Handler", "").startswith("trainstack.handlers.")
    ]
    assert len(ours) == 5
    for function in ours:
        assert (function["Runtime"], function["TracingConfig"]) == (f"python{LAMBDA_PYTHON}", {"Mode": "Active"})
        assert "KmsKeyArn" in function


def test_create_may_pass_only_the_execution_role_and_only_to_sagemaker(default_stack):
    statements = [
        s
        for k, p in default_stack.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("PipelineCreateRole")
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    pass_role = next(s for s in statements if s["Action"] == "iam:PassRole")
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    assert "RolesSageMakerExecution" in json.dumps(pass_role["Resource"])
    create = next(s for s in statements if "sagemaker:CreateTrainingJob" in s["Action"])
    assert "training-job/trainstack-*" in json.dumps(create["Resource"])


# The tracking server's value exists only in a stack deployed with one (tests/infra/test_tracking_stack.py).
UNSET_BY_DEFAULT = {
    "mlflow_tracking_server_arn",
    "job_queue_arn",
    "queue_shares",
    "queue_default_share",
    "queue_max_instances",
    "project_image_uri",
    "team_budgets",
}


def test_the_stack_outputs_every_value_a_job_context_is_read_back_from(default_stack):
    assert {spec.output for spec in FIELDS if spec.name not in UNSET_BY_DEFAULT} <= set(default_stack.json["Outputs"])


def test_every_function_gets_every_stack_variable_in_its_environment(default_stack):
    for function in default_stack.resources("AWS::Lambda::Function").values():
        if function["Properties"].get("Handler", "").startswith("trainstack.handlers."):
            expected = {spec.variable for spec in FIELDS if spec.name not in UNSET_BY_DEFAULT}
            assert expected <= set(function["Properties"]["Environment"]["Variables"])


def test_job_name_prefix_follows_the_name_prefix_setting():
    stack = synthesize(name_prefix="team-a")
    statements = [
        s
        for k, p in stack.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith("PipelineCreateRole")
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert "training-job/team-a-*" in json.dumps(statements)


def _role_statements(stack, role_prefix: str) -> list[dict]:
    return [
        s
        for k, p in stack.resources("AWS::IAM::ManagedPolicy").items()
        if k.startswith(role_prefix)
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


ACCOUNT_READS = {
    "servicequotas:ListServiceQuotas",
    "sagemaker:ListTrainingJobs",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeSubnets",
}


def test_validate_reads_the_accounts_quotas_jobs_in_progress_and_offerings_and_may_change_none(default_stack):
    statements = _role_statements(default_stack, "PipelineValidateRole")
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert ACCOUNT_READS | {"sagemaker:DescribeTrainingJob"} <= actions
    assert not any(
        a.startswith(("servicequotas:Request", "servicequotas:Put", "ec2:Create", "sagemaker:Create")) for a in actions
    )
    (describe,) = [s for s in statements if s["Action"] == "sagemaker:DescribeTrainingJob"]
    assert describe["Resource"]["Fn::Join"][1][-1] == ":training-job/*"  # any job of the account, read only


def test_only_validate_reads_the_account(default_stack):
    for role in ("PipelineCreateRole", "PipelineDescribeRole", "PipelineNotifyRole", "PipelineStopRole"):
        found = json.dumps(_role_statements(default_stack, role))
        assert not any(action in found for action in ACCOUNT_READS - {"sagemaker:ListTrainingJobs"}), role


@pytest.mark.gates
def test_the_definition_passes_asl_validator(definition, tmp_path):
    npx = shutil.which("npx")
    assert npx, "npx is missing: install Node.js"
    (tmp_path / "asl.json").write_text(json.dumps(definition))
    result = subprocess.run(
        [npx, "--no-install", "asl-validator", "--json-path", str(tmp_path / "asl.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_event_target_retries_for_a_day_then_keeps_the_event_in_an_encrypted_dead_letter_queue(default_stack):
    (queue_id,) = default_stack.resources("AWS::SQS::Queue")
    assert "KmsMasterKeyId" in default_stack.json["Resources"][queue_id]["Properties"]
    rules = default_stack.resources("AWS::Events::Rule").values()
    targets = [t for rule in rules for t in rule["Properties"]["Targets"]]
    assert len(targets) == 4  # spec uploads, data drops, ended executions, failed training jobs
    for target in targets:
        assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [queue_id, "Arn"]}}
        assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}


def test_an_event_in_the_dead_letter_queue_raises_an_alarm_on_the_topic(default_stack):
    (queue_id,) = default_stack.resources("AWS::SQS::Queue")
    (alarm,) = [
        a["Properties"]
        for a in default_stack.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
    ]
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["AlarmActions"] and all("Ref" in action for action in alarm["AlarmActions"])


def test_a_trial_still_running_past_the_runs_deadline_ends_and_fails_the_run(definition):
    trial = definition["States"]["RunTrials"]["ItemProcessor"]["States"]
    first = trial["JobStatus"]["Choices"][0]
    assert {"Variable": "$$.State.EnteredTime", "TimestampGreaterThanPath": "$.deadline"} in first["And"]
    assert first["Next"] == "TrialDeadlinePassed" and trial["TrialDeadlinePassed"]["Parameters"]["status"] == "DeadlinePassed"


def test_every_attempt_of_a_trial_carries_the_runs_deadline(definition):
    assert definition["States"]["RunTrials"]["ItemSelector"]["deadline.$"] == "$.deadline"
    assert _states(definition)["NextAttempt"]["Parameters"]["deadline.$"] == "$.deadline"


def test_the_state_machine_timeout_is_step_functions_limit_so_runs_end_by_their_own_deadline(definition):
    assert definition["TimeoutSeconds"] == STEP_FUNCTIONS_MAX_SECONDS
