"""The team queue: AWS Batch service jobs for SageMaker Training, shared fairly between teams.

A spec with `queue` is submitted here instead of to CreateTrainingJob; Batch holds it until its
share may have the instances, then creates the training job itself, as its service-linked role
AWSServiceRoleForAWSBatchWithSagemaker. Batch creates that role with the first service environment,
so the stack does not (AWS::IAM::ServiceLinkedRole fails where the role already exists).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Stack
from aws_cdk import aws_batch as batch
from aws_cdk import aws_iam as iam
from constructs import Construct

from trainstack.identity import TAG_LINEAGE
from trainstack.service_jobs import CAPACITY_UNIT, SERVICE_JOB_TYPE, TIME_LIMIT_REASONS, batch_training_job_prefix

# batch:ListServiceJobs and batch:DescribeServiceJob support no resource type (Service Authorization Reference).
ANY_RESOURCE = "*"


class TeamQueue(Construct):
    """A service environment capped at `max_instances` instances, a fair-share scheduling policy with
    one share per team (`shares`: identifier -> weight; a lower weight gets more) and the job queue
    joining them. A job at the head of the queue that waits `capacity_wait_seconds` for instances
    SageMaker cannot find, or for more than the cap allows, is ended (TERMINATE, the only action a
    SAGEMAKER_TRAINING queue takes).

    Exposes `job_queue_arn`, `shares`, `default_share`, `max_instances`, `training_jobs_arns` (the
    training jobs Batch creates for this queue, named as Batch writes them and in lower case) and
    grants for the pipeline's functions.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        shares: Mapping[str, float],
        default_share: str,
        max_instances: int,
        capacity_wait_seconds: int = 3600,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.shares = tuple(shares)
        self.default_share = default_share
        self.max_instances = max_instances

        environment = batch.CfnServiceEnvironment(
            self,
            "Environment",
            service_environment_name=f"{name_prefix}-training",
            service_environment_type=SERVICE_JOB_TYPE,
            # Counted as the instances each job asks for (ResourceConfig.InstanceCount), whatever their type.
            capacity_limits=[
                batch.CfnServiceEnvironment.CapacityLimitProperty(capacity_unit=CAPACITY_UNIT, max_capacity=max_instances)
            ],
        )
        # Always fair share, even for one team: a queue created without a policy (FIFO) can never gain one.
        policy = batch.CfnSchedulingPolicy(
            self,
            "FairShare",
            name=f"{name_prefix}-fairshare",
            fairshare_policy=batch.CfnSchedulingPolicy.FairsharePolicyProperty(
                share_distribution=[
                    batch.CfnSchedulingPolicy.ShareAttributesProperty(share_identifier=share, weight_factor=weight)
                    for share, weight in shares.items()
                ]
            ),
        )
        queue = batch.CfnJobQueue(
            self,
            "Queue",
            job_queue_name=f"{name_prefix}-queue",
            job_queue_type=SERVICE_JOB_TYPE,
            priority=1,  # the only queue on its environment: the value orders nothing
            service_environment_order=[
                batch.CfnJobQueue.ServiceEnvironmentOrderProperty(
                    order=1, service_environment=environment.attr_service_environment_arn
                )
            ],
            scheduling_policy_arn=policy.attr_arn,
            job_state_time_limit_actions=[
                batch.CfnJobQueue.JobStateTimeLimitActionProperty(
                    action="TERMINATE", state="RUNNABLE", reason=reason, max_time_seconds=capacity_wait_seconds
                )
                for reason in TIME_LIMIT_REASONS
            ],
        )
        self.job_queue_arn = queue.attr_job_queue_arn
        # Batch assigns service job ids, so the pipeline's grants name them by wildcard.
        self.service_jobs_arn = stack.format_arn(service="batch", resource="service-job", resource_name="*")
        # Batch writes AWSBatch<jobName>...; SageMaker may give a job's ARN its name in lower case, and
        # IAM matches names case-sensitively: both are listed wherever the jobs are named.
        name = f"{batch_training_job_prefix(name_prefix)}*"
        self.training_jobs_arns = [
            stack.format_arn(service="sagemaker", resource="training-job", resource_name=case)
            for case in dict.fromkeys((name, name.lower()))
        ]

    def grant_submit(self, grantee: iam.IGrantable) -> None:
        """Submit tagged service jobs to this queue, and find one by name (a redelivered Create)."""
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["batch:SubmitServiceJob"], resource_arns=[self.job_queue_arn, self.service_jobs_arn]
        )
        iam.Grant.add_to_principal(grantee=grantee, actions=["batch:TagResource"], resource_arns=[self.service_jobs_arn])
        iam.Grant.add_to_principal(grantee=grantee, actions=["batch:ListServiceJobs"], resource_arns=[ANY_RESOURCE])

    def grant_describe(self, grantee: iam.IGrantable) -> None:
        """Read a service job, then the training job Batch created for it."""
        iam.Grant.add_to_principal(grantee=grantee, actions=["batch:DescribeServiceJob"], resource_arns=[ANY_RESOURCE])
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["sagemaker:DescribeTrainingJob"], resource_arns=self.training_jobs_arns
        )

    def grant_read_jobs(self, grantee: iam.IGrantable) -> None:
        """List the queue's service jobs and read each (what a team's waiting jobs may cost)."""
        iam.Grant.add_to_principal(
            grantee=grantee, actions=["batch:ListServiceJobs", "batch:DescribeServiceJob"], resource_arns=[ANY_RESOURCE]
        )

    def grant_terminate(self, grantee: iam.IGrantable) -> None:
        """Find a run's service jobs in the queue and end them."""
        self.grant_read_jobs(grantee)
        # Only trainstack's service jobs (Create tags each with its run's lineage), not another queue's.
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["batch:TerminateServiceJob"],
                resources=[self.service_jobs_arn],
                conditions={"Null": {f"aws:ResourceTag/{TAG_LINEAGE}": "false"}},
            )
        )
