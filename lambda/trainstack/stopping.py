"""Stopping a run's jobs in the team queue: found one way, ended by one rule. The Stop function (an
execution that ended early) and `trainstack stop` both find them with `active_service_jobs`, end
only those `submitted_by` the execution, and `terminate` each.

The run's service jobs are found by one ListServiceJobs listing by name, which spans every status:
a listing per status misses a job that Batch moves from one status to another between two of them
(RUNNING back to RUNNABLE after a capacity failure), which would then be dispatched for a stopped run
with nothing watching it. A job is the run's by its name (`Run.made`: this resume segment's) and is
ended only by the execution that submitted it (its `trainstack:execution` tag), so a late Stop of a
stopped run never ends the jobs of the run that resumed it.
"""

from __future__ import annotations

from typing import Any

from trainstack.errors import is_control_plane_error
from trainstack.identity import TAG_EXECUTION, Run
from trainstack.service_jobs import ACTIVE
from trainstack_contract.job_names import training_job_name_prefix


def active_service_jobs(batch: Any, queue_arn: str, run: Run, name_prefix: str) -> list[dict[str, Any]]:
    """DescribeServiceJob of each of the run's service jobs in the queue that had not ended when listed."""
    pages = batch.get_paginator("list_service_jobs").paginate(
        jobQueue=queue_arn, filters=[{"name": "JOB_NAME", "values": [f"{training_job_name_prefix(name_prefix)}*"]}]
    )
    listed = [job for page in pages for job in page["jobSummaryList"] if run.made(job["jobName"], name_prefix)]
    return [batch.describe_service_job(jobId=job["jobId"]) for job in listed if job["status"] in ACTIVE]


def submitted_by(service_job: dict[str, Any], execution: str) -> str:
    """The execution that submitted the job (its tag); one without the tag was submitted before jobs
    carried it, and is taken as `execution`'s."""
    return (service_job.get("tags") or {}).get(TAG_EXECUTION) or execution


def terminate(batch: Any, job_id: str, reason: str) -> bool:
    """TerminateServiceJob; False where Batch refused because the job had ended meanwhile (its own end,
    or another stop). A refusal of a job still active is raised: it would run on for a stopped run; so
    is a failure on AWS's side (`is_control_plane_error`), which says nothing of the job: ask again."""
    from botocore.exceptions import ClientError  # on the call: Validate's cold start needs no botocore

    try:
        batch.terminate_service_job(jobId=job_id, reason=reason)
    except ClientError as error:
        if is_control_plane_error(error) or batch.describe_service_job(jobId=job_id)["status"] in ACTIVE:
            raise
        return False
    return True
