"""The whole pipeline offline: moto (pinned) as the local AWS, the SageMaker twin for training jobs,
and the stack's runtime resources created from the synthesized template: the same definition,
handlers, rules and names (see bridges.py for where moto needed help). A template with the team queue
(AWS::Batch resources) gets it in the Batch twin (batch_twin.py), which runs its service jobs in the
SageMaker twin.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from trainstack.entrypoint import ENTRY_FILE
from trainstack.handlers.environment import lambda_variables
from trainstack.stack_context import DEAD_LETTER_OUTPUT, FIELDS, STOP_FUNCTION_OUTPUT, StackContext
from trainstack_local.account_twin import TwinAccount
from trainstack_local.batch_twin import BatchTwin
from trainstack_local.bridges import ApiFaults, moto_bridges
from trainstack_local.definition import function_logical_ids, render_definition
from trainstack_local.event_feed import EventFeed
from trainstack_local.process_environment import TWIN_CREDENTIALS
from trainstack_local.registry import ImageRegistry, project_image, project_image_uri
from trainstack_local.sagemaker_twin import SageMakerTwin, TwinSettings

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ROOT / "training"
REGION = "us-east-1"
ACCOUNT = "123456789012"
LOCAL_ENVIRONMENT = {
    **TWIN_CREDENTIALS,
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}
DEAD_LETTER_QUEUE = "trainstack-local-dead-letters"
PROJECT_DOCKERFILE = TRAINING / "Dockerfile"
PROJECT_IMAGE_URI = project_image_uri(PROJECT_DOCKERFILE, REGION, ACCOUNT)
# The stack's KMS key (moto's KMS is not served: S3 names the key and calls nothing, see the README).
KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/local"
PSEUDO = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": "amazonaws.com"}
# As storage.py's data buckets: SSE-KMS with the stack's key and an S3 bucket key.
DEFAULT_ENCRYPTION = {
    "Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": KEY_ARN}, "BucketKeyEnabled": True}
    ]
}
# The team queue's resources, in the order they depend on each other: (type, Batch action, its ARN's
# key in the answer, the property that names it; CloudFormation names one after its logical id otherwise).
BATCH_RESOURCES = (
    ("AWS::Batch::ServiceEnvironment", "create_service_environment", "serviceEnvironmentArn", "ServiceEnvironmentName"),
    ("AWS::Batch::SchedulingPolicy", "create_scheduling_policy", "arn", "Name"),
    ("AWS::Batch::JobQueue", "create_job_queue", "jobQueueArn", "JobQueueName"),
)
# The StackContext fields of the team queue, published as the template's outputs say.
QUEUE_FIELDS = ("job_queue_arn", "queue_shares", "queue_default_share", "queue_max_instances", "team_budgets")


@dataclass
class LocalStack:
    """The emulated stack: its names, and its CloudFormation outputs as a deployed stack has them."""

    trigger_bucket: str = "trainstack-local-trigger"
    artifacts_bucket: str = "trainstack-local-artifacts"
    assets_bucket: str = "trainstack-local-assets"
    topic_arn: str = ""
    state_machine_arn: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    faults: ApiFaults = field(default_factory=ApiFaults)  # errors to inject into the emulated AWS APIs
    batch: BatchTwin | None = None  # the emulated Batch service jobs (the team queue's)
    account: TwinAccount | None = None  # the emulated account's quotas (account_twin.py)

    @property
    def context(self) -> StackContext:
        return StackContext.from_outputs(self.outputs, REGION)


@dataclass(frozen=True)
class TrainingFiles:
    """What the stack uploads as file assets: the code tarball and the container entry."""

    source_tarball: Path
    container_entry: Path


def training_files(workdir: Path) -> TrainingFiles:
    from trainstack.source_archive import write_source_tarball

    return TrainingFiles(write_source_tarball(TRAINING, workdir / "sourcedir.tar.gz"), TRAINING / ENTRY_FILE)


MOTO_INTERPRETER_LOGGER = "moto.stepfunctions.parser"


@contextmanager
def local_aws(
    template: dict[str, Any],
    workdir: Path,
    *,
    files: TrainingFiles,
    first_poll_seconds: int = 1,
    settings: TwinSettings | None = None,
    images: ImageRegistry | None = None,
    feed: EventFeed | None = None,
    mlflow_tracking_server_arn: str = "",
) -> Iterator[tuple[LocalStack, SageMakerTwin]]:
    """Create the stack's runtime resources inside moto and yield them with the SageMaker twin;
    `feed` gets a line per run and job event (what `local serve` prints)."""
    from moto import mock_aws

    os.environ.update(LOCAL_ENVIRONMENT)
    # moto's Step Functions interpreter logs every failed or stopped execution at ERROR with its whole
    # evaluation state (tens of kilobytes, "Exception=FailureEventException ..."): emulator
    # internals, not what a user of the stack sees; the run's status and cause say what failed.
    logging.getLogger(MOTO_INTERPRETER_LOGGER).setLevel(logging.CRITICAL)
    images = images or ImageRegistry()
    # The stack's project image, as `make image` (or -c build_training_image=true) builds it on AWS: what
    # a user can run there (`image: project`: `hf:` models, MLflow tracking) runs here.
    images.register(PROJECT_IMAGE_URI, project_image(PROJECT_DOCKERFILE))
    twin = SageMakerTwin(workdir, images, region=REGION, settings=settings, feed=feed)
    account = TwinAccount(twin.settings.account, REGION, ACCOUNT)
    batch = BatchTwin(twin, region=REGION, account=ACCOUNT)
    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}),
        moto_bridges(twin, REGION, ACCOUNT, faults := ApiFaults(), batch, account),
    ):
        stack = LocalStack(faults=faults, batch=batch, account=account)
        try:
            _create_resources(template, stack, files, first_poll_seconds, mlflow_tracking_server_arn)
            yield stack, twin
        finally:
            batch.close()  # before the twin stops its jobs, so that no service job starts one after
            twin.close()


def _create_resources(
    template: dict[str, Any], stack: LocalStack, files: TrainingFiles, first_poll_seconds: int, mlflow_tracking_server_arn: str
) -> None:
    """The stack's runtime resources in moto, each function configured with the stack's variables.
    `mlflow_tracking_server_arn`: the twin's tracking server, when one runs (the stack's setting)."""
    s3 = boto3.client("s3", region_name=REGION)
    for bucket in (stack.trigger_bucket, stack.artifacts_bucket, stack.assets_bucket):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=stack.trigger_bucket, VersioningConfiguration={"Status": "Enabled"})
    for bucket in (stack.trigger_bucket, stack.artifacts_bucket):  # the stack's data buckets: SSE-KMS with its key
        s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration=DEFAULT_ENCRYPTION)
    s3.put_bucket_notification_configuration(
        Bucket=stack.trigger_bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    # File assets are named by their content hash, keeping the extension, as CDK names them.
    source_key = f"{_sha256(files.source_tarball)}.tar.gz"
    entry_key = f"{_sha256(files.container_entry)}.py"
    s3.upload_file(str(files.source_tarball), stack.assets_bucket, source_key)
    s3.upload_file(str(files.container_entry), stack.assets_bucket, entry_key)
    assert stack.account is not None, "local_aws gives the stack its account"
    network = _create_network(stack.account.settings.availability_zone_id)
    stack.topic_arn = boto3.client("sns", region_name=REGION).create_topic(Name="trainstack-local")["TopicArn"]
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="trainstack-local", AssumeRolePolicyDocument="{}")[
        "Role"
    ]["Arn"]
    stack.outputs = StackContext(
        region=REGION,
        role_arn=role,
        artifacts_bucket=stack.artifacts_bucket,
        key_arn=KEY_ARN,
        subnet_ids=(network["subnet"],),
        security_group_ids=(network["security_group"],),
        source_s3_uri=f"s3://{stack.assets_bucket}/{source_key}",
        entry_s3_uri=f"s3://{stack.assets_bucket}/{entry_key}",
        mlflow_tracking_server_arn=mlflow_tracking_server_arn,
        project_image_uri=PROJECT_IMAGE_URI,
        **_create_queue(template),
    ).to_outputs()
    environment = lambda_variables(
        stack.context,
        topic_arn=stack.topic_arn,
        first_poll_seconds=first_poll_seconds,
        max_poll_seconds=max(first_poll_seconds * 4, 1),
    )
    lambda_client = boto3.client("lambda", region_name=REGION)
    arns = {}
    for name, logical_id in function_logical_ids(template).items():
        properties = template["Resources"][logical_id]["Properties"]
        arns[logical_id] = lambda_client.create_function(
            FunctionName=f"trainstack-{name}",
            Runtime=properties["Runtime"],  # the runtime the stack deploys
            Role=role,
            Handler=properties["Handler"],
            Code={"ZipFile": _empty_zip()},  # the handler runs in-process (see bridges.py)
            Environment={"Variables": environment},
        )["FunctionArn"]
    definition = render_definition(template, arns, PSEUDO)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    stack.state_machine_arn = sfn.create_state_machine(name="trainstack-local", definition=json.dumps(definition), roleArn=role)[
        "stateMachineArn"
    ]
    stack.outputs.update(
        TriggerBucketName=stack.trigger_bucket, StateMachineArn=stack.state_machine_arn, TopicArn=stack.topic_arn
    )

    dead_letters = _logical_id(template, "AWS::SQS::Queue", "DeadLetters")
    state_machine_id = _logical_id(template, "AWS::StepFunctions::StateMachine")
    queue_url = boto3.client("sqs", region_name=REGION).create_queue(QueueName=DEAD_LETTER_QUEUE)["QueueUrl"]
    stack.outputs[DEAD_LETTER_OUTPUT] = queue_url
    stack.outputs[STOP_FUNCTION_OUTPUT] = arns[function_logical_ids(template)["stop"]]
    queue_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{DEAD_LETTER_QUEUE}"
    events = boto3.client("events", region_name=REGION)
    references = {
        json.dumps({"Ref": _logical_id(template, "AWS::S3::Bucket", "Trigger")}): json.dumps(stack.trigger_bucket),
        json.dumps({"Ref": state_machine_id}): json.dumps(stack.state_machine_arn),
    }
    for logical_id, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        if resource["Type"] != "AWS::Events::Rule" or "EventPattern" not in properties:
            continue
        targets = []
        for declared in properties.get("Targets", []):
            arn = _resolve_target(declared.get("Arn"), arns, state_machine_id, stack.state_machine_arn)
            if arn is None:  # e.g. the notification topic: nothing to emulate
                continue
            target = {"Id": f"t{len(targets)}", "Arn": arn}
            if declared.get("DeadLetterConfig", {}).get("Arn") == {"Fn::GetAtt": [dead_letters, "Arn"]}:
                target["DeadLetterConfig"] = {"Arn": queue_arn}
            targets.append(target)
        if not targets:
            continue
        pattern = json.dumps(properties["EventPattern"])
        for reference, value in references.items():
            pattern = pattern.replace(reference, value)
        events.put_rule(Name=logical_id, EventPattern=pattern)
        events.put_targets(Rule=logical_id, Targets=targets)


def _create_network(availability_zone_id: str) -> dict[str, str]:
    """The stack's training subnet in the account's AZ, and its security group, as EC2 describes them."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZoneId=availability_zone_id)["Subnet"]
    group = ec2.create_security_group(GroupName="trainstack-training", Description="training jobs", VpcId=vpc)["GroupId"]
    return {"subnet": subnet["SubnetId"], "security_group": group}


