"""`trainstack logs`: a run's training job log from CloudWatch, stream by stream, followed while the
job runs."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trainstack.layout import TRAINING_JOB_LOG_GROUP
from trainstack.polling import poll_until
from trainstack.workflow import RUNNING
from trainstack_cli.executions import describe_execution, execution_history, front_of_team_queue, trial_jobs
from trainstack_cli.runs import trial_index
from trainstack_cli.stack import EXIT_UNKNOWN_RUN, CliError, Stack, aws_errors
from trainstack_cli.team_queue import service_job_view


@dataclass(frozen=True)
class LogLine:
    stream: str
    message: str


def streams(stack: Stack, job_name: str, host: str | None = None) -> list[str]:
    """The job's log streams (`<job>/algo-N-<epoch>`), oldest start first; of one host if named."""
    from botocore.exceptions import ClientError

    logs = stack.client("logs")
    prefix = f"{job_name}/" + (f"{host}-" if host else "")
    try:
        pages = logs.get_paginator("describe_log_streams").paginate(
            logGroupName=TRAINING_JOB_LOG_GROUP, logStreamNamePrefix=prefix
        )
        names = [s["logStreamName"] for page in pages for s in page["logStreams"]]
    except ClientError as error:
        if error.response["Error"]["Code"] == "ResourceNotFoundException":  # no job has logged yet
            return []
        raise
    return sorted(names, key=lambda n: (int(n.rsplit("-", 1)[1]), n))


def follow_logs(
    stack: Stack, run: str, trial: int | None, host: str | None, follow: bool, interval: float = 2.0
) -> Iterator[LogLine]:
    """Every line of the trial's (latest) job, per stream in order; with `follow`, until the job ends,
    first waiting for the run to create it (or for Batch to start it) while the run goes on."""

    def job_with_a_log() -> str | None:
        execution = describe_execution(stack, run)
        try:
            return _job_with_a_log(stack, run, execution, trial)
        except CliError:
            if not follow or execution["status"] != "RUNNING":
                raise
        return None

    with aws_errors(f"stack {stack.name}"):
        # No deadline: a job waits in the team queue, or for its trial, as long as the run goes on.
        job_name = poll_until(job_with_a_log, timeout=math.inf, interval=interval, what=f"a job of run {run} with a log")
        tokens: dict[str, str] = {}
        # Not poll_until: each pass yields the lines it found as it finds them, which one call that
        # returns at the end could not.
        while True:
            for stream in streams(stack, job_name, host):
                yield from _new_lines(stack, stream, tokens)
            if not follow:
                return
            status = stack.client("sagemaker").describe_training_job(TrainingJobName=job_name)["TrainingJobStatus"]
            if status not in RUNNING:
                for stream in streams(stack, job_name, host):  # what was written before it ended
                    yield from _new_lines(stack, stream, tokens)
                return
            time.sleep(interval)


def _job_with_a_log(stack: Stack, run: str, execution: dict[str, Any], trial: int | None) -> str:
    """The training job whose log `logs` reads: the trial's latest; a CliError while there is none."""
    jobs = trial_jobs(stack, execution, execution_history(stack, execution))
    if trial is not None:
        jobs = [j for j in jobs if trial_index(j.job_name) == trial]
        if not jobs:
            raise CliError(f"run {run} has no trial {trial}; `trainstack status {run}` lists its trials", EXIT_UNKNOWN_RUN)
    if not jobs:
        raise CliError(f"run {run} has no training job yet; try again, or `trainstack status {run}`", EXIT_UNKNOWN_RUN)
    latest = jobs[-1]
    if not latest.training_job_name:  # a job in the team queue has no training job, so no log, until dispatched
        waiting = service_job_view(latest.service or {}, front_of_team_queue(stack, [latest]), datetime.now(UTC))
        raise CliError(
            f"run {run}: job {waiting.job_name} waits in the team queue ({waiting.status}, share {waiting.share}, "
            f"position {waiting.place}); it has no log until Batch starts it; try again, or `trainstack status {run}`",
            EXIT_UNKNOWN_RUN,
        )
    return latest.training_job_name


def _new_lines(stack: Stack, stream: str, tokens: dict[str, str]) -> Iterator[LogLine]:
    logs = stack.client("logs")
    while True:
        arguments = {"logGroupName": TRAINING_JOB_LOG_GROUP, "logStreamName": stream, "startFromHead": True}
        if stream in tokens:
            arguments["nextToken"] = tokens[stream]
        page = logs.get_log_events(**arguments)
        for event in page["events"]:
            yield LogLine(stream, event["message"])
        done = page["nextForwardToken"] == tokens.get(stream) or not page["events"]
        tokens[stream] = page["nextForwardToken"]
        if done:
            return
