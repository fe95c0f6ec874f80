"""Drive the emulated pipeline like a user: upload data and a spec, wait for the run."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from trainstack_local.emulator import REGION, TRAINING, LocalStack

SAMPLE_TOKENS = TRAINING / "sample_data" / "tokens"
# What `make local` (`trainstack local run`) runs: gpt-tiny under DDP on the sample data.
DEFAULT_JOB = Path(__file__).resolve().parent / "default_job.yaml"


@dataclass(frozen=True)
class Run:
    execution_arn: str
    status: str
    output: dict[str, Any]
    cause: str


def upload_sample_data(stack: LocalStack, prefix: str = "datasets/sample/") -> None:
    s3 = boto3.client("s3", region_name=REGION)
    for shard in sorted(SAMPLE_TOKENS.glob("*.bin")):
        s3.upload_file(str(shard), stack.trigger_bucket, f"{prefix}{shard.name}")


def executions(stack: LocalStack) -> list[dict[str, Any]]:
    return boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=stack.state_machine_arn)[
        "executions"
    ]


def wait_for_new_executions(stack: LocalStack, known: int, count: int = 1, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = executions(stack)
        if len(found) >= known + count:
            return [e["executionArn"] for e in sorted(found, key=lambda e: e["startDate"])][known:]
        time.sleep(0.2)
    raise TimeoutError(f"no new execution of {stack.state_machine_arn} within {timeout} s")


def wait_for_execution(execution_arn: str, timeout: float = 600) -> dict[str, Any]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        description = sfn.describe_execution(executionArn=execution_arn)
        if description["status"] != "RUNNING":
            return description
        time.sleep(0.5)
    raise TimeoutError(f"{execution_arn} still running after {timeout} s")


def finish(execution_arn: str, timeout: float = 600) -> Run:
    description = wait_for_execution(execution_arn, timeout)
    output = json.loads(description.get("output") or "{}")
    return Run(execution_arn, description["status"], output, description.get("cause", ""))


def training_jobs() -> list[dict[str, Any]]:
    return boto3.client("sagemaker", region_name=REGION).list_training_jobs(MaxResults=100)["TrainingJobSummaries"]
