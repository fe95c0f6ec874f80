"""The checker findings the pipeline's resources do not follow, and why: cdk-nag acknowledgements and checkov skips.

Kept apart from stacks/pipeline.py so that module reads as what the pipeline builds; every entry
here names the rule and the reason specific to the resource (see stacks/compliance.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.compliance import acknowledge, in_every_pack, nag_resource, skip_checkov
from stacks.lambda_asset import LAMBDA_PYTHON
from stacks.queue import TeamQueue

KEY_GRANTS = "CDK's key grants for the encrypted bucket, topic and environment."
TRIGGER_BUCKET_READ = "CDK's bucket grant: read job specs and data-drop specs in the trigger bucket."
UNSCOPED = "X-Ray trace segments (and, for stop, sagemaker:ListTrainingJobs) support only resource '*'."
# What each function calls on the team queue that supports no resource type (Service Authorization Reference).
QUEUE_UNSCOPED = {
    "create": "batch:ListServiceJobs (finding a job already submitted under its name)",
    "describe": "batch:DescribeServiceJob",
    "stop": "batch:ListServiceJobs and batch:DescribeServiceJob (finding the run's queued jobs)",
    "validate": "batch:ListServiceJobs and batch:DescribeServiceJob, with team budgets (what a team's queued jobs may cost)",
}
# What Validate reads of the account that supports no resource type (trainstack/account.py).
ACCOUNT_READS = (
    "servicequotas:ListServiceQuotas, sagemaker:ListTrainingJobs, ec2:DescribeInstanceTypeOfferings and ec2:DescribeSubnets"
)
SERVICE_JOBS = "Batch assigns each service job's id at submission, so no narrower ARN names the jobs to come."


def acknowledge_pipeline(
    scope: Construct,
    *,
    functions: Mapping[str, lambda_.IFunction],
    state_machine_role: iam.IRole,
    dead_letters: sqs.IQueue,
    jobs_arn: str,
    trigger_bucket: s3.IBucket,
    queue: TeamQueue | None = None,
) -> None:
    """Record every exception the pipeline in `scope` takes from cdk-nag's packs and from checkov."""
    account_training_jobs = Stack.of(scope).format_arn(service="sagemaker", resource="training-job", resource_name="*")
    acknowledge(
        dead_letters,
        ("AwsSolutions-SQS3", "This queue is the dead-letter queue of the trigger rules; it has none of its own."),
        *in_every_pack(
            "SQSRedrivePolicy",
            "This queue is itself the dead-letter queue of the rules' targets and of the stop function; its "
            "alarm reports every message, and a redrive policy would only move them to yet another queue.",
        ),
    )
    for name, function in functions.items():
        skip_checkov(function, *_checkov_skips(name))
        unscoped = UNSCOPED
        if name == "validate":
            unscoped += f" So do the account reads before launch: {ACCOUNT_READS}."
        if queue is not None and name in QUEUE_UNSCOPED:
            unscoped += f" With the team queue, so does {QUEUE_UNSCOPED[name]}."
        findings = [
            ("AwsSolutions-IAM5[Resource::*]", unscoped),
            (
                f"AwsSolutions-IAM5[Resource::{nag_resource(scope, jobs_arn)}]",
                "Scoped to training jobs named with this stack's prefix; names are derived per run.",
            ),
            ("AwsSolutions-IAM5[Action::kms:GenerateDataKey*]", KEY_GRANTS),
            ("AwsSolutions-IAM5[Action::kms:ReEncrypt*]", KEY_GRANTS),
        ]
        if name == "validate":
            findings += [
                (
                    f"AwsSolutions-IAM5[Resource::{nag_resource(scope, account_training_jobs)}]",
                    "DescribeTrainingJob of the account's jobs in progress, whatever their names: the instances "
                    "they hold count against the account's quotas (read only).",
                ),
                ("AwsSolutions-IAM5[Action::s3:GetObject*]", TRIGGER_BUCKET_READ),
                ("AwsSolutions-IAM5[Action::s3:GetBucket*]", TRIGGER_BUCKET_READ),
                (
                    "AwsSolutions-IAM5[Action::s3:List*]",
                    "CDK's bucket grant: count a sharded channel's objects before anything launches.",
                ),
                (
                    f"AwsSolutions-IAM5[Resource::{nag_resource(scope, trigger_bucket.arn_for_objects('*'))}]",
                    "Job specs and data drops may be anywhere under jobs/ and datasets/ in the trigger bucket.",
                ),
            ]
        if queue is not None:
            findings += _queue_findings(scope, name, queue)
        acknowledge(function.role, *findings)
        acknowledge(function, *_lambda_decisions(name))
    acknowledge(
        state_machine_role,
        (
            "AwsSolutions-IAM5[Resource::*]",
            "CloudWatch Logs delivery and X-Ray for Step Functions support only resource '*'.",
        ),
        *(
            (
                f"AwsSolutions-IAM5[Resource::{nag_resource(scope, f.function_arn)}:*]",
                "Step Functions may invoke any version of its own task functions.",
            )
            for f in functions.values()
        ),
    )


def _queue_findings(scope: Construct, name: str, queue: TeamQueue) -> list[tuple[str, str]]:
    """The wildcard resources of a function's grants on the team queue (stacks/queue.py)."""
    service_jobs = f"AwsSolutions-IAM5[Resource::{nag_resource(scope, queue.service_jobs_arn)}]"
    if name == "create":
        return [
            (service_jobs, f"SubmitServiceJob and TagResource create tagged service jobs in this stack's queue. {SERVICE_JOBS}")
        ]
    if name == "stop":
        return [(service_jobs, f"TerminateServiceJob ends the service jobs of a run that ended early. {SERVICE_JOBS}")]
    if name == "describe":
        return [
            (
                f"AwsSolutions-IAM5[Resource::{nag_resource(scope, arn)}]",
                "Scoped to the training jobs Batch creates from this stack's queue (AWSBatch<prefix>-...), named per run.",
            )
            for arn in queue.training_jobs_arns
        ]
    return []


def _checkov_skips(name: str) -> list[tuple[str, str]]:
    """checkov's counterparts of the Lambda decisions below."""
    skips = [
        (
            "CKV_AWS_115",
            "Reserving concurrency fails deploys in accounts at the default limit; the Map's concurrency bounds calls.",
        ),
        ("CKV_AWS_117", "Calls only AWS control-plane APIs; a VPC would need NAT or endpoints that cost money while idle."),
    ]
    if name != "stop":
        skips.append(
            (
                "CKV_AWS_116",
                "Invoked synchronously by Step Functions, which retries and catches; a DLQ would never receive events.",
            )
        )
    return skips


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
