"""Helpers for driving runs through the emulated stack and reading what the twin's jobs left behind."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

import boto3
import torch

from trainstack.identity import Run
from trainstack.polling import poll_until
from trainstack.s3uri import split_s3_uri
from trainstack_local.emulator import REGION, LocalStack
from trainstack_local.sagemaker_twin import JobRun, SageMakerTwin


def start_inline(stack: LocalStack, spec: dict[str, Any], name: str, *, lineage: str | None = None, resume: bool = False) -> str:
    """StartExecution with the spec inline; returns the execution ARN."""
    payload: dict[str, Any] = {"spec": spec}
    if lineage:
        payload["lineage"] = lineage
    if resume:
        payload["resume"] = True
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return sfn.start_execution(stateMachineArn=stack.state_machine_arn, name=name, input=json.dumps(payload))["executionArn"]


def job_name(stack: LocalStack, spec: dict[str, Any], execution: str, *, lineage: str | None = None, resume: bool = False) -> str:
    """The job an inline start makes, derived as the pipeline derives it (trainstack.identity)."""
    run = Run(f"execution:{lineage or execution}", resume=execution if resume else None)
    return run.trial().job_name(stack.context.name_prefix, spec["name"])


def job_run(twin: SageMakerTwin, name: str, timeout: float = 60) -> JobRun:
    poll_until(lambda: name in twin.runs, timeout=timeout, what=f"training job {name} to be created")
    return twin.runs[name]


def printed_steps(run: JobRun, attempt: int = -1) -> list[int]:
    """The steps rank 0 (on algo-1) reported in one attempt."""
    if not run.attempts:
        return []
    log = run.attempts[attempt].root / "algo-1.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return [int(line.split()[0].removeprefix("step=")) for line in text.splitlines() if line.startswith("step=")]


def wait_for_step(run: JobRun, step: int, timeout: float = 180) -> None:
    poll_until(lambda: max(printed_steps(run), default=0) >= step, timeout=timeout, what=f"{run.name} to reach step {step}")


def description(name: str) -> dict[str, Any]:
    return boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=name)


def wait_for_status(name: str, statuses: tuple[str, ...], timeout: float = 300) -> dict[str, Any]:
    return poll_until(
        lambda: description(name), lambda found: found["TrainingJobStatus"] in statuses, timeout=timeout, interval=0.5,
        what=f"{name} to be {' or '.join(statuses)}",
    )  # fmt: skip


def model_state(name: str) -> dict[str, torch.Tensor]:
    """The model.pt inside the job's model.tar.gz, as a user downloading it would load it."""
    bucket, key = split_s3_uri(description(name)["ModelArtifacts"]["S3ModelArtifacts"])
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        return torch.load(io.BytesIO(tar.extractfile("model.pt").read()), weights_only=True)


def checkpoint_keys(name: str) -> list[str]:
    bucket, prefix = split_s3_uri(description(name)["CheckpointConfig"]["S3Uri"])
    s3 = boto3.client("s3", region_name=REGION)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix) :] for page in pages for o in page.get("Contents", []))


def notifications(stack: LocalStack) -> list[dict[str, Any]]:
    """Every message the stack's topic sent, oldest first (moto keeps them)."""
    from moto.sns.models import sns_backends

    from trainstack_local.emulator import ACCOUNT

    topic = sns_backends[ACCOUNT][REGION].topics[stack.topic_arn]
    return [json.loads(message) for _, message, *_ in topic.sent_notifications]


def function_log(name: str) -> list[str]:
    """What an emulated function printed, line by line, from its log group as Lambda names it."""
    logs = boto3.client("logs", region_name=REGION)
    group = f"/aws/lambda/{name}"
    if not logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]:
        return []
    streams = logs.describe_log_streams(logGroupName=group)["logStreams"]
    return [
        event["message"]
        for stream in streams
        for event in logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"])["events"]
    ]
