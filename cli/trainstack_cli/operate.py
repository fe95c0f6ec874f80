"""The commands that act on a stack: submit, runs, status, logs, stop, queue (the AWS calls; runs.py
and team_queue.py shape what they answer)."""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainstack import yaml12
from trainstack.layout import JOBS_PREFIX, SOURCES_PREFIX, TRAINING_JOB_LOG_GROUP
from trainstack.polling import poll_until
from trainstack.preflight import preflight
from trainstack.rules import SpecRejectedError
from trainstack.run_report import mlflow_ui_call
from trainstack.service_jobs import ACTIVE, QUEUED, training_job_name
from trainstack.source_archive import write_source_tarball
from trainstack.spec import SpecError, parse_spec, spec_data
from trainstack.stopping import active_service_jobs, submitted_by, terminate
from trainstack.workflow import RUNNING
from trainstack_cli.runs import (
    STILL_GOING,
    JobRecord,
    RunView,
    StopView,
    TrialView,
    latest_metrics,
    run_identity,
    run_view,
    service_job_ids,
    trial_index,
    trial_of,
)
from trainstack_cli.stack import EXIT_BAD_INPUT, EXIT_NO_STACK, EXIT_RUN_FAILED, EXIT_UNKNOWN_RUN, CliError, Stack, aws_errors
from trainstack_cli.team_queue import RUNNABLE, QueueView, front_of_queue, queue_view, service_job_view

EXECUTION_APPEARS_SECONDS = 60  # EventBridge starts a run seconds after the upload
METRIC_LOG_EVENTS = 2000  # the newest lines of a host's log that `status` scans for metrics


# -- submit ---------------------------------------------------------------------------------------
def submit(stack: Stack, spec_path: Path, source_dir: Path | None = None, inline: bool = False) -> str:
    """Validate the spec here, against the stack, upload the code it needs, start the run; return the run's name."""
    text, data = read_spec(spec_path)
    with tempfile.TemporaryDirectory(prefix="trainstack-source-") as scratch:
        archive = None
        if source_dir is not None:
            archive = _pack(source_dir, Path(scratch))
            digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
            data["source_dir"] = f"s3://{stack.context.artifacts_bucket}/{SOURCES_PREFIX}{digest}/sourcedir.tar.gz"
        _validate(data, spec_path, stack)
        with aws_errors(f"stack {stack.name}"):
            if archive is not None:
                bucket, _, key = data["source_dir"].removeprefix("s3://").partition("/")
                stack.client("s3").upload_file(str(archive), bucket, key)
            if inline:
                name = f"{data['name']}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
                stack.client("stepfunctions").start_execution(
                    stateMachineArn=stack.state_machine_arn, name=name, input=json.dumps({"spec": data})
                )
                return name
            key = f"{JOBS_PREFIX}{spec_path.name}"
            body = text if source_dir is None else yaml12.dump(data).encode()
            version = stack.client("s3").put_object(Bucket=stack.trigger_bucket, Key=key, Body=body).get("VersionId")
            return _execution_for_upload(stack, f"s3://{stack.trigger_bucket}/{key}#{version}")


def read_spec(path: Path) -> tuple[bytes, dict[str, Any]]:
    """The spec file's bytes and the fields they hold, or one line naming the file and the fix."""
    try:
        text = path.read_bytes()
    except OSError as error:
        raise CliError(
            f"{path}: cannot read it ({error.strerror}); give the path of a job spec (YAML or JSON)", EXIT_BAD_INPUT
        ) from None
    try:
        return text, spec_data(text, str(path))
    except SpecError as error:
        raise CliError(error.problems[0], EXIT_BAD_INPUT) from None


def _validate(data: dict[str, Any], path: Path, stack: Stack) -> None:
    """The Validate step's own checks, with the stack's values (its tracking server, its team queue),
    before anything is uploaded or billed."""
    try:
        preflight(parse_spec(data), None, stack.region, stack.context)
    except (SpecError, SpecRejectedError) as error:
        raise CliError("; ".join(f"{path}: {p}" for p in error.problems) + "; nothing was submitted", EXIT_BAD_INPUT) from None


def _pack(source_dir: Path, scratch: Path) -> Path:
    if not source_dir.is_dir():
        raise CliError(f"--source {source_dir}: not a directory; give the folder that holds the entry point", EXIT_BAD_INPUT)
    try:
        return write_source_tarball(source_dir, scratch / "sourcedir.tar.gz")
    except ValueError as error:
        raise CliError(f"--source {source_dir}: {error}", EXIT_BAD_INPUT) from None


