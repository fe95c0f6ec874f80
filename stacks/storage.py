"""Encrypted storage: one KMS key, the trigger bucket, the artifacts bucket and the access-log bucket."""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.compliance import acknowledge, in_every_pack, skip_checkov
from trainstack.layout import CHECKPOINTS_PREFIX

ABORT_INCOMPLETE_UPLOADS_AFTER = Duration.days(7)
NONCURRENT_VERSIONS_EXPIRE_AFTER = Duration.days(30)
ACCESS_LOGS_EXPIRE_AFTER = Duration.days(365)
LOG_GROUPS_IN_THIS_ACCOUNT = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"


class TrainingStorage(Construct):
    """The project's data at rest.

    One customer-managed key encrypts the buckets, the flow logs and (with the pipeline) the SNS
    topic: one key costs $1/month and one key policy is easier to audit than several.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        retain_data: bool = True,
        checkpoint_expiry_days: int = 30,
    ) -> None:
        super().__init__(scope, construct_id)
        removal = RemovalPolicy.RETAIN if retain_data else RemovalPolicy.DESTROY

        self.key = kms.Key(
            self,
            "Key",
            alias=f"alias/{name_prefix}",
            description=f"{name_prefix}: training data, artifacts, logs and notifications",
            enable_key_rotation=True,
            removal_policy=removal,
        )
        # CloudWatch Logs encrypts log groups with this key only if the key policy lets the
        # regional logs service use it, limited to this account's log groups.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchLogsInThisAccount",
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions={"ArnLike": {"kms:EncryptionContext:aws:logs:arn": LOG_GROUPS_IN_THIS_ACCOUNT}},
            )
        )

        # S3 server access logging cannot deliver to an SSE-KMS bucket, so this one uses SSE-S3.
        self.access_log_bucket = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            removal_policy=removal,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-access-logs",
                    expiration=ACCESS_LOGS_EXPIRE_AFTER,
                    noncurrent_version_expiration=NONCURRENT_VERSIONS_EXPIRE_AFTER,
                    abort_incomplete_multipart_upload_after=ABORT_INCOMPLETE_UPLOADS_AFTER,
                )
            ],
        )
        skip_checkov(
            self.access_log_bucket,
            ("CKV_AWS_18", "This is the access-log target bucket; logging it to itself would loop."),
            ("CKV_AWS_145", "S3 server access logging only delivers to SSE-S3 buckets, not SSE-KMS."),
            ("CKV_AWS_144", "Access logs are audit data kept one year in-region; replication would double cost."),
        )
        acknowledge(
            self.access_log_bucket,
            *in_every_pack(
                "S3DefaultEncryptionKMS",
                "S3 server access logging delivers only to a target bucket whose default encryption is SSE-S3; "
                "SSE-KMS is not supported for the log target (S3 User Guide, enabling server access logging).",
            ),
            *in_every_pack(
                "S3BucketReplicationEnabled",
                "Access logs are audit data kept one year in the stack's region; cross-region replication would "
                "need a second bucket and double their storage and request cost.",
            ),
        )

        self.trigger_bucket = self._data_bucket(
            "Trigger",
            removal,
            event_bridge=True,
            lifecycle_rules=[],
            logs_prefix="trigger/",
        )
        # CDK's bucket-notifications handler (a deploy-time Lambda of aws-cdk-lib) gets its one statement
        # as an inline policy that CDK creates here, beside the bucket, not under the handler.
        acknowledge(
            self.trigger_bucket.node.find_child("Notifications").node.find_child("HandlerPolicy"),
            *in_every_pack(
                "IAMNoInlinePolicy",
                "aws-cdk-lib creates this inline policy (s3:PutBucketNotification on the trigger bucket only) "
                "for its deploy-time bucket-notifications handler; no setting makes it a managed policy.",
            ),
        )
        self.artifacts_bucket = self._data_bucket(
            "Artifacts",
            removal,
            event_bridge=False,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-old-checkpoints",
                    prefix=CHECKPOINTS_PREFIX,
                    expiration=Duration.days(checkpoint_expiry_days),
                )
            ],
            logs_prefix="artifacts/",
        )

    def _data_bucket(
        self,
        construct_id: str,
        removal: RemovalPolicy,
        *,
        event_bridge: bool,
        lifecycle_rules: list[s3.LifecycleRule],
        logs_prefix: str,
    ) -> s3.Bucket:
        bucket = s3.Bucket(
            self,
            construct_id,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,  # one KMS call per object prefix, not per object
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            event_bridge_enabled=event_bridge,
            server_access_logs_bucket=self.access_log_bucket,
            server_access_logs_prefix=logs_prefix,
            removal_policy=removal,
            lifecycle_rules=[
                *lifecycle_rules,
                s3.LifecycleRule(
                    id="tidy-versions-and-uploads",
                    noncurrent_version_expiration=NONCURRENT_VERSIONS_EXPIRE_AFTER,
                    abort_incomplete_multipart_upload_after=ABORT_INCOMPLETE_UPLOADS_AFTER,
                ),
            ],
        )
        skip_checkov(
            bucket,
            (
                "CKV_AWS_144",
                "Cross-region replication doubles storage cost; datasets and models are re-creatable from their sources.",
            ),
        )
        acknowledge(
            bucket,
            *in_every_pack(
                "S3BucketReplicationEnabled",
                "Cross-region replication needs a second bucket and doubles storage cost; datasets and models are "
                "re-creatable from their sources, and versioning already keeps overwritten or deleted objects 30 days.",
            ),
        )
        return bucket
