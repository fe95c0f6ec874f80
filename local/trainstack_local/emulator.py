"""The whole pipeline offline: moto (pinned) as the local AWS, the SageMaker twin for training jobs,
and the stack's runtime resources created from the synthesized template: the same definition,
handlers, rules and names (see bridges.py for where moto needed help). A template with the team queue
(AWS::Batch resources) gets it in the Batch twin (batch_twin.py), which runs its service jobs in the
SageMaker twin. Each team's execution role is created in IAM with the template's policies, their
references resolved to the emulated resources, and S3 enforces them for the jobs that run as it
(iam_twin.py); the training code is where the template's outputs say, in the CDK bootstrap's bucket.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from trainstack.entrypoint import ENTRY_FILE
from trainstack.handlers.environment import lambda_variables
from trainstack.s3uri import split_s3_uri
from trainstack.stack_context import DEAD_LETTER_OUTPUT, FIELDS, STOP_FUNCTION_OUTPUT, StackContext
from trainstack_local.account_twin import TwinAccount
from trainstack_local.batch_twin import BatchTwin
from trainstack_local.bridges import ApiFaults, moto_bridges, role_checked_s3
from trainstack_local.definition import function_logical_ids, render_definition
from trainstack_local.event_feed import EventFeed
from trainstack_local.process_environment import TWIN_CREDENTIALS
from trainstack_local.registry import ImageRegistry, project_image, project_image_uri
from trainstack_local.s3_endpoint import s3_endpoint
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
# The stack's KMS key (moto's KMS is not served: S3 names the key and calls nothing, see docs/local-mode.md).
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
# The outputs that name the execution roles: the default team's, and each team's ("team=arn,...").
ROLE_OUTPUTS = ("ExecutionRoleArn", "TeamExecutionRoleArns")
# The outputs that name each team's access policy, for its people and CI (TeamAccessPolicy<Team>).
TEAM_POLICY_OUTPUT = "TeamAccessPolicy"
# The role the stack's functions and state machine run as here: their calls carry the twin's own keys,
# which nothing evaluates (the platform's), so it holds no policy.
PLATFORM_ROLE = "trainstack-local"


@dataclass
class LocalStack:
    """The emulated stack: its names, and its CloudFormation outputs as a deployed stack has them."""

    trigger_bucket: str = "trainstack-local-trigger"
    artifacts_bucket: str = "trainstack-local-artifacts"
    assets_bucket: str = ""  # the CDK bootstrap's, as the template's SourceS3Uri names it
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
# The state machine's Describe polls and first restart wait (the Lambdas' FIRST_POLL_SECONDS and
# MAX_POLL_SECONDS; the deployed stack starts at a minute and backs off). No back-off here: a twin's job
# ends within a minute, and every second a run waits on a backed-off poll after its job ended is a
# second the tests' cores stand idle.
STATE_MACHINE_POLL_SECONDS = 1


@contextmanager
def local_aws(
    template: dict[str, Any],
    workdir: Path,
    *,
    files: TrainingFiles,
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
        role_checked_s3(ACCOUNT),
        s3_endpoint(ACCOUNT) as endpoint,
    ):
        twin.storage_endpoint = endpoint  # the S3 the jobs' containers reach, with their role's credentials
        stack = LocalStack(faults=faults, batch=batch, account=account)
        try:
            _create_resources(template, stack, files, mlflow_tracking_server_arn)
            yield stack, twin
        finally:
            batch.close()  # before the twin stops its jobs, so that no service job starts one after
            twin.close()


def _create_resources(template: dict[str, Any], stack: LocalStack, files: TrainingFiles, mlflow_tracking_server_arn: str) -> None:
    """The stack's runtime resources in moto, each function configured with the stack's variables.
    `mlflow_tracking_server_arn`: the twin's tracking server, when one runs (the stack's setting)."""
    s3 = boto3.client("s3", region_name=REGION)
    references = {  # what the template's references to the stack's buckets and key resolve to here
        _logical_id(template, "AWS::S3::Bucket", "Trigger"): _bucket(stack.trigger_bucket),
        _logical_id(template, "AWS::S3::Bucket", "Artifacts"): _bucket(stack.artifacts_bucket),
        _logical_id(template, "AWS::KMS::Key"): {"Ref": KEY_ARN.rsplit("/", 1)[1], "Arn": KEY_ARN},
    }
    outputs = template["Outputs"]
    # File assets go where the template's outputs name them: the CDK bootstrap's bucket, keyed by asset hash.
    source_uri = _resolve(outputs["SourceS3Uri"]["Value"], template, references)
    entry_uri = _resolve(outputs["ContainerEntryS3Uri"]["Value"], template, references)
    stack.assets_bucket = split_s3_uri(source_uri)[0]
    for bucket in dict.fromkeys((stack.trigger_bucket, stack.artifacts_bucket, stack.assets_bucket, split_s3_uri(entry_uri)[0])):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=stack.trigger_bucket, VersioningConfiguration={"Status": "Enabled"})
    for bucket in (stack.trigger_bucket, stack.artifacts_bucket):  # the stack's data buckets: SSE-KMS with its key
        s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration=DEFAULT_ENCRYPTION)
    s3.put_bucket_notification_configuration(
        Bucket=stack.trigger_bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    s3.upload_file(str(files.source_tarball), *split_s3_uri(source_uri))
    s3.upload_file(str(files.container_entry), *split_s3_uri(entry_uri))
    assert stack.account is not None, "local_aws gives the stack its account"
    network = _create_network(stack.account.settings.availability_zone_id)
    stack.topic_arn = boto3.client("sns", region_name=REGION).create_topic(Name="trainstack-local")["TopicArn"]
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName=PLATFORM_ROLE, AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    _create_iam(template, references)
    published = [f for f in FIELDS if f.output in ROLE_OUTPUTS and f.output in outputs]  # TeamExecutionRoleArns: not before teams
    roles = {f.name: f.decode(_resolve(outputs[f.output]["Value"], template, references)) for f in published}
    stack.outputs = StackContext(
        region=REGION,
        artifacts_bucket=stack.artifacts_bucket,
        key_arn=KEY_ARN,
        subnet_ids=(network["subnet"],),
        security_group_ids=(network["security_group"],),
        source_s3_uri=source_uri,
        entry_s3_uri=entry_uri,
        mlflow_tracking_server_arn=mlflow_tracking_server_arn,
        project_image_uri=PROJECT_IMAGE_URI,
        **roles,
        **_create_queue(template),
    ).to_outputs()
    for name, value in outputs.items():  # each team's access policy, to attach to a principal of the twin's IAM
        if name.startswith(TEAM_POLICY_OUTPUT):
            stack.outputs[name] = _resolve(value["Value"], template, references)
    environment = lambda_variables(
        stack.context,
        topic_arn=stack.topic_arn,
        first_poll_seconds=STATE_MACHINE_POLL_SECONDS,
        max_poll_seconds=STATE_MACHINE_POLL_SECONDS,
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
    references: dict[str, dict[str, str]] = {}
    for resource_type, action, arn_key, name_property in BATCH_RESOURCES:
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] == resource_type:
                properties = {name_property: logical_id, **_resolve(resource.get("Properties", {}), template, references)}
                arn = getattr(batch, action)(**_api_parameters(properties))[arn_key]
                # Ref and Fn::GetAtt of each of these answer its ARN (the attribute is named as the answer's key)
                references[logical_id] = dict.fromkeys(("Ref", "Arn", arn_key[:1].upper() + arn_key[1:]), arn)
    if not references:
        return {}
    outputs = template.get("Outputs", {})
    published = [f for f in FIELDS if f.name in QUEUE_FIELDS and f.output in outputs]
    return {f.name: f.decode(_resolve(outputs[f.output]["Value"], template, references)) for f in published}


def _create_iam(template: dict[str, Any], references: dict[str, dict[str, str]]) -> None:
    """The execution roles the template's outputs name (ROLE_OUTPUTS), each in IAM with its trust policy
    and the template's managed policies attached to it, and each team's access policy (TEAM_POLICY_OUTPUT),
    their references resolved to the emulated resources; each role's and policy's Ref and Fn::GetAtt go
    into `references`."""
    iam = boto3.client("iam", region_name=REGION)
    named = [value["Value"] for output, value in template["Outputs"].items() if output in ROLE_OUTPUTS]
    for logical_id in dict.fromkeys(_roles_referenced(named, template)):
        properties = template["Resources"][logical_id]["Properties"]
        created = iam.create_role(
            RoleName=f"{PLATFORM_ROLE}-{logical_id}"[:64],  # CloudFormation names it <stack>-<logical id>-<suffix>
            AssumeRolePolicyDocument=json.dumps(_resolve(properties["AssumeRolePolicyDocument"], template, references)),
            Description=properties.get("Description", ""),
        )["Role"]
        references[logical_id] = {"Ref": created["RoleName"], "Arn": created["Arn"]}
    team_policies = [v["Value"].get("Ref") for k, v in template["Outputs"].items() if k.startswith(TEAM_POLICY_OUTPUT)]
    for logical_id, resource in template["Resources"].items():
        attached = [r["Ref"] for r in resource.get("Properties", {}).get("Roles", []) if r.get("Ref") in references]
        if resource["Type"] != "AWS::IAM::ManagedPolicy" or not (attached or logical_id in team_policies):
            continue
        document = _resolve(resource["Properties"]["PolicyDocument"], template, references)
        policy = iam.create_policy(PolicyName=f"{PLATFORM_ROLE}-{logical_id}"[:128], PolicyDocument=json.dumps(document))
        references[logical_id] = {"Ref": policy["Policy"]["Arn"]}  # a managed policy's Ref is its ARN
        for role in attached:
            iam.attach_role_policy(RoleName=references[role]["Ref"], PolicyArn=policy["Policy"]["Arn"])


def _roles_referenced(value: Any, template: dict[str, Any]) -> list[str]:
    """The logical ids of the IAM roles whose ARNs (Fn::GetAtt) a template value names, in order."""
    if isinstance(value, list):
        return [found for item in value for found in _roles_referenced(item, template)]
    if not isinstance(value, dict):
        return []
    if "Fn::GetAtt" in value:
        logical_id = value["Fn::GetAtt"][0]
        return [logical_id] if template["Resources"][logical_id]["Type"] == "AWS::IAM::Role" else []
    return [found for item in value.values() for found in _roles_referenced(item, template)]


def _bucket(name: str) -> dict[str, str]:
    """A bucket's Ref and Fn::GetAtt Arn."""
    return {"Ref": name, "Arn": f"arn:aws:s3:::{name}"}


