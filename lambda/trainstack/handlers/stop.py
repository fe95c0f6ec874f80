"""Stop: when an execution is stopped or times out, stop the training jobs it started.

Only its own: the jobs of this execution's resume segment (`Run.made`), so that a late or redriven
Stop of a stopped run never stops the jobs of the execution that resumed it, and the reverse."""

from __future__ import annotations

import json
from typing import Any

from trainstack.handlers.environment import client, environment
from trainstack.identity import Run
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
            if run.made(job["TrainingJobName"], environment().stack.name_prefix):
                sagemaker.stop_training_job(TrainingJobName=job["TrainingJobName"])
                stopped.append(job["TrainingJobName"])
    return {"execution": detail.get("executionArn", ""), "stopped": stopped}
