"""Describe: the job's status, how long to wait before asking again, and whether a failure was
for capacity (the state machine then creates the job again after `retry_wait_seconds`)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from trainstack.errors import THROTTLING, ThrottledError
from trainstack.handlers.environment import client, environment
from trainstack.workflow import capacity_wait_seconds, is_capacity_failure, next_poll_seconds, summary


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    try:
        description = client("sagemaker").describe_training_job(TrainingJobName=event["job_name"])
    except ClientError as error:
        if error.response["Error"]["Code"] in THROTTLING:
            raise ThrottledError(f"{event['job_name']}: {error.response['Error'].get('Message', '')}") from None
        raise
    env = environment()
    result = summary(description)
    return {
        **result,
        "poll_seconds": next_poll_seconds(event.get("poll_seconds"), env.first_poll_seconds, env.max_poll_seconds),
        "capacity_failure": is_capacity_failure(result["status"], result["failure_reason"]),
        # 5, 10, 20 minutes; local mode scales it with its shortened poll interval
        "retry_wait_seconds": capacity_wait_seconds(event.get("attempt", 0), env.first_poll_seconds * 5),
    }
