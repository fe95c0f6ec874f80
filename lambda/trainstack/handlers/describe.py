"""Describe: the job's status and how long to wait before asking again; for a job that ended, the
attempt's record and whether to create the trial's job again (a capacity failure, or a failure that
is not the user's under the spec's `restarts`), after `retry_wait_seconds`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from trainstack.errors import THROTTLING, ThrottledError
from trainstack.handlers.environment import client, environment
from trainstack.restarts import CAPACITY_RETRY, RESTART, RestartPolicy, after_job, decided
from trainstack.workflow import CAPACITY_RETRIES, ENDED, capacity_wait_seconds, next_poll_seconds, restart_wait_seconds, summary


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    try:
        description = client("sagemaker").describe_training_job(TrainingJobName=event["job_name"])
    except ClientError as error:
        if error.response["Error"]["Code"] in THROTTLING:
            raise ThrottledError(f"{event['job_name']}: {error.response['Error'].get('Message', '')}") from None
        raise
    env = environment()
    result = summary(description)
    attempts = event.get("attempts", [])
    answer = {
        **result,
        "poll_seconds": next_poll_seconds(event.get("poll_seconds"), env.first_poll_seconds, env.max_poll_seconds),
        "retry": False,
        "restart": False,
        "attempts": attempts,
    }
    if result["status"] not in ENDED:
        return answer
    policy = RestartPolicy.from_spec_json(event["restarts"]) if "restarts" in event else RestartPolicy(0, (), (), 0)
    elapsed = (datetime.now(UTC) - _started(event)).total_seconds()
    answer.update(after_job(description, result, policy, attempts, elapsed, CAPACITY_RETRIES))
    if answer["restart"]:
        answer["retry_wait_seconds"] = restart_wait_seconds(decided(attempts, RESTART), env.first_poll_seconds)
    elif answer["retry"]:
        # 5, 10, 20 minutes; local mode scales it with its shortened poll interval
        answer["retry_wait_seconds"] = capacity_wait_seconds(decided(attempts, CAPACITY_RETRY), env.first_poll_seconds * 5)
    return answer


def _started(event: dict[str, Any]) -> datetime:
    """When the run started (`$$.Execution.StartTime`, ISO 8601 in UTC); now, for an event without it."""
    if "run_started" not in event:
        return datetime.now(UTC)
    started = datetime.fromisoformat(event["run_started"])
    return started if started.tzinfo else started.replace(tzinfo=UTC)
