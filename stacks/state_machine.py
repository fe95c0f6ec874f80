"""The pipeline's state machine: the graph that turns a validated job spec into training jobs.

Validate -> Map over trials (one trial without a sweep):
    Create (throttling retried; capacity retried with backoff, then reported as NotStarted)
    -> Wait (doubling to 30 min) -> Describe -> Choice (InProgress/Stopping: wait again; failed
       for capacity: create it again after 5, 10, 20 min; failed for a reason that is not the
       user's: restart it under the spec's `restarts` after 1, 2, 4 ... min; both resume from the
       trial's checkpoints)
-> Notify (one message per run) -> Succeed, or Fail with the reason as Cause.

The states are built in the pipeline construct's scope (not a construct of their own), so their
construct paths, and so the template's logical ids, are the pipeline's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.log_groups import encrypted_log_group
from stacks.roles import ManagedPolicyRole
from trainstack.workflow import (
    CAPACITY_REFUSED_RETRY,
    COMPLETED,
    CONTROL_PLANE_RETRY,
    DEADLINE_PASSED,
    LAMBDA_RETRY,
    NOT_STARTED,
    NOTIFY_FAILED,
    RUNNING,
    STEP_FUNCTIONS_MAX_SECONDS,
    UNWATCHED,
    WATCH_LAMBDA_RETRY,
    RetryPolicy,
)

# Each run is bounded by its own deadline (Validate derives it from the spec; the trial loop checks
# it), so the state machine's timeout is the longest Step Functions allows, never a guess that
# would abort a long sweep.
EXECUTION_TIMEOUT = Duration.seconds(STEP_FUNCTIONS_MAX_SECONDS)


@dataclass(frozen=True)
class StateMachineProps:
    """What the graph needs: the task functions by handler name, and how its execution log is kept."""

    functions: Mapping[str, lambda_.IFunction]
    key: kms.IKey
    log_retention_days: int
    removal_policy: RemovalPolicy


def build_state_machine(scope: Construct, props: StateMachineProps) -> sfn.StateMachine:
    """The Standard state machine, its role and its log group, created in `scope` (the pipeline)."""
    functions = props.functions
    validate = _invoke(
        scope,
        "Validate",
        functions["validate"],
        payload=sfn.TaskInput.from_object(
            {"input": sfn.JsonPath.entire_payload, "execution": sfn.JsonPath.string_at("$$.Execution.Name")}
        ),
    )
    notify_rejected = _invoke(
        scope,
        "NotifyRejected",
        functions["notify"],
        payload=sfn.TaskInput.from_object({"error": sfn.JsonPath.object_at("$.error"), "execution": sfn.JsonPath.execution_id}),
    )
    rejected = sfn.Fail(scope, "Rejected", error_path="$.status", cause_path="$.reason")
    _add_retry(validate, CONTROL_PLANE_RETRY)  # S3 failing on its side is no reason to reject a spec
    validate.add_catch(notify_rejected.next(rejected), errors=["States.ALL"], result_path="$.error")
    # Notify reports a failed Publish itself; this is for Notify failing as a function.
    notify_failed = sfn.Fail(scope, "NotifyFailed", error=NOTIFY_FAILED, cause_path="$.notify_error.Cause")
    notify_rejected.add_catch(notify_failed, errors=["States.ALL"], result_path="$.notify_error")

    trial = _trial(scope, functions)
    run = sfn.Map(
        scope,
        "RunTrials",
        items_path="$.trials",
        max_concurrency_path="$.max_concurrency",
        item_selector={
            "spec": sfn.JsonPath.object_at("$.spec"),
            "resolution": sfn.JsonPath.object_at("$.resolution"),  # Validate's, so Create resolves nothing again
            "run": sfn.JsonPath.object_at("$.run"),
            "team": sfn.JsonPath.string_at("$.team"),  # Validate's: where the spec came from
            "trial_count": sfn.JsonPath.number_at("$.trial_count"),
            "trial": sfn.JsonPath.object_at("$$.Map.Item.Value"),
            "attempt": 0,
            "attempts": [],  # each ended attempt's record (trainstack/restarts.py), for the run's account
            "deadline": sfn.JsonPath.string_at("$.deadline"),
            "execution": sfn.JsonPath.string_at("$$.Execution.Name"),  # tags its jobs, for Stop
        },
        result_path="$.results",
    )
    run.item_processor(trial)
    notify = _invoke(
        scope,
        "Notify",
        functions["notify"],
        payload=sfn.TaskInput.from_object(
            {
                "results": sfn.JsonPath.object_at("$.results"),
                "execution": sfn.JsonPath.execution_id,
                "team": sfn.JsonPath.string_at("$.team"),  # the dashboard's per-team figures
            }
        ),
    )
    notify.add_catch(notify_failed, errors=["States.ALL"], result_path="$.notify_error")
    outcome = (
        sfn.Choice(scope, "RunOutcome")
        .when(sfn.Condition.string_equals("$.status", COMPLETED), sfn.Succeed(scope, "Completed"))
        .otherwise(sfn.Fail(scope, "Failed", error_path="$.status", cause_path="$.reason"))
    )
    # The Map failing as a whole (not one trial) is reported as the run's failure, never dropped.
    notify_lost = _invoke(
        scope,
        "NotifyRunLost",
        functions["notify"],
        payload=sfn.TaskInput.from_object(
            {"error": sfn.JsonPath.object_at("$.error"), "stage": "run", "execution": sfn.JsonPath.execution_id}
        ),
    )
    notify_lost.add_catch(notify_failed, errors=["States.ALL"], result_path="$.notify_error")
    run.add_catch(notify_lost.next(outcome), errors=["States.ALL"], result_path="$.error")
    definition = validate.next(run).next(notify).next(outcome)
    return sfn.StateMachine(
        scope,
        "StateMachine",
        role=ManagedPolicyRole(scope, "StateMachineRole", assumed_by=iam.ServicePrincipal("states.amazonaws.com")),
        definition_body=sfn.DefinitionBody.from_chainable(definition),
        state_machine_type=sfn.StateMachineType.STANDARD,
        timeout=EXECUTION_TIMEOUT,
        tracing_enabled=True,
        logs=sfn.LogOptions(
            destination=encrypted_log_group(
                scope,
                "StateMachineLogs",
                key=props.key,
                retention_days=props.log_retention_days,
                removal_policy=props.removal_policy,
            ),
            level=sfn.LogLevel.ALL,
            include_execution_data=True,
        ),
    )


def _trial(scope: Construct, functions: Mapping[str, lambda_.IFunction]) -> sfn.IChainable:
    """One trial, the Map's item: Create -> Wait -> Describe -> JobStatus, until the job ends."""
    create = _invoke(scope, "Create", functions["create"], result_path="$.job")
    _add_retry(create, CONTROL_PLANE_RETRY)
    _add_retry(create, CAPACITY_REFUSED_RETRY)
    not_started = sfn.Pass(
        scope, "TrialNotStarted", parameters={"status": NOT_STARTED, "error": sfn.JsonPath.object_at("$.error")}
    )
    create.add_catch(not_started, errors=["States.ALL"], result_path="$.error")
    wait = sfn.Wait(scope, "WaitForJob", time=sfn.WaitTime.seconds_path("$.job.poll_seconds"))
    describe = _invoke(
        scope,
        "Describe",
        functions["describe"],
        payload=sfn.TaskInput.from_object(
            {
                "job_name": sfn.JsonPath.string_at("$.job.job_name"),
                "service_job_id": sfn.JsonPath.string_at("$.job.service_job_id"),  # "" unless queued
                "poll_seconds": sfn.JsonPath.number_at("$.job.poll_seconds"),
                "attempts": sfn.JsonPath.list_at("$.attempts"),
                "restarts": sfn.JsonPath.object_at("$.spec.restarts"),
                "run_started": sfn.JsonPath.string_at("$$.Execution.StartTime"),
            }
        ),
        result_path="$.job",
        lambda_retry=WATCH_LAMBDA_RETRY,
    )
    # Describe answers a control-plane error with the status Unknown, and the loop asks again. Any other
    # failure (access to the job denied, the job gone, Lambda failing past an hour of retries) ends the
    # trial with the reason; the run then fails and its Stop rule stops the job: none runs unwatched.
    unwatched = sfn.Pass(
        scope,
        "TrialUnwatched",
        parameters={
            "status": UNWATCHED,
            "job_name": sfn.JsonPath.string_at("$.job.job_name"),
            "error": sfn.JsonPath.object_at("$.error"),
        },
    )
    describe.add_catch(unwatched, errors=["States.ALL"], result_path="$.error")
    # A job that failed for capacity, or for a reason that is not the user's (Describe decides, under
    # the spec's restarts), is created again (same checkpoints, so it resumes) after a doubling wait.
    next_attempt = sfn.Pass(
        scope,
        "NextAttempt",
        parameters={
            "spec": sfn.JsonPath.object_at("$.spec"),
            "resolution": sfn.JsonPath.object_at("$.resolution"),
            "run": sfn.JsonPath.object_at("$.run"),
            "team": sfn.JsonPath.string_at("$.team"),
            "trial": sfn.JsonPath.object_at("$.trial"),
            "trial_count": sfn.JsonPath.number_at("$.trial_count"),
            "attempt": sfn.JsonPath.math_add(sfn.JsonPath.number_at("$.attempt"), 1),
            "attempts": sfn.JsonPath.list_at("$.job.attempts"),
            "deadline": sfn.JsonPath.string_at("$.deadline"),
            "execution": sfn.JsonPath.string_at("$.execution"),
            "job": sfn.JsonPath.object_at("$.job"),
        },
    )
    backoff = sfn.Wait(scope, "RetryBackoff", time=sfn.WaitTime.seconds_path("$.job.retry_wait_seconds"))
    next_attempt.next(backoff).next(create)
    trial_finished = sfn.Pass(scope, "TrialFinished", output_path="$.job")
    running = sfn.Condition.or_(*(sfn.Condition.string_equals("$.job.status", status) for status in RUNNING))
    retry = sfn.Condition.boolean_equals("$.job.retry", True)
    # Still running past the run's deadline: the trial ends, the run fails and its Stop rule stops the job.
    deadline_passed = sfn.Pass(
        scope,
        "TrialDeadlinePassed",
        parameters={
            "status": DEADLINE_PASSED,
            "job_name": sfn.JsonPath.string_at("$.job.job_name"),
            "failure_reason": sfn.JsonPath.format(
                "still {} when the run deadline {} passed, stopped with the run",
                sfn.JsonPath.string_at("$.job.status"),
                sfn.JsonPath.string_at("$.deadline"),
            ),
        },
    )
    past_deadline = sfn.Condition.and_(
        running, sfn.Condition.timestamp_greater_than_json_path("$$.State.EnteredTime", "$.deadline")
    )
    status = (
        sfn.Choice(scope, "JobStatus")
        .when(past_deadline, deadline_passed)
        .when(running, wait)
        .when(retry, next_attempt)
        .otherwise(trial_finished)
    )
    return create.next(wait).next(describe).next(status)


def _invoke(
    scope: Construct,
    construct_id: str,
    function: lambda_.IFunction,
    lambda_retry: RetryPolicy = LAMBDA_RETRY,
    **options: object,
) -> tasks.LambdaInvoke:
    """A task calling `function` with its output as the result, Lambda's own failures retried as
    `lambda_retry` says (in place of CDK's default retrier, which would match them first)."""
    task = tasks.LambdaInvoke(
        scope,
        construct_id,
        lambda_function=function,
        payload_response_only=True,
        retry_on_service_exceptions=False,
        **options,
    )
    _add_retry(task, lambda_retry)
    return task


def _add_retry(task: tasks.LambdaInvoke, policy: RetryPolicy) -> None:
    task.add_retry(
        errors=list(policy.errors),
        interval=Duration.seconds(policy.interval_seconds),
        max_attempts=policy.max_attempts,
        backoff_rate=policy.backoff_rate,
        max_delay=Duration.seconds(policy.max_delay_seconds) if policy.max_delay_seconds else None,
    )
