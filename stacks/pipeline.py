"""The pipeline: Lambda tasks and a Standard state machine that turn a job spec into a training job.

Validate -> Map over trials (one trial without a sweep):
    Create (throttling retried; capacity retried with backoff, then reported as NotStarted)
    -> Wait (doubling to 30 min) -> Describe -> Choice (InProgress/Stopping: wait again; failed
       for capacity: create it again after 5, 10, 20 min, resuming from its checkpoints)
-> Notify (one message per run) -> Succeed, or Fail with the reason as Cause.
Triggers: jobs/**.yaml|yml|json uploads, datasets/<name>/_SUCCESS markers, direct StartExecution.
An execution that is aborted, times out or fails stops the training jobs it started.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from stacks.compliance import acknowledge, in_every_pack, nag_resource, skip_checkov
from stacks.event_delivery import delivery
from stacks.lambda_asset import LAMBDA_PYTHON, build_lambda_asset
from stacks.log_groups import encrypted_log_group
from stacks.monitoring import notify_on_first
from stacks.roles import ManagedPolicyRole
from trainstack.handlers.environment import lambda_variables
from trainstack.layout import DATASETS_PREFIX, JOBS_PREFIX
from trainstack.naming import training_job_name_prefix
from trainstack.stack_context import StackContext
from trainstack.workflow import (
    CAPACITY_REFUSED_RETRY,
    CAPACITY_RETRIES,
    COMPLETED,
    DATA_MARKER,
    DEADLINE_PASSED,
    ENDED_EARLY,
    NOT_STARTED,
    NOTIFY_FAILED,
    RUNNING,
    STEP_FUNCTIONS_MAX_SECONDS,
    THROTTLED_RETRY,
    UNWATCHED,
    RetryPolicy,
)

HANDLERS = ("validate", "create", "describe", "notify", "stop")
LAMBDA_TRANSIENT = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]
# Each run is bounded by its own deadline (Validate derives it from the spec; the trial loop checks
# it), so the state machine's timeout is the longest Step Functions allows, never a guess that
# would abort a long sweep.
EXECUTION_TIMEOUT = Duration.seconds(STEP_FUNCTIONS_MAX_SECONDS)
SPEC_SUFFIXES = (".yaml", ".yml", ".json")
DEAD_LETTER_RETENTION = Duration.days(14)  # SQS's maximum: time to notice the alarm and redrive


@dataclass(frozen=True)
class JobDefaults:
    """What every training job gets from the stack (becomes the Lambdas' environment)."""

    execution_role: iam.IRole
    artifacts_bucket: s3.IBucket
    key: kms.IKey
    subnet_ids: list[str]
    security_group_id: str
    source_s3_uri: str
    entry_s3_uri: str = ""
    inter_container_encryption: bool = False

    def context(self, region: str, name_prefix: str) -> StackContext:
        """The StackContext these constructs give jobs (tokens until deploy)."""
        return StackContext(
            region=region,
            role_arn=self.execution_role.role_arn,
            artifacts_bucket=self.artifacts_bucket.bucket_name,
            key_arn=self.key.key_arn,
            subnet_ids=tuple(self.subnet_ids),
            security_group_ids=(self.security_group_id,),
            source_s3_uri=self.source_s3_uri,
            entry_s3_uri=self.entry_s3_uri,
            inter_container_encryption=self.inter_container_encryption,
            name_prefix=name_prefix,
        )


class TrainingPipeline(Construct):
    """Exposes `state_machine`, `functions`, `topic`, `dead_letters` (events no target took) and
    `job_context` (what jobs get). Embeddable in another CDK app."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        trigger_bucket: s3.IBucket,
        defaults: JobDefaults,
        topic: sns.ITopic,
        log_retention_days: int = 365,
        default_spec_key: str | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = topic
        stack = Stack.of(self)
        self._key = defaults.key
        self._retention_days = log_retention_days
        self._removal = removal_policy
        code = lambda_.Code.from_asset(str(build_lambda_asset()))
        self.job_context = defaults.context(stack.region, name_prefix)
        environment = lambda_variables(self.job_context, topic_arn=topic.topic_arn, default_spec_key=default_spec_key)
        self.dead_letters = self._dead_letter_queue(topic)  # before the functions: stop's failures go there too
        self.functions = {name: self._function(name, code, environment) for name in HANDLERS}
        jobs_arn = stack.format_arn(
            service="sagemaker", resource="training-job", resource_name=f"{training_job_name_prefix(name_prefix)}*"
        )

        trigger_bucket.grant_read(self.functions["validate"])
        create_role = self.functions["create"].role
        create_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:CreateTrainingJob", "sagemaker:AddTags"], resources=[jobs_arn])
        )
        create_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[defaults.execution_role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
            )
        )
        defaults.key.grant(create_role, "kms:CreateGrant", "kms:DescribeKey")  # encrypted volumes and output
        self.functions["describe"].role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:DescribeTrainingJob"], resources=[jobs_arn])
        )
        stop_role = self.functions["stop"].role
        stop_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:StopTrainingJob", "sagemaker:ListTags"], resources=[jobs_arn])
        )
        stop_role.add_to_principal_policy(iam.PolicyStatement(actions=["sagemaker:ListTrainingJobs"], resources=["*"]))
        topic.grant_publish(self.functions["notify"])

        self.state_machine = self._state_machine()
        self._triggers(trigger_bucket)
        self._acknowledge(jobs_arn, trigger_bucket)

    def _function(self, name: str, code: lambda_.Code, environment: dict[str, str]) -> lambda_.Function:
        role = ManagedPolicyRole(self, f"{name.title()}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        log_group = self._log_group(f"{name.title()}Logs")
        function = lambda_.Function(
            self,
            f"{name.title()}Function",
            runtime=lambda_.Runtime(f"python{LAMBDA_PYTHON}", lambda_.RuntimeFamily.PYTHON),
            handler=f"trainstack.handlers.{name}.handler",
            code=code,
            role=role,
            environment=environment,
            environment_encryption=self._key,
            timeout=Duration.seconds(60),
            memory_size=512,
            tracing=lambda_.Tracing.ACTIVE,
            log_group=log_group,
            # EventBridge invokes stop asynchronously: once Lambda's own two retries fail, the event (jobs
            # still running and billed) waits in the dead-letter queue, whose alarm notifies, instead of vanishing.
            dead_letter_queue=self.dead_letters if name == "stop" else None,
        )
        log_group.grant_write(role)
        if name == "stop":
            self.dead_letters.grant_send_messages(function)  # the encrypted queue also needs the key
        skip_checkov(
            function,
            (
                "CKV_AWS_115",
                "Reserving concurrency fails deploys in accounts at the default limit; the Map's concurrency bounds calls.",
            ),
            ("CKV_AWS_117", "Calls only AWS control-plane APIs; a VPC would need NAT or endpoints that cost money while idle."),
        )
        if name != "stop":
            skip_checkov(
                function,
                (
                    "CKV_AWS_116",
                    "Invoked synchronously by Step Functions, which retries and catches; a DLQ would never receive events.",
                ),
            )
        return function

    def _log_group(self, construct_id: str) -> logs.LogGroup:
        return encrypted_log_group(
            self, construct_id, key=self._key, retention_days=self._retention_days, removal_policy=self._removal
        )

    def _invoke(self, construct_id: str, name: str, **options: object) -> tasks.LambdaInvoke:
        task = tasks.LambdaInvoke(self, construct_id, lambda_function=self.functions[name], payload_response_only=True, **options)
        task.add_retry(errors=LAMBDA_TRANSIENT, interval=Duration.seconds(2), max_attempts=3, backoff_rate=2)
        return task

    def _state_machine(self) -> sfn.StateMachine:
        validate = self._invoke(
            "Validate",
            "validate",
            payload=sfn.TaskInput.from_object(
                {"input": sfn.JsonPath.entire_payload, "execution": sfn.JsonPath.string_at("$$.Execution.Name")}
            ),
        )
        notify_rejected = self._invoke(
            "NotifyRejected",
            "notify",
            payload=sfn.TaskInput.from_object(
                {"error": sfn.JsonPath.object_at("$.error"), "execution": sfn.JsonPath.execution_id}
            ),
        )
        rejected = sfn.Fail(self, "Rejected", error_path="$.status", cause_path="$.reason")
        validate.add_catch(notify_rejected.next(rejected), errors=["States.ALL"], result_path="$.error")
        # Notify reports a failed Publish itself; this is for Notify failing as a function.
        notify_failed = sfn.Fail(self, "NotifyFailed", error=NOTIFY_FAILED, cause_path="$.notify_error.Cause")
        notify_rejected.add_catch(notify_failed, errors=["States.ALL"], result_path="$.notify_error")

        create = self._invoke("Create", "create", result_path="$.job")
        _add_retry(create, THROTTLED_RETRY)
        _add_retry(create, CAPACITY_REFUSED_RETRY)
        not_started = sfn.Pass(
            self, "TrialNotStarted", parameters={"status": NOT_STARTED, "error": sfn.JsonPath.object_at("$.error")}
        )
        create.add_catch(not_started, errors=["States.ALL"], result_path="$.error")
        wait = sfn.Wait(self, "WaitForJob", time=sfn.WaitTime.seconds_path("$.job.poll_seconds"))
        describe = self._invoke(
            "Describe",
            "describe",
            payload=sfn.TaskInput.from_object(
                {
                    "job_name": sfn.JsonPath.string_at("$.job.job_name"),
                    "poll_seconds": sfn.JsonPath.number_at("$.job.poll_seconds"),
                    "attempt": sfn.JsonPath.number_at("$.attempt"),
                }
            ),
            result_path="$.job",
        )
        _add_retry(describe, THROTTLED_RETRY)
        # Past its retries the trial ends with the reason; the run then fails and its Stop rule
        # stops the job, so no job runs on unwatched.
        unwatched = sfn.Pass(
            self,
            "TrialUnwatched",
            parameters={
                "status": UNWATCHED,
                "job_name": sfn.JsonPath.string_at("$.job.job_name"),
                "error": sfn.JsonPath.object_at("$.error"),
            },
        )
        describe.add_catch(unwatched, errors=["States.ALL"], result_path="$.error")
        # A job that failed for capacity is created again (same checkpoints) after a doubling wait.
        next_attempt = sfn.Pass(
            self,
            "NextAttempt",
            parameters={
                "spec": sfn.JsonPath.object_at("$.spec"),
                "run": sfn.JsonPath.object_at("$.run"),
                "trial": sfn.JsonPath.object_at("$.trial"),
                "trial_count": sfn.JsonPath.number_at("$.trial_count"),
                "attempt": sfn.JsonPath.math_add(sfn.JsonPath.number_at("$.attempt"), 1),
                "deadline": sfn.JsonPath.string_at("$.deadline"),
                "execution": sfn.JsonPath.string_at("$.execution"),
                "job": sfn.JsonPath.object_at("$.job"),
            },
        )
        backoff = sfn.Wait(self, "CapacityBackoff", time=sfn.WaitTime.seconds_path("$.job.retry_wait_seconds"))
        next_attempt.next(backoff).next(create)
        trial_finished = sfn.Pass(self, "TrialFinished", output_path="$.job")
        running = sfn.Condition.or_(*(sfn.Condition.string_equals("$.job.status", status) for status in RUNNING))
        retry_capacity = sfn.Condition.and_(
            sfn.Condition.boolean_equals("$.job.capacity_failure", True),
            sfn.Condition.number_less_than("$.attempt", CAPACITY_RETRIES),
        )
        # Still running past the run's deadline: the trial ends, the run fails and its Stop rule stops the job.
        deadline_passed = sfn.Pass(
            self,
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
            sfn.Choice(self, "JobStatus")
            .when(past_deadline, deadline_passed)
            .when(running, wait)
            .when(retry_capacity, next_attempt)
            .otherwise(trial_finished)
        )
        trial = create.next(wait).next(describe).next(status)

        run = sfn.Map(
            self,
            "RunTrials",
            items_path="$.trials",
            max_concurrency_path="$.max_concurrency",
            item_selector={
                "spec": sfn.JsonPath.object_at("$.spec"),
                "run": sfn.JsonPath.object_at("$.run"),
                "trial_count": sfn.JsonPath.number_at("$.trial_count"),
                "trial": sfn.JsonPath.object_at("$$.Map.Item.Value"),
                "attempt": 0,
                "deadline": sfn.JsonPath.string_at("$.deadline"),
                "execution": sfn.JsonPath.string_at("$$.Execution.Name"),  # tags its jobs, for Stop
            },
            result_path="$.results",
        )
        run.item_processor(trial)
        notify = self._invoke(
            "Notify",
            "notify",
            payload=sfn.TaskInput.from_object(
                {"results": sfn.JsonPath.object_at("$.results"), "execution": sfn.JsonPath.execution_id}
            ),
        )
        notify.add_catch(notify_failed, errors=["States.ALL"], result_path="$.notify_error")
        outcome = (
            sfn.Choice(self, "RunOutcome")
            .when(sfn.Condition.string_equals("$.status", COMPLETED), sfn.Succeed(self, "Completed"))
            .otherwise(sfn.Fail(self, "Failed", error_path="$.status", cause_path="$.reason"))
        )
        # The Map failing as a whole (not one trial) is reported as the run's failure, never dropped.
        notify_lost = self._invoke(
            "NotifyRunLost",
            "notify",
            payload=sfn.TaskInput.from_object(
                {"error": sfn.JsonPath.object_at("$.error"), "stage": "run", "execution": sfn.JsonPath.execution_id}
            ),
        )
        notify_lost.add_catch(notify_failed, errors=["States.ALL"], result_path="$.notify_error")
        run.add_catch(notify_lost.next(outcome), errors=["States.ALL"], result_path="$.error")
        definition = validate.next(run).next(notify).next(outcome)
        self._state_machine_role = ManagedPolicyRole(
            self, "StateMachineRole", assumed_by=iam.ServicePrincipal("states.amazonaws.com")
        )
        return sfn.StateMachine(
            self,
            "StateMachine",
            role=self._state_machine_role,
            definition_body=sfn.DefinitionBody.from_chainable(definition),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=EXECUTION_TIMEOUT,
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self._log_group("StateMachineLogs"), level=sfn.LogLevel.ALL, include_execution_data=True
            ),
        )

    def _dead_letter_queue(self, topic: sns.ITopic) -> sqs.Queue:
        """Where EventBridge puts a trigger it could not deliver (StartExecution kept failing), and an
        alarm on the topic as soon as one is there: an upload must never be dropped silently."""
        queue = sqs.Queue(
            self,
            "TriggerDeadLetters",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self._key,
            retention_period=DEAD_LETTER_RETENTION,
            enforce_ssl=True,
        )
        # EventBridge writes to the encrypted queue with the key. The queue policy the targets add
        # admits only this stack's rules (aws:SourceArn), which guards against the confused deputy;
        # the key statement carries no source condition, as with the topic (see monitoring.py).
        self._key.grant(iam.ServicePrincipal("events.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*")
        notify_on_first(
            self,
            "TriggerDeadLettersAlarm",
            description="An event could not be delivered to its target; redrive it with `trainstack redrive`",
            metric=queue.metric_approximate_number_of_messages_visible(statistic="Maximum"),
            topic=topic,
        )
        acknowledge(
            queue,
            ("AwsSolutions-SQS3", "This queue is the dead-letter queue of the trigger rules; it has none of its own."),
            *in_every_pack(
                "SQSRedrivePolicy",
                "This queue is itself the dead-letter queue of the rules' targets and of the stop function; its "
                "alarm reports every message, and a redrive policy would only move them to yet another queue.",
            ),
        )
        return queue

    def _triggers(self, trigger_bucket: s3.IBucket) -> None:
        events_role = ManagedPolicyRole(self, "EventsRole", assumed_by=iam.ServicePrincipal("events.amazonaws.com"))
        retried = delivery(self.dead_letters)

        def uploads(construct_id: str, description: str, patterns: list[str]) -> None:
            events.Rule(
                self,
                construct_id,
                description=description,
                event_pattern=events.EventPattern(
                    source=["aws.s3"],
                    detail_type=["Object Created"],
                    detail={
                        "bucket": {"name": [trigger_bucket.bucket_name]},
                        "object": {"key": [{"wildcard": p} for p in patterns]},
                    },
                ),
                targets=[
                    targets.SfnStateMachine(
                        self.state_machine, input=events.RuleTargetInput.from_event_path("$"), role=events_role, **retried
                    )
                ],
            )

        uploads("JobSpecUploaded", "A job spec uploaded under jobs/ starts a run", [f"{JOBS_PREFIX}*{s}" for s in SPEC_SUFFIXES])
        uploads(
            "DataDropCompleted",
            "A completion marker under datasets/<name>/ starts one run for that data",
            [f"{DATASETS_PREFIX}*/{DATA_MARKER}"],
        )
        events.Rule(
            self,
            "ExecutionEnded",
            description="An execution that ends other than by succeeding stops the training jobs it started",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={"status": list(ENDED_EARLY), "stateMachineArn": [self.state_machine.state_machine_arn]},
            ),
            targets=[targets.LambdaFunction(self.functions["stop"], **retried)],
        )

    def _acknowledge(self, jobs_arn: str, trigger_bucket: s3.IBucket) -> None:
        for name, function in self.functions.items():
            findings = [
                (
                    "AwsSolutions-IAM5[Resource::*]",
                    "X-Ray trace segments (and, for stop, sagemaker:ListTrainingJobs) support only resource '*'.",
                ),
                (
                    f"AwsSolutions-IAM5[Resource::{nag_resource(self, jobs_arn)}]",
                    "Scoped to training jobs named with this stack's prefix; names are derived per run.",
                ),
                (
                    "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                    "CDK's key grants for the encrypted bucket, topic and environment.",
                ),
                (
                    "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
                    "CDK's key grants for the encrypted bucket, topic and environment.",
                ),
            ]
            if name == "validate":
                findings += [
                    (
                        "AwsSolutions-IAM5[Action::s3:GetObject*]",
                        "CDK's bucket grant: read job specs and data-drop specs in the trigger bucket.",
                    ),
                    (
                        "AwsSolutions-IAM5[Action::s3:GetBucket*]",
                        "CDK's bucket grant: read job specs and data-drop specs in the trigger bucket.",
                    ),
                    (
                        "AwsSolutions-IAM5[Action::s3:List*]",
                        "CDK's bucket grant: count a sharded channel's objects before anything launches.",
                    ),
                    (
                        f"AwsSolutions-IAM5[Resource::{nag_resource(self, trigger_bucket.arn_for_objects('*'))}]",
                        "Job specs and data drops may be anywhere under jobs/ and datasets/ in the trigger bucket.",
                    ),
                ]
            acknowledge(function.role, *findings)
            acknowledge(function, *self._lambda_decisions(name))
        acknowledge(
            self._state_machine_role,
            (
                "AwsSolutions-IAM5[Resource::*]",
                "CloudWatch Logs delivery and X-Ray for Step Functions support only resource '*'.",
            ),
            *(
                (
                    f"AwsSolutions-IAM5[Resource::{nag_resource(self, f.function_arn)}:*]",
                    "Step Functions may invoke any version of its own task functions.",
                )
                for f in self.functions.values()
            ),
        )

    @staticmethod
    def _lambda_decisions(name: str) -> list[tuple[str, str]]:
        """The Lambda rules of cdk-nag's packs these functions do not follow, and why."""
        runtime = (
            f"python{LAMBDA_PYTHON}, one behind the newest: the newest runtime whose interpreter the test machines "
            "have, so the asset is imported and invoked as shipped (tests/infra/test_shipped_lambda.py)."
        )
        decisions = [
            ("AwsSolutions-L1", runtime),
            *in_every_pack("LambdaLatestVersion", runtime),
            *in_every_pack(
                "LambdaConcurrency",
                "Reserving concurrency fails the deploy in accounts at a low (new-account) concurrency limit; the "
                "state machine's Map concurrency already bounds how many calls run at once.",
            ),
            *in_every_pack(
                "LambdaInsideVPC",
                "Calls only AWS control-plane APIs (SageMaker, S3, SNS); inside the VPC it would need a NAT gateway "
                "or interface endpoints that cost money while idle.",
            ),
        ]
        if name != "stop":  # stop, invoked asynchronously by EventBridge, has the dead-letter queue
            decisions += in_every_pack(
                "LambdaDLQ",
                "Invoked synchronously by Step Functions, whose Retry and Catch handle its errors; a Lambda "
                "dead-letter queue only receives failed asynchronous invocations, so it would stay empty.",
            )
        return decisions


def _add_retry(task: tasks.LambdaInvoke, policy: RetryPolicy) -> None:
    task.add_retry(
        errors=[policy.error],
        interval=Duration.seconds(policy.interval_seconds),
        max_attempts=policy.max_attempts,
        backoff_rate=policy.backoff_rate,
        max_delay=Duration.seconds(policy.max_delay_seconds) if policy.max_delay_seconds else None,
    )
