"""Stop: when an execution is stopped, fails or times out, stop the training jobs it started.

Only its own: the jobs of this execution's resume segment (`Run.made`) that this execution created
(their `trainstack:execution` tag). So a late or redriven Stop of a stopped run never stops the jobs
of the execution that resumed it, and a duplicate execution of a redelivered trigger, which found
the original's jobs already made, never stops them when it ends. A job without the tag was created
before jobs carried it: it is stopped as before rather than left running unwatched. With a team
queue, the run's service jobs are terminated by the same rule.

EventBridge invokes Stop asynchronously: a call that fails on AWS's side would otherwise end the
invocation with the run's jobs still billed until Lambda's own retries, a minute or more apart, or
its dead-letter queue. So each call is asked again inside the invocation (environment.asked_again),
a job whose calls still fail does not keep Stop from the others, and what is left undone fails the
invocation at the end, for Lambda to deliver the event again (every step is idempotent: a stopped job
is no longer in progress, a terminated one no longer active)."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from trainstack.errors import ControlPlaneError
from trainstack.handlers.environment import asked_again, client, environment
from trainstack.identity import TAG_EXECUTION, Run
from trainstack.stopping import active_service_jobs, submitted_by, terminate
from trainstack.workflow import trigger_of


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    detail = event["detail"]
    trigger = trigger_of(json.loads(detail["input"]), detail["name"], environment().default_spec_key)
    sagemaker = client("sagemaker")
    run = Run(trigger.lineage, trigger.resume)
    ended = f"{detail['name']} {detail.get('status', 'ended')}"
    stopped: list[str] = []
    left: list[str] = []  # what AWS kept failing: the invocation fails, and Lambda delivers the event again

    def in_progress() -> list[dict[str, Any]]:
        pages = sagemaker.get_paginator("list_training_jobs").paginate(NameContains=run.digest, StatusEquals="InProgress")
        return [job for page in pages for job in page["TrainingJobSummaries"]]

    for job in asked_again("ListTrainingJobs", in_progress):
        name = job["TrainingJobName"]
        if not run.made(name, environment().stack.name_prefix):
            continue
        try:
            creator = asked_again(f"ListTags {name}", partial(_creator, sagemaker, job["TrainingJobArn"])) or detail["name"]
            if creator != detail["name"]:
                print(f"{ended}: left {name} running, created by execution {creator}")
                continue
            asked_again(f"StopTrainingJob {name}", partial(sagemaker.stop_training_job, TrainingJobName=name))
        except ControlPlaneError as error:
            left.append(str(error))
            continue
        stopped.append(name)
        print(f"{ended}: stopped {name}")
    if environment().stack.job_queue_arn:
        stopped += _terminate_service_jobs(run, detail, left)
    if left:
        raise ControlPlaneError(f"{ended}: not every job could be stopped yet ({'; '.join(left)}); stopped {stopped}")
    return {"execution": detail.get("executionArn", ""), "stopped": stopped}


def _terminate_service_jobs(run: Run, detail: dict[str, Any], left: list[str]) -> list[str]:
    """The run's service jobs in the team queue, by the same rule (trainstack/stopping.py): terminating
    a queued one ends it before any training job is created; a dispatched one, Batch stops its training
    job (whose AWSBatch name the pass above does not read as this run's). What AWS kept failing goes
    to `left`."""
    stack = environment().stack
    batch = client("batch")
    ended = f"{detail['name']} {detail.get('status', 'ended')}"
    terminated: list[str] = []
    listed = asked_again("ListServiceJobs", lambda: active_service_jobs(batch, stack.job_queue_arn, run, stack.name_prefix))
    for job in listed:
        name, status, creator = job["jobName"], job["status"], submitted_by(job, detail["name"])
        if creator != detail["name"]:
            print(f"{ended}: left {name} {status} in the queue, submitted by execution {creator}")
            continue
        try:
            done = asked_again(f"TerminateServiceJob {name}", partial(terminate, batch, job["jobId"], ended))
        except ControlPlaneError as error:
            left.append(str(error))
            continue
        if done:
            terminated.append(name)
            print(f"{ended}: terminated {name} ({status} in the queue)")
        else:
            print(f"{ended}: {name} had ended")
    return terminated


def _creator(sagemaker: Any, job_arn: str) -> str | None:
    """The execution that created the job, from its tag (None on a job made before jobs carried it)."""
    tags = {tag["Key"]: tag["Value"] for tag in sagemaker.list_tags(ResourceArn=job_arn).get("Tags", [])}
    return tags.get(TAG_EXECUTION)