def _resolve(value: Any, template: dict[str, Any], references: dict[str, dict[str, str]]) -> Any:
    """A template value with the intrinsic functions the stack's resources and outputs use resolved: Ref
    and Fn::GetAtt of the resources made here (`references`: logical id -> "Ref" and each attribute),
    pseudo parameters, Fn::Join, Fn::Sub, Fn::Split and Fn::FindInMap (the template's Mappings). A
    reference to a resource not made here stops here (KeyError)."""
    if isinstance(value, list):
        return [_resolve(item, template, references) for item in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        return PSEUDO.get(value["Ref"]) or references[value["Ref"]]["Ref"]
    if "Fn::GetAtt" in value:
        logical_id, attribute = value["Fn::GetAtt"]
        return references[logical_id][attribute]
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(_resolve(part, template, references)) for part in parts)
    if "Fn::Sub" in value:
        text, variables = (value["Fn::Sub"], {}) if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"]

        def substituted(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(_resolve(variables[name], template, references))
            if "." in name:  # ${LogicalId.Attribute}
                return str(_resolve({"Fn::GetAtt": name.split(".", 1)}, template, references))
            return str(_resolve({"Ref": name}, template, references))

        return re.sub(r"\$\{([^!}][^}]*)\}", substituted, text)
    if "Fn::Split" in value:
        separator, source = value["Fn::Split"]
        return str(_resolve(source, template, references)).split(separator)
    if "Fn::FindInMap" in value:
        mapping, top, second = (_resolve(part, template, references) for part in value["Fn::FindInMap"])
        return template["Mappings"][mapping][top][second]
    return {key: _resolve(item, template, references) for key, item in value.items()}


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


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "trainstack local: the handler runs in-process\n")
    return buffer.getvalue()
