"""`trainstack stop`: end a run, its training jobs and its jobs in the team queue, and wait for them
to end."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from trainstack.polling import poll_until
from trainstack.service_jobs import ACTIVE
from trainstack.stopping import active_service_jobs, submitted_by, terminate
from trainstack_cli.executions import describe_execution, execution_history, front_of_team_queue, trial_jobs
from trainstack_cli.run_reading import read_run
from trainstack_cli.runs import STILL_GOING, StopView, TrialView, run_identity
from trainstack_cli.stack import Stack, aws_errors
from trainstack_cli.team_queue import service_job_view


def stop(stack: Stack, run: str, wait_seconds: float = 120) -> StopView:
    """Stop the execution, every job of the run still training (SageMaker uploads their checkpoints
    as they stop) and every job it submitted to the team queue that has not ended (Batch stops the
    training job of one it dispatched, and never dispatches one still queued), found and ended as
    the stack's Stop function ends them (trainstack/stopping.py); return the run once no job is
    queued or training any more, with the queued jobs terminated."""
    from botocore.exceptions import ClientError

    with aws_errors(f"stack {stack.name}"):
        execution = describe_execution(stack, run)
        # Read before stopping the execution: its Stop rule may terminate the queued jobs at once, and
        # what the run had queued, and where, is what this stop reports.
        jobs = trial_jobs(stack, execution, execution_history(stack, execution))
        front = front_of_team_queue(stack, jobs)
        queued = _own_service_jobs(stack, execution)
        if execution["status"] == "RUNNING":
            stack.client("stepfunctions").stop_execution(
                executionArn=execution["executionArn"], error="trainstack.Stopped", cause="stopped with `trainstack stop`"
            )
        sagemaker = stack.client("sagemaker")
        for job in jobs:
            if job.service is None and job.training and job.training["TrainingJobStatus"] == "InProgress":
                try:
                    sagemaker.stop_training_job(TrainingJobName=job.training_job_name)
                except ClientError as error:  # the stack's Stop rule got there first
                    if error.response["Error"]["Code"] != "ValidationException":
                        raise
        for service in queued:  # ended by this stop, or a moment earlier by the Stop rule it set off
            terminate(stack.client("batch"), service["jobId"], f"trainstack stop: run {execution['name']}")
        now = datetime.now(UTC)
        terminated = [service_job_view(service, front, now) for service in queued]
        # Past the deadline the run is returned as it stands, never an error: the stop itself is done.
        deadline = time.monotonic() + wait_seconds
        view = poll_until(
            lambda: read_run(stack, run, with_metrics=False),
            lambda view: all(_ended(t) for t in view.trials) or time.monotonic() > deadline,
            timeout=math.inf,
            interval=1,
            what=f"the end of run {run}'s jobs",
        )
        return StopView(view, terminated)


def _own_service_jobs(stack: Stack, execution: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's service jobs in the team queue that had not ended and that this execution submitted."""
    context = stack.context
    if not context.job_queue_arn:
        return []
    found = active_service_jobs(stack.client("batch"), context.job_queue_arn, run_identity(execution), context.name_prefix)
    return [job for job in found if submitted_by(job, execution["name"]) == execution["name"]]


def _ended(trial: TrialView) -> bool:
    """Nothing of the trial trains or waits: its training job has ended and so has its service job,
    which Batch moves on from RUNNING only at its next look at the training job it dispatched."""
    return trial.status not in STILL_GOING and (trial.queue is None or trial.queue.status not in ACTIVE)
