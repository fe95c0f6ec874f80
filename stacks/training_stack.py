"""The one Stack: it wires the constructs together and publishes what jobs need as outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Fn, RemovalPolicy, Stack, Tags
from constructs import Construct

from stacks.compliance import acknowledge_cdk_handler
from stacks.image import TrainingImage
from stacks.monitoring import TrainingMonitoring
from stacks.network import TrainingNetwork
from stacks.pipeline import JobDefaults, TrainingPipeline
from stacks.queue import TeamQueue
from stacks.roles import TrainingRoles
from stacks.settings import StackSettings
from stacks.source_bundle import TrainingSource
from stacks.storage import TrainingStorage
from trainstack.images import default_base_image
from trainstack.stack_context import DEAD_LETTER_OUTPUT, STOP_FUNCTION_OUTPUT

# Deploy-time singleton handlers that CDK adds for features we use: S3 EventBridge notifications,
# AwsCustomResource (the S3 prefix-list lookup) and the default security group lockdown.
CDK_HANDLER_IDS = (
    "BucketNotificationsHandler050a0587b7544547bf325f094a3db834",
    "AWS679f53fac002430cb0da5b7982bd2287",
    "Custom::VpcRestrictDefaultSGCustomResourceProvider",
)
TRAINING_DIR = Path(__file__).resolve().parent.parent / "training"


class TrainingStack(Stack):
    """Storage, network, roles and training code for SageMaker distributed training jobs."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: StackSettings, **kwargs: Any) -> None:
        self._availability_zone_count = settings.subnet_count
        super().__init__(scope, construct_id, description="trainstack: distributed PyTorch training on SageMaker", **kwargs)
        Tags.of(self).add("project", settings.name_prefix)
        removal = RemovalPolicy.RETAIN if settings.retain_data else RemovalPolicy.DESTROY

        self.storage = TrainingStorage(
            self,
            "Storage",
            name_prefix=settings.name_prefix,
            retain_data=settings.retain_data,
            checkpoint_expiry_days=settings.checkpoint_expiry_days,
        )
        self.source = TrainingSource(self, "TrainingSource", source_dir=TRAINING_DIR)
        self.network = TrainingNetwork(
            self,
            "Network",
            reachable_buckets=[self.storage.trigger_bucket, self.storage.artifacts_bucket, self.source.asset.bucket],
            log_key=self.storage.key,
            log_retention_days=settings.log_retention_days,
            subnet_count=settings.subnet_count,
            availability_zone_ids=settings.availability_zone_ids,
            nat_gateway=settings.nat_gateway,
            interface_endpoints=settings.interface_endpoints,
            mlflow_tracking_server_arn=settings.mlflow_tracking_server_arn,
            inter_container_encryption=settings.inter_container_encryption,
            removal_policy=removal,
        )
        self.image = (
            TrainingImage(self, "TrainingImage", source_dir=TRAINING_DIR, base_image=default_base_image(settings.region))
            if settings.build_training_image and settings.region
            else None
        )
        self.queue = (
            TeamQueue(
                self,
                "TeamQueue",
                name_prefix=settings.name_prefix,
                shares=dict(settings.queue_shares),
                default_share=settings.queue_default_share,
                max_instances=settings.queue_max_instances,
                capacity_wait_seconds=settings.queue_capacity_wait_seconds,
            )
            if settings.queue
            else None
        )
        self.roles = TrainingRoles(
            self,
            "Roles",
            storage=self.storage,
            source=self.source,
            teams=settings.teams,  # the default team first: its role is the stack's ExecutionRoleArn
            image_repository=self.image.asset.repository if self.image else None,
            name_prefix=settings.name_prefix,
            queue=self.queue,
            mlflow_tracking_server_arn=settings.mlflow_tracking_server_arn,
        )

        self.monitoring = TrainingMonitoring(
            self, "Monitoring", key=self.storage.key, name_prefix=settings.name_prefix, queue=self.queue is not None
        )
        self.pipeline = TrainingPipeline(
            self,
            "Pipeline",
            name_prefix=settings.name_prefix,
            trigger_bucket=self.storage.trigger_bucket,
            defaults=JobDefaults(
                execution_role=self.roles.execution_role,
                team_roles=self.roles.execution_roles,
                team_budgets=dict(settings.queue_budgets),
                artifacts_bucket=self.storage.artifacts_bucket,
                key=self.storage.key,
                subnet_ids=self.network.training_subnet_ids,
                security_group_id=self.network.security_group.security_group_id,
                source_s3_uri=self.source.s3_uri,
                entry_s3_uri=self.source.entry_s3_uri,
                inter_container_encryption=settings.inter_container_encryption,
                mlflow_tracking_server_arn=settings.mlflow_tracking_server_arn or "",
                queue=self.queue,
                project_image_uri=self.image.asset.image_uri if self.image else "",
            ),
            topic=self.monitoring.topic,
            log_retention_days=settings.log_retention_days,
            default_spec_key=settings.default_spec_key,
            removal_policy=removal,
        )
        self.monitoring.watch(self.pipeline.state_machine, dead_letter_queue=self.pipeline.dead_letters)
        if settings.dashboard:
            self.monitoring.dashboard(self.pipeline.state_machine)
        self._acknowledge_cdk_handlers()

        outputs = {
            **self.pipeline.job_context.to_outputs(),  # what `trainstack render --outputs` and the CLI read back
            "TriggerBucketName": self.storage.trigger_bucket.bucket_name,
            "StateMachineArn": self.pipeline.state_machine.state_machine_arn,
            "TopicArn": self.monitoring.topic.topic_arn,
            DEAD_LETTER_OUTPUT: self.pipeline.dead_letters.queue_url,  # what `trainstack redrive` reads
            STOP_FUNCTION_OUTPUT: self.pipeline.functions["stop"].function_arn,
        }
        for team, policy in self.roles.team_policies.items():  # attach to each team's people and CI
            outputs[f"TeamAccessPolicy{team[:1].upper()}{team[1:]}"] = policy.managed_policy_arn
        for name, value in outputs.items():
            CfnOutput(self, name, value=value)

    @property
    def availability_zones(self) -> list[str]:
        """AZs as `Fn::GetAZs` tokens in every environment.

        CDK's default looks the AZs up for a stack with an explicit account and region, which
        needs credentials at synth; tokens keep synth offline. Subnets pinned by AZ ID ignore these.
        """
        return [Fn.select(index, Fn.get_azs()) for index in range(self._availability_zone_count)]

    def _acknowledge_cdk_handlers(self) -> None:
        for handler_id in CDK_HANDLER_IDS:
            handler = self.node.try_find_child(handler_id)
            if handler is not None:
                acknowledge_cdk_handler(handler)
