"""Describe: the job's status, and how long to wait before asking again."""

from __future__ import annotations

from typing import Any

from trainstack.handlers.environment import client, environment
from trainstack.workflow import next_poll_seconds, summary


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    description = client("sagemaker").describe_training_job(TrainingJobName=event["job_name"])
    env = environment()
    return {
        **summary(description),
        "poll_seconds": next_poll_seconds(event.get("poll_seconds"), env.first_poll_seconds, env.max_poll_seconds),
    }
