"""The whole pipeline offline: moto (pinned) as the local AWS, with four small bridges where moto
stops short (shared/reference/toolchain.md):

- Lambda: moto without Docker only echoes payloads; here the function's own `Handler` is imported
  and called in-process, and an exception is reported the way Lambda reports it, so the state
  machine's Retry/Catch match the exception class name.
- EventBridge: moto matches the rules (wildcards included) but cannot deliver to Step Functions;
  here a matched rule starts the execution with the event as input.
- SageMaker: moto records a job and calls it Completed at once, and silently overwrites a job
  with the same name; here a duplicate name is refused as the real API refuses it, and each job
  runs for real through the SageMaker training toolkit (one host, CPU processes), with its
  channels, checkpoints and model moved between moto's S3 and a local /opt/ml.
- Step Functions: moto's interpreter runs the synthesized definition as is (Wait states in real
  time, so the poll interval is shortened through the Lambdas' environment).
Everything is created from the synthesized template: the same definition, handlers and names.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import threading
import time
import traceback
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from trainstack.handlers.environment import lambda_variables
from trainstack.request import StackContext
from trainstack.s3uri import split_s3_uri
from trainstack_local import container
from trainstack_local.definition import function_logical_ids, render_definition

REGION = "us-east-1"
ACCOUNT = "123456789012"
LOCAL_PROCESSES_PER_HOST = 2
LOCAL_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class LocalStack:
    """The emulated stack's names, as its CloudFormation outputs would give them."""

    trigger_bucket: str = "trainstack-local-trigger"
    artifacts_bucket: str = "trainstack-local-artifacts"
    assets_bucket: str = "trainstack-local-assets"
    topic_arn: str = ""
    state_machine_arn: str = ""
    jobs: dict[str, Path] = field(default_factory=dict)  # training job name -> its local /opt/ml


class SageMakerEmulator:
    """Runs each created training job through the real toolkit in a background thread."""

    def __init__(self, workdir: Path, capacity_failures: int = 0) -> None:
        self.workdir = workdir
        self.threads: list[threading.Thread] = []
        self.runs: dict[str, Path] = {}
        self.capacity_failures = capacity_failures  # the first N jobs find no capacity, as SageMaker reports it

    def start(self, job: Any) -> None:
        job.training_job_status, job.secondary_status = "InProgress", "Starting"
        if self.capacity_failures > 0:
            self.capacity_failures -= 1
            job.failure_reason = "CapacityError: Unable to provision requested ML compute capacity. Please retry later."
            job.training_job_status, job.secondary_status = "Failed", "Failed"
            return
        thread = threading.Thread(target=self._run, args=(job,), name=job.training_job_name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _run(self, job: Any) -> None:
        s3 = boto3.client("s3", region_name=REGION)
        root = self.workdir / job.training_job_name
        self.runs[job.training_job_name] = root
        try:
            job.secondary_status = "Training"
            hyperparameters = dict(job.hyper_parameters)
            source = _download(s3, json.loads(hyperparameters["sagemaker_submit_directory"]), root / "sourcedir.tar.gz")
            hyperparameters["sagemaker_submit_directory"] = json.dumps(str(source))
            hyperparameters["sagemaker_mpi_num_of_processes_per_host"] = json.dumps(LOCAL_PROCESSES_PER_HOST)
            checkpoints = root / "checkpoints"
            if "checkpoint_dir" in hyperparameters:  # /opt/ml/checkpoints, synced with S3 as SageMaker does
                hyperparameters["checkpoint_dir"] = json.dumps(str(checkpoints))
                _sync_down(s3, job.checkpoint_config["S3Uri"], checkpoints)
            if "tensorboard_dir" in hyperparameters:
                hyperparameters["tensorboard_dir"] = json.dumps(str(root / "tensorboard"))
            channels = {
                c["ChannelName"]: _sync_down(s3, c["DataSource"]["S3DataSource"]["S3Uri"], root / "channels" / c["ChannelName"])
                for c in job.input_data_config or []
            }
            base = container.prepare(
                root / "opt" / "ml", hyperparameters, channels, instance_type=job.resource_config["InstanceType"]
            )
            result = container.run(base, {"OMP_NUM_THREADS": "1"})
            if "checkpoint_dir" in job.hyper_parameters:
                _sync_up(s3, checkpoints, job.checkpoint_config["S3Uri"])
            if result.succeeded:
                output = job.output_data_config["S3OutputPath"].rstrip("/") + f"/{job.training_job_name}/output/model.tar.gz"
                _upload_tar(s3, result.model_dir, output)
                job.model_artifacts = {"S3ModelArtifacts": output}
                job.training_job_status, job.secondary_status = "Completed", "Completed"
            else:
                job.failure_reason = (result.failure_reason or result.stderr[-1000:] or "the training script failed")[:1024]
                job.training_job_status, job.secondary_status = "Failed", "Failed"
        except Exception as error:  # the emulated service fails the job, as SageMaker would
            job.failure_reason = f"trainstack local emulation: {type(error).__name__}: {error}"[:1024]
            job.training_job_status, job.secondary_status = "Failed", "Failed"
        job.training_end_time = job.last_modified_time = _now()

    def wait(self, timeout: float = 600) -> None:
        for thread in self.threads:
            thread.join(timeout)


@contextmanager
def local_aws(
    template: dict[str, Any], workdir: Path, *, source_tarball: Path, first_poll_seconds: int = 1, capacity_failures: int = 0
) -> Iterator[tuple[LocalStack, SageMakerEmulator]]:
    """Create the stack's runtime resources inside moto and yield their names. `capacity_failures`:
    how many jobs the emulated SageMaker fails for lack of capacity before it has some."""
    from moto import mock_aws

    os.environ.update(LOCAL_ENVIRONMENT)
    emulator = SageMakerEmulator(workdir, capacity_failures)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}), _bridges(emulator):
        stack = LocalStack()
        _create_resources(template, stack, source_tarball, first_poll_seconds)
        yield stack, emulator


