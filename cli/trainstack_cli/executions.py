"""What every command that names a run reads of it: its Step Functions execution, the execution's
history, and the jobs it created (the AWS calls; runs.py makes them into what the commands answer)."""

from __future__ import annotations

from typing import Any

from trainstack.service_jobs import QUEUED, RUNNABLE, training_job_name
from trainstack_cli.runs import JobRecord, run_identity, service_job_ids
from trainstack_cli.stack import EXIT_UNKNOWN_RUN, CliError, Stack
from trainstack_cli.team_queue import front_of_queue


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
