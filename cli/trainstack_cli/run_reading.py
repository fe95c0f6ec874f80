"""`trainstack runs` and `trainstack status`: runs read back from the stack, and watched to their end
(`submit --wait`, `local run`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from trainstack.budgets import TeamMonth, team_jobs_of_month, team_month
from trainstack.layout import TRAINING_JOB_LOG_GROUP
from trainstack.polling import poll_until
from trainstack.run_report import mlflow_ui_call
from trainstack.service_jobs import preempted_training_jobs
from trainstack.workflow import summary
from trainstack_cli.executions import describe_execution, execution_history, front_of_team_queue, trial_jobs
from trainstack_cli.logs import streams
from trainstack_cli.runs import Attempted, JobRecord, RunView, latest_metrics, run_account, run_view, team_of_run, trial_of
from trainstack_cli.stack import ControlPlaneUnavailableError, Stack, aws_errors
from trainstack_cli.team_queue import batch_time

METRIC_LOG_EVENTS = 2000  # the newest lines of a host's log that `status` scans for metrics


def read_run(stack: Stack, run: str, with_metrics: bool = True, with_mlflow_ui: bool = False) -> RunView:
    with aws_errors(f"stack {stack.name}"):
        execution = describe_execution(stack, run)
        history = execution_history(stack, execution)
        now = datetime.now(UTC)
        jobs = trial_jobs(stack, execution, history)
        front = front_of_team_queue(stack, jobs)
        trials, attempted = [], []
        for job in jobs:
            metrics = _job_metrics(stack, job.training) if with_metrics and job.training else {}
            trial = trial_of(job, now, front, metrics)
            if with_mlflow_ui and job.training:
                trial = replace(trial, mlflow_ui=mlflow_ui_link(stack, job.training))
            trials.append(trial)
            attempted += _attempted(stack, job, trial.trial, metrics)
        return run_view(execution, history, trials, now, run_account(attempted, now))


def _attempted(stack: Stack, job: JobRecord, trial: int, metrics: dict[str, float]) -> list[Attempted]:
    """The training jobs a job of the run trained as, for its goodput: a direct job's own; a queued
    job's, those Batch preempted first (described here) and then its latest, waiting from its
    submission to the queue."""

    def final(description: dict[str, Any]) -> dict[str, float]:
        return summary(description)["final_metrics"]

    if job.service is None:
        return [Attempted(trial, job.training, metrics or final(job.training))] if job.training else []
    submitted = batch_time(job.service.get("createdAt"))
    descriptions = [
        stack.client("sagemaker").describe_training_job(TrainingJobName=name)
        for name, _ in preempted_training_jobs(job.service)
        if name != job.training_job_name
    ]
    attempts = [Attempted(trial, description, final(description), submitted) for description in descriptions]
    if job.training:
        attempts.append(Attempted(trial, job.training, metrics or final(job.training), submitted))
    return attempts


def mlflow_ui_link(stack: Stack, description: dict[str, Any]) -> str:
    """A signed-in link to the MLflow UI of the job's tracking server, made with the caller's own
    permission; "" for an untracked job, and where it cannot be made (no permission, or an endpoint
    without the API, as the twin's moto): the run's reference still says where it is."""
    from botocore.exceptions import BotoCoreError, ClientError

    call = mlflow_ui_call(description)
    if call is None:
        return ""
    method, arguments = call
    try:
        return getattr(stack.client("sagemaker"), method)(**arguments)["AuthorizedUrl"]
    except (ClientError, BotoCoreError):
        return ""


def list_runs(stack: Stack, limit: int, team: str | None = None) -> list[RunView]:
    """The newest `limit` runs, of `team` only where one is given (runs.team_of_run)."""
    if team is None:
        with aws_errors(f"stack {stack.name}"):
            summaries = stack.client("stepfunctions").list_executions(stateMachineArn=stack.state_machine_arn, maxResults=limit)[
                "executions"
            ]
        names = [s["executionArn"] for s in sorted(summaries, key=lambda s: s["startDate"], reverse=True)]
    else:
        names = _team_runs(stack, team, limit)
    return [read_run(stack, name, with_metrics=False) for name in names]


def _team_runs(stack: Stack, team: str, limit: int) -> list[str]:
    """The newest `limit` executions of the team's runs (ListExecutions lists the newest first)."""
    found: list[str] = []
    with aws_errors(f"stack {stack.name}"):
        pages = stack.client("stepfunctions").get_paginator("list_executions").paginate(stateMachineArn=stack.state_machine_arn)
        for summary in (execution for page in pages for execution in page["executions"]):
            if team_of_run(describe_execution(stack, summary["executionArn"]), stack.context.default_team) == team:
                found.append(summary["executionArn"])
                if len(found) == limit:
                    break
    return found


def read_team_month(stack: Stack, team: str) -> TeamMonth:
    """What the team's jobs of this month (UTC) came to, read from SageMaker with the caller's credentials."""
    now = datetime.now(UTC)
    with aws_errors(f"team {team}'s jobs of the month"):
        return team_month(team, team_jobs_of_month(stack.client("sagemaker"), team, now), now)


def _job_metrics(stack: Stack, job: dict[str, Any]) -> dict[str, float]:
    definitions = job.get("AlgorithmSpecification", {}).get("MetricDefinitions") or []
    if not definitions:
        return {}
    found = streams(stack, job["TrainingJobName"], "algo-1")
    if not found:
        return {}
    events = stack.client("logs").get_log_events(
        logGroupName=TRAINING_JOB_LOG_GROUP, logStreamName=found[-1], startFromHead=False, limit=METRIC_LOG_EVENTS
    )["events"]
    return latest_metrics(definitions, (e["message"] for e in events))


def watch(stack: Stack, run: str, show: Callable[[RunView], None], interval: float = 2.0) -> RunView:
    """Read the run every `interval` seconds, show it, until the execution ends; a read that AWS fails
    on its side is asked again at the next interval."""

    def shown() -> RunView | None:
        try:
            view = read_run(stack, run)
        except ControlPlaneUnavailableError:  # AWS failing on its side says nothing of the run: ask again
            return None
        show(view)
        return view

    # No deadline: the run's own (its jobs' max_runtime, the state machine's) ends it.
    ended = poll_until(
        shown,
        lambda view: view is not None and view.status != "RUNNING",
        timeout=math.inf,
        interval=interval,
        what=f"the end of run {run}",
    )
    assert ended is not None
    return ended
