"""Stop: when an execution is stopped, fails or times out, stop the training jobs it started.

Only its own: the jobs of this execution's resume segment (`Run.made`) that this execution created
(their `trainstack:execution` tag). So a late or redriven Stop of a stopped run never stops the jobs
of the execution that resumed it, and a duplicate execution of a redelivered trigger, which found
the original's jobs already made, never stops them when it ends. A job without the tag was created
before jobs carried it: it is stopped as before rather than left running unwatched. With a team
queue, the run's service jobs are terminated by the same rule."""

from __future__ import annotations

import json
from typing import Any

from trainstack.handlers.environment import client, environment
from trainstack.identity import TAG_EXECUTION, Run
from trainstack.stopping import active_service_jobs, submitted_by, terminate
from trainstack.workflow import trigger_of


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    detail = event["detail"]
    trigger = trigger_of(json.loads(detail["input"]), detail["name"], environment().default_spec_key)
    sagemaker = client("sagemaker")
    run = Run(trigger.lineage, trigger.resume)
    stopped = []
    pages = sagemaker.get_paginator("list_training_jobs").paginate(NameContains=run.digest, StatusEquals="InProgress")
    for page in pages:
        for job in page["TrainingJobSummaries"]:
            name = job["TrainingJobName"]
            if not run.made(name, environment().stack.name_prefix):
                continue
            creator = _creator(sagemaker, job["TrainingJobArn"]) or detail["name"]
            ended = f"{detail['name']} {detail.get('status', 'ended')}"
            if creator == detail["name"]:
                sagemaker.stop_training_job(TrainingJobName=name)
                stopped.append(name)
                print(f"{ended}: stopped {name}")
            else:
                print(f"{ended}: left {name} running, created by execution {creator}")
    if environment().stack.job_queue_arn:
        stopped += _terminate_service_jobs(run, detail)
    return {"execution": detail.get("executionArn", ""), "stopped": stopped}


def _terminate_service_jobs(run: Run, detail: dict[str, Any]) -> list[str]:
    """The run's service jobs in the team queue, by the same rule (trainstack/stopping.py): terminating
    a queued one ends it before any training job is created; a dispatched one, Batch stops its training
    job (whose AWSBatch name the pass above does not read as this run's)."""
    stack = environment().stack
    batch = client("batch")
    ended = f"{detail['name']} {detail.get('status', 'ended')}"
    terminated = []
    for job in active_service_jobs(batch, stack.job_queue_arn, run, stack.name_prefix):
        name, status, creator = job["jobName"], job["status"], submitted_by(job, detail["name"])
        if creator != detail["name"]:
            print(f"{ended}: left {name} {status} in the queue, submitted by execution {creator}")
        elif terminate(batch, job["jobId"], ended):
            terminated.append(name)
            print(f"{ended}: terminated {name} ({status} in the queue)")
        else:
            print(f"{ended}: {name} had ended")
    return terminated


def _creator(sagemaker: Any, job_arn: str) -> str | None:
    """The execution that created the job, from its tag (None on a job made before jobs carried it)."""
    tags = {tag["Key"]: tag["Value"] for tag in sagemaker.list_tags(ResourceArn=job_arn).get("Tags", [])}
    return tags.get(TAG_EXECUTION)