def _create_resources(template: dict[str, Any], stack: LocalStack, source_tarball: Path, first_poll_seconds: int) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    for bucket in (stack.trigger_bucket, stack.artifacts_bucket, stack.assets_bucket):
        s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=stack.trigger_bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_notification_configuration(
        Bucket=stack.trigger_bucket, NotificationConfiguration={"EventBridgeConfiguration": {}}
    )
    s3.upload_file(str(source_tarball), stack.assets_bucket, "sourcedir.tar.gz")
    stack.topic_arn = boto3.client("sns", region_name=REGION).create_topic(Name="trainstack-local")["TopicArn"]
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="trainstack-local", AssumeRolePolicyDocument="{}")[
        "Role"
    ]["Arn"]

    job_stack = StackContext(
        region=REGION,
        role_arn=role,
        artifacts_bucket=stack.artifacts_bucket,
        key_arn=f"arn:aws:kms:{REGION}:{ACCOUNT}:key/local",
        subnet_ids=("subnet-local",),
        security_group_ids=("sg-local",),
        source_s3_uri=f"s3://{stack.assets_bucket}/sourcedir.tar.gz",
    )
    environment = lambda_variables(
        job_stack,
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
            Runtime="python3.11",
            Role=role,
            Handler=properties["Handler"],
            Code={"ZipFile": _empty_zip()},  # the handler runs in-process (see _invoke)
            Environment={"Variables": environment},
        )["FunctionArn"]
    definition = render_definition(
        template,
        arns,
        {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": "amazonaws.com"},
    )
    sfn = boto3.client("stepfunctions", region_name=REGION)
    stack.state_machine_arn = sfn.create_state_machine(name="trainstack-local", definition=json.dumps(definition), roleArn=role)[
        "stateMachineArn"
    ]

    events = boto3.client("events", region_name=REGION)
    for logical_id, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        if resource["Type"] != "AWS::Events::Rule" or properties.get("EventPattern", {}).get("source") != ["aws.s3"]:
            continue
        pattern = json.loads(
            json.dumps(properties["EventPattern"]).replace(
                json.dumps({"Ref": _trigger_bucket_id(template)}), json.dumps(stack.trigger_bucket)
            )
        )
        events.put_rule(Name=logical_id, EventPattern=json.dumps(pattern))
        events.put_targets(Rule=logical_id, Targets=[{"Id": "pipeline", "Arn": stack.state_machine_arn}])


@contextmanager
def _bridges(emulator: SageMakerEmulator) -> Iterator[None]:
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.events.models import Rule
    from moto.sagemaker.models import SageMakerModelBackend

    originals = (LambdaSimpleBackend.invoke, Rule.send_to_targets, SageMakerModelBackend.create_training_job)
    create_training_job = SageMakerModelBackend.create_training_job

    def invoke(self: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        function = self.get_function(function_name, qualifier)
        module_name, _, attribute = function.handler.rpartition(".")
        handler = getattr(__import__(module_name, fromlist=[attribute]), attribute)
        with _INVOKE_LOCK, _function_environment(function.environment_vars):
            try:
                return json.dumps(handler(json.loads(body or "{}"), None), default=str).encode()
            except Exception as error:  # reported as Lambda reports an unhandled exception
                response_headers["x-amz-function-error"] = "Unhandled"
                trace = traceback.format_exc().splitlines()
                return json.dumps({"errorMessage": str(error), "errorType": type(error).__name__, "stackTrace": trace}).encode()

    def send_to_targets(self: Any, original_event: dict[str, Any], transform_input: bool = True) -> None:
        if not self.event_pattern.matches_event(original_event):
            return
        for target in self.targets:
            if ":states:" in target["Arn"]:
                name = f"s3-{int(time.time() * 1000)}-{abs(hash(json.dumps(original_event, default=str))) % 10**8}"
                boto3.client("stepfunctions", region_name=REGION).start_execution(
                    stateMachineArn=target["Arn"], name=name, input=json.dumps(original_event, default=str)
                )

    def create(self: Any, training_job_name: str, *args: Any, **kwargs: Any) -> Any:
        if training_job_name in self.training_jobs:  # the real API refuses a second job with a name
            from moto.sagemaker.exceptions import ValidationError

            raise ValidationError(
                "Training job names must be unique within an AWS account and region, "
                f"and a training job with this name already exists ({training_job_name})"
            )
        job = create_training_job(self, training_job_name, *args, **kwargs)
        emulator.start(job)
        return job

    LambdaSimpleBackend.invoke, Rule.send_to_targets, SageMakerModelBackend.create_training_job = invoke, send_to_targets, create
    try:
        yield
    finally:
        LambdaSimpleBackend.invoke, Rule.send_to_targets, SageMakerModelBackend.create_training_job = originals


_INVOKE_LOCK = threading.Lock()  # one handler at a time: each sees only its own environment


@contextmanager
def _function_environment(variables: dict[str, str]) -> Iterator[None]:
    """The function's configured environment for the call, as Lambda provides it. Only its own
    variables are set and restored: emulated jobs run in other threads, reading the environment
    (credentials, PATH) at any moment, so it must never be cleared."""
    from trainstack.handlers.environment import use_client_factory

    previous = {key: os.environ.get(key) for key in variables}
    os.environ.update(variables)
    use_client_factory(None)  # the handlers cache their environment per process, like a warm Lambda
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        use_client_factory(None)


def wait_for_execution(execution_arn: str, timeout: float = 600) -> dict[str, Any]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        description = sfn.describe_execution(executionArn=execution_arn)
        if description["status"] != "RUNNING":
            return description
        time.sleep(0.5)
    raise TimeoutError(f"{execution_arn} still running after {timeout} s")


def _trigger_bucket_id(template: dict[str, Any]) -> str:
    return next(k for k, r in template["Resources"].items() if r["Type"] == "AWS::S3::Bucket" and "Trigger" in k)


def _download(s3: Any, uri: str, destination: Path) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    bucket, key = split_s3_uri(uri)
    s3.download_file(bucket, key, str(destination))
    return destination


def _sync_down(s3: Any, uri: str, destination: Path) -> Path:
    bucket, prefix = split_s3_uri(uri)
    destination.mkdir(parents=True, exist_ok=True)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            relative = item["Key"][len(prefix) :].lstrip("/")
            if relative:
                (destination / relative).parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, item["Key"], str(destination / relative))
    return destination


def _sync_up(s3: Any, source: Path, uri: str) -> None:
    bucket, prefix = split_s3_uri(uri)
    for path in sorted(source.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"{prefix.rstrip('/')}/{path.relative_to(source).as_posix()}")


def _upload_tar(s3: Any, directory: Path, uri: str) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=path.relative_to(directory).as_posix())
    bucket, key = split_s3_uri(uri)
    s3.put_object(Bucket=bucket, Key=key, Body=buffer.getvalue())


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "trainstack local: the handler runs in-process\n")
    return buffer.getvalue()


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)
