"""Stopping a run's jobs in the team queue: found one way, ended by one rule. The Stop function (an
execution that ended early) and `trainstack stop` both call `stop_service_jobs`.

The run's service jobs are found by one ListServiceJobs listing by name, which spans every status:
a listing per status misses a job that Batch moves from one status to another between two of them
(RUNNING back to RUNNABLE after a capacity failure), which would then be dispatched for a stopped run
with nothing watching it. A job is the run's by its name (`Run.made`: this resume segment's) and is
ended only by the execution that submitted it (its `trainstack:execution` tag), so a late Stop of a
stopped run never ends the jobs of the run that resumed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainstack.identity import TAG_EXECUTION, Run
from trainstack.service_jobs import ACTIVE
from trainstack_contract.job_names import training_job_name_prefix

TERMINATED = "terminated"
HAD_ENDED = "had ended"  # between the listing and the terminate call (its own end, another stop)
NOT_ITS_OWN = "not its own"  # another execution of the lineage submitted it


@dataclass(frozen=True)
class ServiceJobStop:
    """What stopping did to one of the run's active service jobs: `job` is DescribeServiceJob before it."""

    job: dict[str, Any]
    outcome: str  # TERMINATED, HAD_ENDED or NOT_ITS_OWN
    submitted_by: str


def run_service_jobs(batch: Any, queue_arn: str, run: Run, name_prefix: str) -> list[dict[str, Any]]:
    """The summaries of the run's service jobs in the queue, in every status, newest first."""
    pages = batch.get_paginator("list_service_jobs").paginate(
        jobQueue=queue_arn, filters=[{"name": "JOB_NAME", "values": [f"{training_job_name_prefix(name_prefix)}*"]}]
    )
    return [job for page in pages for job in page["jobSummaryList"] if run.made(job["jobName"], name_prefix)]


def stop_service_jobs(
    batch: Any, queue_arn: str, run: Run, name_prefix: str, execution: str, reason: str
) -> list[ServiceJobStop]:
    """Terminate each of the run's service jobs that has not ended and that `execution` submitted; a
    job without the tag was submitted before jobs carried it, and is taken as `execution`'s."""
    stops = []
    for summary in run_service_jobs(batch, queue_arn, run, name_prefix):
        if summary["status"] not in ACTIVE:
            continue
        job = batch.describe_service_job(jobId=summary["jobId"])
        submitted_by = (job.get("tags") or {}).get(TAG_EXECUTION) or execution
        if submitted_by != execution:
            outcome = NOT_ITS_OWN
        else:
            outcome = TERMINATED if _terminate(batch, job["jobId"], reason) else HAD_ENDED
        stops.append(ServiceJobStop(job, outcome, submitted_by))
    return stops


def _terminate(batch: Any, job_id: str, reason: str) -> bool:
    """TerminateServiceJob; False where Batch refused because the job had ended meanwhile. A refusal of
    a job still active is raised: it would otherwise run on for a stopped run."""
    from botocore.exceptions import ClientError  # on the call: Validate's cold start needs no botocore

    try:
        batch.terminate_service_job(jobId=job_id, reason=reason)
    except ClientError:
        if batch.describe_service_job(jobId=job_id)["status"] in ACTIVE:
            raise
        return False
    return True
