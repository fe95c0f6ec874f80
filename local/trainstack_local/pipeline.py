"""Drive the emulated pipeline like a user: upload data and a spec, wait for the run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from trainstack.layout import DATASETS_PREFIX, team_folder
from trainstack.polling import poll_until
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


def upload_sample_data(stack: LocalStack, name: str = "sample") -> None:
    """The sample token shards as the dataset `name` of each of the stack's teams (`datasets/<team>/<name>/`):
    a team's jobs read only its own folder, so each team gets its own copy (the default job reads the
    default team's, `datasets/default/sample/`)."""
    s3 = boto3.client("s3", region_name=REGION)
    for team in stack.context.teams:
        for shard in sorted(SAMPLE_TOKENS.glob("*.bin")):
            s3.upload_file(str(shard), stack.trigger_bucket, f"{team_folder(DATASETS_PREFIX, team)}{name}/{shard.name}")


def executions(stack: LocalStack) -> list[dict[str, Any]]:
    return boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=stack.state_machine_arn)[
        "executions"
    ]


def wait_for_execution(execution_arn: str, timeout: float = 600) -> dict[str, Any]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return poll_until(
        lambda: sfn.describe_execution(executionArn=execution_arn),
        lambda description: description["status"] != "RUNNING",
        timeout=timeout,
        interval=0.5,
        what=f"the end of {execution_arn}",
    )


def finish(execution_arn: str, timeout: float = 600) -> Run:
    description = wait_for_execution(execution_arn, timeout)
    output = json.loads(description.get("output") or "{}")
    return Run(execution_arn, description["status"], output, description.get("cause", ""))


def training_jobs() -> list[dict[str, Any]]:
    return boto3.client("sagemaker", region_name=REGION).list_training_jobs(MaxResults=100)["TrainingJobSummaries"]
