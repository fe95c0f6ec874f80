"""IAM roles. The SageMaker execution role lives here; the pipeline's Lambda and state-machine roles
join it when the pipeline exists, each scoped the same way: grants on objects, not hand-written ARNs."""

from __future__ import annotations

from typing import Any

from aws_cdk import ArnFormat, CfnMapping, Fn, Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.compliance import acknowledge, nag_resource, skip_checkov
from stacks.queue import TeamQueue
from stacks.source_bundle import TrainingSource
from stacks.storage import TrainingStorage
from trainstack import facts
from trainstack.identity import TAG_TEAM
from trainstack.layout import (
    DATASETS_PREFIX,
    DEFAULT_TEAM,
    JOB_WRITABLE_PREFIXES,
    JOBS_PREFIX,
    SOURCES_PREFIX,
    TRAINING_JOB_LOG_GROUP,
    TRAINING_JOB_METRICS_NAMESPACE,
    team_folder,
)
from trainstack_contract.job_names import training_job_name_prefix
from trainstack_contract.tracking import is_mlflow_app

# What SageMaker needs to attach a job's network interfaces in VPC mode; these calls do not
# support resource-level scoping (see docs/sagemaker-contract.md §3).
VPC_MODE_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
]
IMAGE_PULL_ACTIONS = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
# What a job's MLflow client calls on a tracking server to log its run, taken from the actions the
# SageMaker Developer Guide documents for one ("Set up IAM permissions for MLflow", IAM actions
# supported for MLflow; the AWS managed job policy AmazonSageMakerJobFullAccess grants most of them):
# find or create the experiment, create, tag, read and end the run, its parameters and metrics (in
# batches, and one at a time), its metric history (a resumed run's last step), the model and the
# listing of its artifacts. Not sagemaker-mlflow:*, which would also delete runs and experiments and
# write to the model registry. Nothing on the server's artifact bucket: jobs upload artifacts by the
# presigned URLs the server hands out (request.py, PRESIGNED_UPLOAD).
MLFLOW_TRACKING_SERVER_ACTIONS = [
    "sagemaker-mlflow:CreateExperiment",
    "sagemaker-mlflow:GetExperimentByName",
    "sagemaker-mlflow:CreateRun",
    "sagemaker-mlflow:UpdateRun",
    "sagemaker-mlflow:GetRun",
    "sagemaker-mlflow:SearchRuns",
    "sagemaker-mlflow:SetTag",
    "sagemaker-mlflow:LogBatch",
    "sagemaker-mlflow:LogMetric",
    "sagemaker-mlflow:LogParam",
    "sagemaker-mlflow:GetMetricHistory",
    "sagemaker-mlflow:LogModel",
    "sagemaker-mlflow:ListArtifacts",
]
# An MLflow App's data plane is one action ("Data Plane IAM actions supported for MLflow Apps");
# AmazonSageMakerJobFullAccess grants DescribeMlflowApp beside it.
MLFLOW_APP_ACTIONS = ["sagemaker:CallMlflowAppApi", "sagemaker:DescribeMlflowApp"]
# Wildcard actions that CDK's grant_read / grant_read_write emit (resources stay scoped).
GRANT_ACTION_WILDCARDS = (
    "s3:GetBucket*",
    "s3:GetObject*",
    "s3:List*",
    "s3:Abort*",
    "s3:DeleteObject*",
    "kms:GenerateDataKey*",
    "kms:ReEncrypt*",
)


class ManagedPolicyRole(iam.Role):
    """An `iam.Role` whose statements, from `add_to_policy` and from every `grant*` method, go into one
    customer-managed policy attached to it rather than into an inline default policy.

    The statements, and so the privileges, are exactly those the inline policy would hold; a managed
    policy is an IAM object of its own, versioned and listed on its own, which is what the NIST,
    HIPAA and PCI packs' IAMNoInlinePolicy asks for. It is created with the first statement (an empty
    managed policy is invalid) as the role's child, so whatever depends on the role depends on it too.
    """

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self._managed_policy: iam.ManagedPolicy | None = None

    @property
    def managed_policy(self) -> iam.ManagedPolicy | None:
        """The policy holding the role's statements; None until the first statement."""
        return self._managed_policy

    def add_to_principal_policy(self, statement: iam.PolicyStatement) -> iam.AddToPrincipalPolicyResult:
        if self._managed_policy is None:
            self._managed_policy = iam.ManagedPolicy(self, "Policy", roles=[self])
        self._managed_policy.add_statements(statement)
        return iam.AddToPrincipalPolicyResult(statement_added=True, policy_dependable=self._managed_policy)