def _create_queue(template: dict[str, Any]) -> dict[str, Any]:
    """The template's team queue created through Batch's API (the Batch twin), references between its
    resources resolved; returns the StackContext fields its outputs publish (none without a queue)."""
    batch = boto3.client("batch", region_name=REGION)
    arns: dict[str, str] = {}
    for resource_type, action, arn_key, name_property in BATCH_RESOURCES:
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] == resource_type:
                properties = {name_property: logical_id, **_resolve(resource.get("Properties", {}), arns)}
                arns[logical_id] = getattr(batch, action)(**_api_parameters(properties))[arn_key]
    if not arns:
        return {}
    outputs = template.get("Outputs", {})
    published = [f for f in FIELDS if f.name in QUEUE_FIELDS and f.output in outputs]
    return {f.name: f.decode(_resolve(outputs[f.output]["Value"], arns)) for f in published}


def _resolve(value: Any, arns: dict[str, str]) -> Any:
    """A template value with the Batch resources' Ref / Fn::GetAtt (their ARNs), pseudo parameters and
    Fn::Join resolved; any other reference is not the team queue's and stops here."""
    if isinstance(value, list):
        return [_resolve(item, arns) for item in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        return arns.get(value["Ref"]) or PSEUDO[value["Ref"]]
    if "Fn::GetAtt" in value:
        return arns[value["Fn::GetAtt"][0]]  # every Batch attribute the stack reads is its ARN
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(_resolve(part, arns)) for part in parts)
    return {key: _resolve(item, arns) for key, item in value.items()}


def _api_parameters(properties: Any) -> Any:
    """CloudFormation's properties as Batch's API names them (PascalCase -> camelCase); the keys of a
    Tags map are the user's and stay as they are."""
    if isinstance(properties, list):
        return [_api_parameters(item) for item in properties]
    if not isinstance(properties, dict):
        return properties
    return {key[0].lower() + key[1:]: item if key == "Tags" else _api_parameters(item) for key, item in properties.items()}


def _resolve_target(arn: Any, function_arns: dict[str, str], state_machine_id: str, state_machine_arn: str) -> str | None:
    """A rule target that the emulation delivers to: the state machine or one of the functions."""
    if not isinstance(arn, dict):
        return None
    if arn.get("Ref") == state_machine_id:
        return state_machine_arn
    return function_arns.get(arn.get("Fn::GetAtt", [""])[0])


def _logical_id(template: dict[str, Any], resource_type: str, name_part: str = "") -> str:
    """The logical id of the template's one resource of this type (whose id contains `name_part`)."""
    return next(k for k, r in template["Resources"].items() if r["Type"] == resource_type and name_part in k)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "trainstack local: the handler runs in-process\n")
    return buffer.getvalue()
