"""The pipeline: Lambda tasks and a Standard state machine that turn a job spec into a training job.

This module holds the functions and their IAM, the triggers' dead-letter queue and the triggers;
the state machine's graph is in stacks/state_machine.py, the checkers' exceptions in
stacks/pipeline_acknowledgements.py.

Triggers: jobs/**.yaml|yml|json uploads, datasets/<name>/_SUCCESS markers, direct StartExecution.
An execution that is aborted, times out or fails stops the training jobs it started.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.event_delivery import delivery
from stacks.lambda_asset import LAMBDA_PYTHON, build_lambda_asset
from stacks.log_groups import encrypted_log_group
from stacks.monitoring import notify_on_first
from stacks.pipeline_acknowledgements import acknowledge_pipeline
from stacks.queue import TeamQueue
from stacks.roles import ManagedPolicyRole
from stacks.state_machine import StateMachineProps, build_state_machine
from trainstack.handlers.environment import lambda_variables
from trainstack.layout import DATASETS_PREFIX, JOBS_PREFIX
from trainstack.stack_context import StackContext
from trainstack.workflow import DATA_MARKER, ENDED_EARLY
from trainstack_contract.job_names import training_job_name_prefix

HANDLERS = ("validate", "create", "describe", "notify", "stop")
SPEC_SUFFIXES = (".yaml", ".yml", ".json")
DEAD_LETTER_RETENTION = Duration.days(14)  # SQS's maximum: time to notice the alarm and redrive


@dataclass(frozen=True)
class JobDefaults:
    """What every training job gets from the stack (becomes the Lambdas' environment)."""

    execution_role: iam.IRole  # the default team's
    artifacts_bucket: s3.IBucket
    key: kms.IKey
    subnet_ids: list[str]
    security_group_id: str
    source_s3_uri: str
    entry_s3_uri: str = ""
    inter_container_encryption: bool = False
    mlflow_tracking_server_arn: str = ""  # the tracking server (or MLflow App) jobs may log to; "" for none
    queue: TeamQueue | None = None  # the team queue specs with `queue` are submitted to; None for none
    project_image_uri: str = ""  # the project image `image: project` names; "" for none
    team_roles: Mapping[str, iam.IRole] = field(default_factory=dict)  # each team's execution role, the default first
    team_budgets: Mapping[str, float] = field(default_factory=dict)  # a team's monthly budget in USD

    def context(self, region: str, name_prefix: str) -> StackContext:
        """The StackContext these constructs give jobs (tokens until deploy)."""
        context = StackContext(
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
            mlflow_tracking_server_arn=self.mlflow_tracking_server_arn,
            project_image_uri=self.project_image_uri,
            team_role_arns=tuple(f"{team}={role.role_arn}" for team, role in self.team_roles.items()),
            team_budgets=tuple(f"{team}={usd:g}" for team, usd in self.team_budgets.items()),
        )
        if self.queue is None:
            return context
        return replace(
            context,
            job_queue_arn=self.queue.job_queue_arn,
            queue_shares=self.queue.shares,
            queue_default_share=self.queue.default_share,
            queue_max_instances=self.queue.max_instances,
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
        self._grant_account_reads(self.functions["validate"].role, stack, team_budgets=bool(defaults.team_budgets))
        create_role = self.functions["create"].role
        create_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:CreateTrainingJob", "sagemaker:AddTags"], resources=[jobs_arn])
        )
        create_role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=[role.role_arn for role in (defaults.team_roles or {"": defaults.execution_role}).values()],
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
        if defaults.queue and defaults.team_budgets:  # a team's queued jobs count against its budget
            defaults.queue.grant_read_jobs(self.functions["validate"].role)
        if defaults.queue:
            # A queued job is submitted to Batch, whose service-linked role then calls CreateTrainingJob.
            # The PassRole above also covers SubmitServiceJob's (the payload passes the execution role to
            # sagemaker.amazonaws.com). No key grant for the service-linked role: SageMaker's permissions
            # reference asks the caller for kms:CreateGrant only where the execution role may not create
            # the volume key's grant itself, and it may (stacks/roles.py, VolumeKeyGrants). Unverified in
            # a real account: whether SageMaker asks the caller for anything else of the key.
            defaults.queue.grant_submit(create_role)
            defaults.queue.grant_describe(self.functions["describe"].role)
            defaults.queue.grant_terminate(stop_role)
        topic.grant_publish(self.functions["notify"])

        self.state_machine = build_state_machine(
            self,  # this scope, not a construct of the graph's own: the states keep the pipeline's paths and logical ids
            StateMachineProps(
                functions=self.functions,
                key=defaults.key,
                log_retention_days=log_retention_days,
                removal_policy=removal_policy,
            ),
        )
        self._triggers(trigger_bucket)
        acknowledge_pipeline(
            self,
            functions=self.functions,
            state_machine_role=self.state_machine.role,
            dead_letters=self.dead_letters,
            jobs_arn=jobs_arn,
            trigger_bucket=trigger_bucket,
            queue=defaults.queue,
        )

    @staticmethod
    def _grant_account_reads(role: iam.IRole, stack: Stack, team_budgets: bool) -> None:
        """What Validate reads of the account before a job may launch (trainstack/account.py): the
        SageMaker quotas, the instances the account's training jobs hold (every job, whatever its name:
        a quota is the account's), EC2's offerings by AZ and the training subnets' AZs. Each is read
        only; none of these actions takes a narrower resource than the one given. With team budgets, each
        job's tags too (its trainstack:team tag: trainstack/budgets.py)."""
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "servicequotas:ListServiceQuotas",
                    "sagemaker:ListTrainingJobs",
                    "ec2:DescribeInstanceTypeOfferings",
                    "ec2:DescribeSubnets",
                ],
                resources=["*"],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["sagemaker:DescribeTrainingJob", *(["sagemaker:ListTags"] if team_budgets else [])],
                resources=[stack.format_arn(service="sagemaker", resource="training-job", resource_name="*")],
            )
        )

    def _function(self, name: str, code: lambda_.Code, environment: dict[str, str]) -> lambda_.Function:
        role = ManagedPolicyRole(self, f"{name.title()}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        log_group = encrypted_log_group(
            self, f"{name.title()}Logs", key=self._key, retention_days=self._retention_days, removal_policy=self._removal
        )
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
        return function

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