class TrainingRoles(Construct):
    """Exposes `execution_roles` (team -> the role its training jobs run as; the first is the default
    team's, `execution_role`) and `team_policies` (team -> the managed policy for its people and CI).

    A team is a boundary (trainstack/layout.py): its role reads and writes only its own folders
    (`datasets/<team>/`, `sources/<team>/`, `models/<team>/`, `checkpoints/<team>/`,
    `tensorboard/<team>/`) and the code the stack ships, so nothing of one team is readable or writable
    by another's jobs. With `name_prefix`, only training jobs named with the stack's prefix may assume
    a role (the prefix the pipeline's IAM scoping and job names share); without it, any training job
    of this account and region. With `queue`, the training jobs Batch creates for the team queue too.
    With `mlflow_tracking_server_arn`, jobs may log their runs to that one MLflow tracking server or App.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: TrainingStorage,
        source: TrainingSource,
        teams: tuple[str, ...] = (DEFAULT_TEAM,),
        image_repository: ecr.IRepository | None = None,
        name_prefix: str | None = None,
        queue: TeamQueue | None = None,
        mlflow_tracking_server_arn: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._storage, self._source, self._image_repository = storage, source, image_repository
        self._mlflow_tracking_server_arn = mlflow_tracking_server_arn
        self._framework_repositories = framework_repository_arns(self)  # one mapping for every team's role
        stack = Stack.of(self)
        # Confused-deputy guard: SageMaker passes the training job's ARN as aws:SourceArn and the
        # account as aws:SourceAccount when it assumes the role, so no other SageMaker resource, and no
        # other account, can act as this role (SageMaker Developer Guide, cross-service confused deputy
        # prevention, training jobs). ArnLike is case-sensitive, and SageMaker's ARNs may carry a job's
        # name in lower case, so each name pattern is given as written and in lower case.
        training_jobs = stack.format_arn(
            service="sagemaker",
            resource="training-job",
            resource_name=f"{training_job_name_prefix(name_prefix)}*" if name_prefix else "*",
        )
        # Batch names the training jobs it creates from the queue AWSBatch<prefix>-..., outside that prefix.
        patterns = [training_jobs, *queue.training_jobs_arns] if queue else [training_jobs]
        self._source_arns = list(dict.fromkeys([*patterns, *(_lower_case_name(stack, p) for p in patterns)]))
        self.execution_roles: dict[str, ManagedPolicyRole] = {}
        self.team_policies: dict[str, iam.ManagedPolicy] = {}
        for index, team in enumerate(teams):
            suffix = "" if index == 0 else _construct_name(team)  # the default team's role keeps the stack's first name
            self.execution_roles[team] = self._execution_role(f"SageMakerExecution{suffix}", team)
            self.team_policies[team] = self._team_policy(f"TeamAccess{_construct_name(team)}", team, name_prefix, queue)
        self.execution_role = self.execution_roles[teams[0]]

    def _execution_role(self, construct_id: str, team: str) -> ManagedPolicyRole:
        storage, source = self._storage, self._source
        role = ManagedPolicyRole(
            self,
            construct_id,
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com",
                conditions={
                    "ArnLike": {"aws:SourceArn": self._source_arns},
                    "StringEquals": {"aws:SourceAccount": Stack.of(self).account},
                },
            ),
            description=f"Runs team {team}'s training jobs: its own datasets, code, models, checkpoints and logs",
        )
        storage.trigger_bucket.grant_read(role, f"{team_folder(DATASETS_PREFIX, team)}*")
        storage.artifacts_bucket.grant_read(role, f"{team_folder(SOURCES_PREFIX, team)}*")
        for prefix in JOB_WRITABLE_PREFIXES:
            storage.artifacts_bucket.grant_read_write(role, f"{team_folder(prefix, team)}*")
        source.grant_read(role)  # the code tarball and the container entry
        if self._image_repository is not None:
            self._image_repository.grant_pull(role)

        role.add_to_policy(
            iam.PolicyStatement(sid="PullFrameworkImages", actions=IMAGE_PULL_ACTIONS, resources=self._framework_repositories)
        )
        # SageMaker encrypts an EBS-backed job's volume with VolumeKmsKeyId by creating a grant on
        # the key for the role; only AWS services may use the grant (CDK's SageMakerCreateTrainingJob
        # grants kms:CreateGrant on the volume key too).
        role.add_to_policy(
            iam.PolicyStatement(
                sid="VolumeKeyGrants",
                actions=["kms:CreateGrant"],
                resources=[storage.key.key_arn],
                conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            )
        )
        if self._mlflow_tracking_server_arn:
            server = self._mlflow_tracking_server_arn
            role.add_to_policy(iam.PolicyStatement(sid="LogToMlflow", actions=mlflow_actions(server), resources=[server]))
        unscoped = [
            iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            iam.PolicyStatement(sid="VpcModeNetworkInterfaces", actions=VPC_MODE_ACTIONS, resources=["*"]),
            iam.PolicyStatement(
                sid="TrainingMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": TRAINING_JOB_METRICS_NAMESPACE}},
            ),
        ]
        for statement in unscoped:
            role.add_to_policy(statement)
        training_logs_arn = self._training_logs_arn()
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TrainingJobLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[training_logs_arn],
            )
        )
        readable = [
            (storage.trigger_bucket, DATASETS_PREFIX, f"Jobs read the datasets they are given, only under datasets/{team}/."),
            (
                storage.artifacts_bucket,
                SOURCES_PREFIX,
                f"Jobs read the code `trainstack submit --source` uploads, only under sources/{team}/.",
            ),
        ]
        writable = [
            (storage.artifacts_bucket, prefix, f"Jobs write their own objects under {prefix}{team}/ (one key per job lineage).")
            for prefix in JOB_WRITABLE_PREFIXES
        ]
        acknowledge(
            role,
            *(
                (
                    f"AwsSolutions-IAM5[Resource::{nag_resource(self, bucket.arn_for_objects(f'{team_folder(prefix, team)}*'))}]",
                    reason,
                )
                for bucket, prefix, reason in [*readable, *writable]
            ),
            *(
                (
                    f"AwsSolutions-IAM5[Action::{action}]",
                    "Generated by CDK's bucket/key grant methods, scoped to this project's buckets and key.",
                )
                for action in GRANT_ACTION_WILDCARDS
            ),
            (
                "AwsSolutions-IAM5[Resource::*]",
                "ecr:GetAuthorizationToken, the VPC-mode ENI calls and cloudwatch:PutMetricData "
                "support only resource '*'; PutMetricData is limited to the training-jobs namespace by condition.",
            ),
            (
                f"AwsSolutions-IAM5[Resource::{nag_resource(self, training_logs_arn)}]",
                "Each training job writes its own log streams inside the one SageMaker training-jobs log group.",
            ),
        )
        skip_checkov(
            role.managed_policy,
            (
                "CKV_AWS_109",
                "ec2:CreateNetworkInterfacePermission is required by SageMaker VPC mode and supports only resource '*'.",
            ),
            (
                "CKV_AWS_111",
                "VPC-mode ENI calls and cloudwatch:PutMetricData support only resource '*'; PutMetricData is namespace-limited.",
            ),
        )
        return role

    def _team_policy(self, construct_id: str, team: str, name_prefix: str | None, queue: TeamQueue | None) -> iam.ManagedPolicy:
        """What to attach to a team's people and CI: upload specs and data under its folders, read its
        runs' outputs and the training logs, stop its own jobs (by their team tag). Starting and stopping
        executions directly (any team's) stays with the platform's own principals."""
        storage = self._storage
        policy = iam.ManagedPolicy(
            self, construct_id, description=f"Team {team}: submit under its folders, read its outputs, stop its jobs"
        )
        uploads = [storage.trigger_bucket.arn_for_objects(f"{team_folder(p, team)}*") for p in (JOBS_PREFIX, DATASETS_PREFIX)]
        policy.add_statements(iam.PolicyStatement(sid="SubmitUnderItsFolders", actions=["s3:PutObject"], resources=uploads))
        sources = storage.artifacts_bucket.arn_for_objects(f"{team_folder(SOURCES_PREFIX, team)}*")
        policy.add_statements(iam.PolicyStatement(sid="UploadItsCode", actions=["s3:PutObject"], resources=[sources]))
        outputs = [storage.artifacts_bucket.arn_for_objects(f"{team_folder(p, team)}*") for p in JOB_WRITABLE_PREFIXES]
        policy.add_statements(iam.PolicyStatement(sid="ReadItsOutputs", actions=["s3:GetObject"], resources=outputs))
        folders = [f"{team_folder(p, team)}*" for p in JOB_WRITABLE_PREFIXES]
        policy.add_statements(
            iam.PolicyStatement(
                sid="ListItsOutputs",
                actions=["s3:ListBucket"],
                resources=[storage.artifacts_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": folders}},
            )
        )
        policy.add_statements(
            iam.PolicyStatement(
                sid="UseTheStacksKey", actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[storage.key.key_arn]
            )
        )
        policy.add_statements(
            iam.PolicyStatement(
                sid="ReadTrainingLogs",
                actions=["logs:GetLogEvents", "logs:FilterLogEvents", "logs:DescribeLogStreams"],
                resources=[self._training_logs_arn()],
            )
        )
        stack = Stack.of(self)
        own_jobs = [f"{training_job_name_prefix(name_prefix)}*" if name_prefix else "*"]
        jobs = [stack.format_arn(service="sagemaker", resource="training-job", resource_name=name) for name in own_jobs]
        if queue:
            jobs += queue.training_jobs_arns
        policy.add_statements(
            iam.PolicyStatement(
                sid="StopItsOwnJobs",
                actions=["sagemaker:StopTrainingJob", "sagemaker:DescribeTrainingJob"],
                resources=jobs,
                conditions={"StringEquals": {f"aws:ResourceTag/{TAG_TEAM}": team}},
            )
        )
        if queue:
            policy.add_statements(
                iam.PolicyStatement(
                    sid="EndItsOwnQueuedJobs",
                    actions=["batch:TerminateServiceJob"],
                    resources=[queue.service_jobs_arn],
                    conditions={"StringEquals": {f"aws:ResourceTag/{TAG_TEAM}": team}},
                )
            )
        acknowledge(
            policy,
            *(
                (
                    f"AwsSolutions-IAM5[Resource::{nag_resource(self, arn)}]",
                    f"Team {team}'s own folder: its specs, data, code and outputs.",
                )
                for arn in [*uploads, sources, *outputs]
            ),
            (
                f"AwsSolutions-IAM5[Resource::{nag_resource(self, self._training_logs_arn())}]",
                "The training-jobs log group's streams are named by job, not by team: the team reads the group.",
            ),
            *(
                (
                    f"AwsSolutions-IAM5[Resource::{nag_resource(self, arn)}]",
                    f"Only jobs tagged trainstack:team={team} (condition).",
                )
                for arn in [*jobs, *([queue.service_jobs_arn] if queue else [])]
            ),
        )
        return policy

    def _training_logs_arn(self) -> str:
        return Stack.of(self).format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{TRAINING_JOB_LOG_GROUP}:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )


def _team_objects(bucket: s3.IBucket, prefix: str, team: str) -> str:
    return bucket.arn_for_objects(f"{team_folder(prefix, team)}*")


def _construct_name(team: str) -> str:
    """A team's name as a construct id part (share identifiers are letters and digits)."""
    return team[:1].upper() + team[1:]


def _lower_case_name(stack: Stack, arn: str) -> str:
    """The ARN pattern with its job-name part in lower case, as SageMaker may write a job's ARN."""
    head, _, name = arn.rpartition("training-job/")
    return f"{head}training-job/{name.lower()}" if head else arn


def mlflow_actions(server_arn: str) -> list[str]:
    """What a job may call on the MLflow tracking server or App it logs to."""
    return MLFLOW_APP_ACTIONS if is_mlflow_app(server_arn) else MLFLOW_TRACKING_SERVER_ACTIONS


def framework_repository_arns(scope: Construct) -> list[str]:
    """The framework image repositories (DLC, SMP, Neuron) of the stack's region, from the facts
    file: the accounts differ by region and partition. An environment-agnostic stack looks its
    region up in a CloudFormation mapping of every region the facts list (a region without framework
    images fails the deploy by name); an explicit region gets the literal ARNs."""
    mapping = CfnMapping(
        scope,
        "FrameworkImageRepositories",
        lazy=True,
        mapping={
            region: {
                "arns": ",".join(
                    f"arn:{partition}:ecr:{region}:{account}:repository/{repository}"
                    for account, repository in facts.repositories(region)
                )
            }
            for region, partition in facts.load().regions.items()
        },
    )
    return Fn.split(",", mapping.find_in_map(Stack.of(scope).region, "arns"))
