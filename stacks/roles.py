"""IAM roles. The SageMaker execution role lives here; the pipeline's Lambda and state-machine roles
join it when the pipeline exists, each scoped the same way: grants on objects, not hand-written ARNs."""

from __future__ import annotations

from aws_cdk import ArnFormat, CfnMapping, Fn, Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.compliance import acknowledge, nag_resource, skip_checkov
from stacks.source_bundle import TrainingSource
from stacks.storage import TrainingStorage
from trainstack import facts
from trainstack.layout import DATASETS_PREFIX, JOB_WRITABLE_PREFIXES

# What SageMaker needs to attach a job's network interfaces in VPC mode; these calls do not
# support resource-level scoping (see shared/reference/sagemaker-contract.md §3).
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
TRAINING_METRICS_NAMESPACE = "/aws/sagemaker/TrainingJobs"
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


class TrainingRoles(Construct):
    """Exposes `execution_role`, the role every training job runs as."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        storage: TrainingStorage,
        source: TrainingSource,
        image_repository: ecr.IRepository | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        role = iam.Role(
            self,
            "SageMakerExecution",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="Runs trainstack training jobs: reads datasets and code, writes models, checkpoints and logs",
        )
        self.execution_role = role

        storage.trigger_bucket.grant_read(role, f"{DATASETS_PREFIX}*")
        for prefix in JOB_WRITABLE_PREFIXES:
            storage.artifacts_bucket.grant_read_write(role, f"{prefix}*")
        source.grant_read(role)  # the code tarball and the container entry
        if image_repository is not None:
            image_repository.grant_pull(role)

        role.add_to_policy(
            iam.PolicyStatement(sid="PullFrameworkImages", actions=IMAGE_PULL_ACTIONS, resources=framework_repository_arns(self))
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
        unscoped = [
            iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]),
            iam.PolicyStatement(sid="VpcModeNetworkInterfaces", actions=VPC_MODE_ACTIONS, resources=["*"]),
            iam.PolicyStatement(
                sid="TrainingMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": TRAINING_METRICS_NAMESPACE}},
            ),
        ]
        for statement in unscoped:
            role.add_to_policy(statement)
        training_logs_arn = Stack.of(self).format_arn(
            service="logs",
            resource="log-group",
            resource_name="/aws/sagemaker/TrainingJobs:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TrainingJobLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[training_logs_arn],
            )
        )
        readable = [(storage.trigger_bucket, DATASETS_PREFIX, "Jobs read the datasets they are given, and only under datasets/.")]
        writable = [
            (storage.artifacts_bucket, prefix, f"Jobs write their own objects under {prefix} (one key per job lineage).")
            for prefix in JOB_WRITABLE_PREFIXES
        ]
        acknowledge(
            role,
            *(
                (f"AwsSolutions-IAM5[Resource::{nag_resource(self, bucket.arn_for_objects(f'{prefix}*'))}]", reason)
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
            role.node.find_child("DefaultPolicy"),
            (
                "CKV_AWS_109",
                "ec2:CreateNetworkInterfacePermission is required by SageMaker VPC mode and supports only resource '*'.",
            ),
            (
                "CKV_AWS_111",
                "VPC-mode ENI calls and cloudwatch:PutMetricData support only resource '*'; PutMetricData is namespace-limited.",
            ),
        )


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
