"""Create: build the request and create the training job, idempotently; for a spec with `queue`,
submit the same request to the team queue as an AWS Batch service job instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from trainstack.errors import CapacityUnavailableError, is_control_plane_error
from trainstack.handlers.environment import client, control_plane_retried, environment
from trainstack.identity import Run
from trainstack.service_jobs import submit_arguments
from trainstack.workflow import next_poll_seconds

if TYPE_CHECKING:
    from trainstack.spec import JobSpec


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    # Imported on the call, not with the module: the spec model (pydantic), the rules and the
    # request builder are most of this package's import time (tools/bench_lambda.py); the module's
    # cold import leaves them to the first call.
    from trainstack.request import build_request, validate_request
    from trainstack.rules import Resolution, check_or_raise
    from trainstack.spec import parse_spec

    env = environment()
    stack = env.stack
    spec = parse_spec(event["spec"])
    # Validate resolved the spec and checked every rule; an execution started before the deploy that
    # added `resolution` to the payload is checked again here.
    resolution = Resolution.from_json(event["resolution"]) if "resolution" in event else check_or_raise(spec, stack=stack)
    trial = event["trial"]
    identity = Run(**event["run"]).trial(trial["index"] if event["trial_count"] > 1 else None)
    attempt = event.get("attempt", 0)  # > 0: re-created after a capacity failure, same checkpoints
    team = event.get("team") or stack.default_team  # Validate's (an execution started before teams has none)
    request = build_request(
        spec,
        resolution,
        stack,
        trial=identity,
        overrides=trial["hyperparameters"],
        attempt=attempt,
        execution=event.get("execution"),
        team=team,
    )
    validate_request(request)
    answer = {"poll_seconds": next_poll_seconds(None, env.first_poll_seconds, env.max_poll_seconds)}
    if spec.queue is not None:
        arguments = submit_arguments(request, stack.job_queue_arn, team, spec.queue.priority)  # the team's share
        return {**_submit(client("batch"), arguments), **answer}
    return {**_create(request, spec), "service_job_id": "", **answer}


def _create(request: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
    """CreateTrainingJob; a job of that name already made (a redelivered event, a redriven execution) is polled."""
    job_name = request["TrainingJobName"]
    created = True
    with control_plane_retried(f"CreateTrainingJob {job_name}"):
        try:
            client("sagemaker").create_training_job(**request)
        except ClientError as error:
            code, message = error.response["Error"]["Code"], error.response["Error"].get("Message", "")
            if code == "ResourceInUse" or "already exists" in message:
                created = False  # a redelivered event or a redriven execution: poll the job we made
            elif code == "ResourceLimitExceeded":
                raise CapacityUnavailableError(
                    f"{job_name}: {message} Request a quota increase for {spec.instance_count} x {spec.instance_type} "
                    "training (Service Quotas, SageMaker), or choose another instance type or region."
                ) from None
            else:
                raise
    return {"job_name": job_name, "created": created}


def _submit(batch: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """SubmitServiceJob to the team queue, once per job name: a job of that name already in the queue
    (a redelivered event, a redriven execution) is polled. The client token (the name) makes Batch
    refuse a second submission that races this lookup; the lookup after the refusal finds the first."""
    job_name = arguments["jobName"]
    with control_plane_retried(f"SubmitServiceJob {job_name}"):
        found = _queued_job(batch, arguments["jobQueue"], job_name)
        if found:
            return {"job_name": job_name, "service_job_id": found, "created": False}
        try:
            submitted = batch.submit_service_job(**arguments)
        except ClientError as error:
            if is_control_plane_error(error):
                raise
            found = _queued_job(batch, arguments["jobQueue"], job_name)
            if not found:
                raise
            return {"job_name": job_name, "service_job_id": found, "created": False}
    return {"job_name": job_name, "service_job_id": submitted["jobId"], "created": True}


def _queued_job(batch: Any, queue_arn: str, job_name: str) -> str:
    """The id of the queue's service job named `job_name`, or "". ListServiceJobs matches names
    without regard to case (and, with a trailing *, as a prefix): the exact name is picked out."""
    pages = batch.get_paginator("list_service_jobs").paginate(
        jobQueue=queue_arn, filters=[{"name": "JOB_NAME", "values": [job_name]}]
    )
    for page in pages:
        for job in page["jobSummaryList"]:
            if job["jobName"] == job_name:
                return job["jobId"]
    return ""