def _execution_for_upload(stack: Stack, lineage: str) -> str:
    """The execution EventBridge started for this upload (its input names the key and version)."""
    sfn = stack.client("stepfunctions")
    seen: set[str] = set()

    def started() -> str | None:
        for summary in sfn.list_executions(stateMachineArn=stack.state_machine_arn, maxResults=50)["executions"]:
            if summary["executionArn"] not in seen:
                seen.add(summary["executionArn"])
                if run_identity(sfn.describe_execution(executionArn=summary["executionArn"])).lineage == lineage:
                    return summary["name"]
        return None

    try:
        return poll_until(started, timeout=EXECUTION_APPEARS_SECONDS, interval=0.5, what="a run of the upload")
    except TimeoutError:
        raise CliError(
            f"uploaded {lineage.partition('#')[0]}, but no run started within {EXECUTION_APPEARS_SECONDS} s; "
            "check the stack's JobSpecUploaded rule and the trigger dead-letter queue (trainstack redrive)",
            EXIT_RUN_FAILED,
        ) from None


def resume(stack: Stack, run: str) -> str:
    """Start a run that continues an ended run's lineage from its checkpoints; return its name.
    Only a run started with its spec inline has a lineage a start can name (the pipeline's contract:
    `{"spec": ..., "lineage": ..., "resume": true}`); an upload's lineage is its object version."""
    with aws_errors(f"stack {stack.name}"):
        execution = describe_execution(stack, run)
        if execution["status"] == "RUNNING":
            raise CliError(f"run {run} is still running; `trainstack stop {run}` first", EXIT_BAD_INPUT)
        started = json.loads(execution.get("input") or "{}")
        if "spec" not in started:
            raise CliError(
                f"run {run} was started by an upload, whose lineage a new start cannot name; submit with --inline "
                "to make a run resumable (its checkpoints stay in S3)",
                EXIT_BAD_INPUT,
            )
        lineage = started.get("lineage") or execution["name"]
        name = f"{lineage[:40]}-resume-{datetime.now(UTC):%Y%m%dT%H%M%S}"
        payload = {"spec": started["spec"], "lineage": lineage, "resume": True}
        stack.client("stepfunctions").start_execution(
            stateMachineArn=stack.state_machine_arn, name=name, input=json.dumps(payload)
        )
        return name


# -- reading runs ---------------------------------------------------------------------------------
def execution_arn(stack: Stack, run: str) -> str:
    if run.startswith("arn:"):
        return run
    return stack.state_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + run


def describe_execution(stack: Stack, run: str) -> dict[str, Any]:
    from botocore.exceptions import ClientError

    sfn = stack.client("stepfunctions")
    try:
        return sfn.describe_execution(executionArn=execution_arn(stack, run))
    except ClientError as error:
        if error.response["Error"]["Code"] in ("ExecutionDoesNotExist", "InvalidArn"):
            raise CliError(f"no run {run} in stack {stack.name}; `trainstack runs` lists them", EXIT_UNKNOWN_RUN) from None
        raise


def execution_history(stack: Stack, execution: dict[str, Any]) -> list[dict[str, Any]]:
    pages = stack.client("stepfunctions").get_paginator("get_execution_history").paginate(executionArn=execution["executionArn"])
    return [event for page in pages for event in page["events"]]


def trial_jobs(stack: Stack, execution: dict[str, Any], history: list[dict[str, Any]]) -> list[JobRecord]:
    """Every job the run created, oldest first: the training jobs Create made itself, found by the
    run's digest in their names, and the service jobs it submitted to the team queue, which the
    history names, each with the training job Batch made for its latest attempt (once dispatched)."""
    from botocore.exceptions import ClientError

    sagemaker = stack.client("sagemaker")
    run = run_identity(execution)
    names = [
        job["TrainingJobName"]
        for page in sagemaker.get_paginator("list_training_jobs").paginate(NameContains=run.digest)
        for job in page["TrainingJobSummaries"]
        if run.made(job["TrainingJobName"], stack.context.name_prefix)
    ]
    jobs = [JobRecord(sagemaker.describe_training_job(TrainingJobName=name)) for name in names]
    submitted = service_job_ids(history)
    batch = stack.client("batch") if submitted else None
    for service_job_id in submitted:
        service = batch.describe_service_job(jobId=service_job_id)
        dispatched_as = training_job_name(service) if service["status"] not in QUEUED else ""
        training = None
        if dispatched_as:
            try:
                training = sagemaker.describe_training_job(TrainingJobName=dispatched_as)
            except ClientError as error:  # dispatched a moment ago: SageMaker does not describe it yet
                if error.response["Error"]["Code"] != "ValidationException":
                    raise
        jobs.append(JobRecord(training, service))
    return sorted(jobs, key=lambda job: job.created)


def front_of_team_queue(stack: Stack, jobs: list[JobRecord]) -> list[str]:
    """The team queue's next RUNNABLE jobs, in dispatch order; asked only where a job of these waits there."""
    if not any(job.service and job.service["status"] == RUNNABLE for job in jobs):
        return []
    return front_of_queue(stack.client("batch").get_job_queue_snapshot(jobQueue=stack.context.job_queue_arn))


def read_run(stack: Stack, run: str, with_metrics: bool = True, with_mlflow_ui: bool = False) -> RunView:
    with aws_errors(f"stack {stack.name}"):
        execution = describe_execution(stack, run)
        history = execution_history(stack, execution)
        now = datetime.now(UTC)
        jobs = trial_jobs(stack, execution, history)
        front = front_of_team_queue(stack, jobs)
        trials = []
        for job in jobs:
            metrics = _job_metrics(stack, job.training) if with_metrics and job.training else {}
            trial = trial_of(job, now, front, metrics)
            if with_mlflow_ui and job.training:
                trial = replace(trial, mlflow_ui=mlflow_ui_link(stack, job.training))
            trials.append(trial)
        return run_view(execution, history, trials, now)


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


def list_runs(stack: Stack, limit: int) -> list[RunView]:
    with aws_errors(f"stack {stack.name}"):
        summaries = stack.client("stepfunctions").list_executions(stateMachineArn=stack.state_machine_arn, maxResults=limit)[
            "executions"
        ]
    return [
        read_run(stack, s["executionArn"], with_metrics=False)
        for s in sorted(summaries, key=lambda s: s["startDate"], reverse=True)
    ]


def _job_metrics(stack: Stack, job: dict[str, Any]) -> dict[str, float]:
    definitions = job.get("AlgorithmSpecification", {}).get("MetricDefinitions") or []
    if not definitions:
        return {}
    streams = _streams(stack, job["TrainingJobName"], "algo-1")
    if not streams:
        return {}
    events = stack.client("logs").get_log_events(
        logGroupName=TRAINING_JOB_LOG_GROUP, logStreamName=streams[-1], startFromHead=False, limit=METRIC_LOG_EVENTS
    )["events"]
    return latest_metrics(definitions, (e["message"] for e in events))


# -- logs -----------------------------------------------------------------------------------------
def _streams(stack: Stack, job_name: str, host: str | None = None) -> list[str]:
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


@dataclass(frozen=True)
class LogLine:
    stream: str
    message: str


def follow_logs(
    stack: Stack, run: str, trial: int | None, host: str | None, follow: bool, interval: float = 2.0
) -> Iterator[LogLine]:
    """Every line of the trial's (latest) job, per stream in order; with `follow`, until the job ends,
    first waiting for the run to create it (or for Batch to start it) while the run goes on."""
    with aws_errors(f"stack {stack.name}"):
        while True:
            execution = describe_execution(stack, run)
            try:
                job_name = _job_with_a_log(stack, run, execution, trial)
                break
            except CliError:
                if not follow or execution["status"] != "RUNNING":
                    raise
            time.sleep(interval)
        tokens: dict[str, str] = {}
        while True:
            for stream in _streams(stack, job_name, host):
                yield from _new_lines(stack, stream, tokens)
            if not follow:
                return
            status = stack.client("sagemaker").describe_training_job(TrainingJobName=job_name)["TrainingJobStatus"]
            if status not in RUNNING:
                for stream in _streams(stack, job_name, host):  # what was written before it ended
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


# -- stop and wait --------------------------------------------------------------------------------
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
        deadline = time.monotonic() + wait_seconds
        while True:
            view = read_run(stack, run, with_metrics=False)
            if all(_ended(t) for t in view.trials) or time.monotonic() > deadline:
                return StopView(view, terminated)
            time.sleep(1)


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


def watch(stack: Stack, run: str, show: Callable[[RunView], None], interval: float = 2.0) -> RunView:
    """Read the run every `interval` seconds, show it, until the execution ends."""
    while True:
        view = read_run(stack, run)
        show(view)
        if view.status != "RUNNING":
            return view
        time.sleep(interval)


# -- the team queue -------------------------------------------------------------------------------
def queue(stack: Stack) -> QueueView:
    """The team queue's active jobs by share, where each stands, and the capacity each share uses."""
    queue_arn = stack.context.job_queue_arn
    if not queue_arn:
        raise CliError(
            f"stack {stack.name} has no team queue; deploy it with `cdk deploy -c queue=true` "
            "(shares: -c queue_shares=research:1,prod:0.5) for specs with `queue:` to wait in one",
            EXIT_NO_STACK,
        )
    with aws_errors(f"stack {stack.name}"):
        batch = stack.client("batch")
        pages = batch.get_paginator("list_service_jobs")
        # Without a status ListServiceJobs lists only RUNNING jobs, so each active status is asked for;
        # a job that moved on between two pages is listed twice, and described once.
        listed = dict.fromkeys(
            summary["jobId"]
            for status in ACTIVE
            for page in pages.paginate(jobQueue=queue_arn, jobStatus=status)
            for summary in page["jobSummaryList"]
        )
        # Only DescribeServiceJob says a job's priority and the instances its request asks for.
        described = [batch.describe_service_job(jobId=job_id) for job_id in listed]
        snapshot = batch.get_job_queue_snapshot(jobQueue=queue_arn)
    context = stack.context
    active = [job for job in described if job["status"] in ACTIVE]  # not one that ended since it was listed
    return queue_view(queue_arn, context.queue_shares, context.queue_max_instances, active, snapshot, datetime.now(UTC))
