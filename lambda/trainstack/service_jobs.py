"""AWS Batch service jobs for SageMaker Training, as data: the team queue's statuses, the request
that submits a training job to it, and how the training job Batch creates is named.

Pure functions, imported by Create, Describe and Stop, the CLI and the tests (AWS Batch user guide,
"Service jobs"; the botocore Batch model). Batch passes `serviceRequestPayload` through to
CreateTrainingJob unchanged, so the payload is the request trainstack builds for a direct job.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Batch creates the training job as AWSBatch<jobName><32 hex of the attempt>, and its service-linked
# role may act only on training jobs so named (AWSBatchServiceRolePolicyForSageMaker).
from trainstack_contract.job_names import BATCH_TRAINING_JOB_PREFIX

# The role Batch creates those jobs with: its service-linked role for SageMaker Training, which Batch
# creates with the account's first service environment and which trusts this service principal (AWS
# Batch user guide, "Using roles for AWS Batch with SageMaker AI").
SERVICE_LINKED_ROLE = "AWSServiceRoleForAWSBatchWithSagemaker"
SERVICE_LINKED_ROLE_SERVICE = "sagemaker-queuing.batch.amazonaws.com"

SERVICE_JOB_TYPE = "SAGEMAKER_TRAINING"
# Ready, waiting for its turn and the instances: the jobs GetJobQueueSnapshot lists are these.
RUNNABLE = "RUNNABLE"
# Statuses with no training job yet (the SageMaker SDK's `_no_training_job_status` agrees).
QUEUED = ("SUBMITTED", "PENDING", RUNNABLE)
# Dispatched to SageMaker: the training job exists (InProgress, its secondary status Pending,
# Downloading, then Training or Uploading).
DISPATCHED = ("SCHEDULED", "STARTING", "RUNNING")
ACTIVE = QUEUED + DISPATCHED
# A terminated job ends FAILED with `isTerminated`; Batch has no status of its own for it.
FINAL = ("SUCCEEDED", "FAILED")
PRIORITY_MIN, PRIORITY_MAX = 0, 9999  # SubmitServiceJob's schedulingPriority
CLIENT_TOKEN_MAX = 64
# A service environment's cap counted in instances, whatever their type (an instance type as the
# unit means quota management, which trainstack does not use).
CAPACITY_UNIT = "NUM_INSTANCES"
# How long a job queue's RUNNABLE time limit may be (CreateJobQueue's maxTimeSeconds).
TIME_LIMIT_SECONDS = (600, 86400)
FRONT_OF_QUEUE_LENGTH = 100  # how many RUNNABLE jobs GetJobQueueSnapshot lists
# A fair-share identifier as a job names it (CreateSchedulingPolicy's ShareAttributes; a policy's
# entry may end in "*" to cover a prefix, a job's may not).
SHARE_IDENTIFIER_MAX = 255
SHARE_IDENTIFIER = re.compile(rf"^[A-Za-z0-9]{{1,{SHARE_IDENTIFIER_MAX}}}$")
# The reasons a job queue's RUNNABLE time limit may name (CreateJobQueue's jobStateTimeLimitActions).
INSUFFICIENT_CAPACITY = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
OVER_ENVIRONMENT_CAP = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
TIME_LIMIT_REASONS = (INSUFFICIENT_CAPACITY, OVER_ENVIRONMENT_CAP)


def batch_training_job_prefix(name_prefix: str) -> str:
    """Every training job Batch creates for this stack starts with this; IAM policies are scoped to it."""
    return f"{BATCH_TRAINING_JOB_PREFIX}{name_prefix}-"


def submit_arguments(request: dict[str, Any], queue_arn: str, share: str, priority: int) -> dict[str, Any]:
    """SubmitServiceJob's arguments for a CreateTrainingJob request: the request itself is the payload,
    byte for byte (Tags included: unlike the SageMaker SDK, nothing is moved out of it), the Batch job
    is named and tagged as the training job, and the name is the client token (deterministic from the
    run identity and attempt, at most 63 characters), so a redelivered Create submits nothing new."""
    name = request["TrainingJobName"]
    return {
        "jobName": name,
        "jobQueue": queue_arn,
        "serviceJobType": SERVICE_JOB_TYPE,
        "serviceRequestPayload": json.dumps(request),
        "shareIdentifier": share,
        "schedulingPriority": priority,
        "clientToken": name[:CLIENT_TOKEN_MAX],
        "tags": {tag["Key"]: tag["Value"] for tag in request.get("Tags", [])},
    }


def training_job_name(service_job: dict[str, Any]) -> str:
    """The training job of the service job's latest attempt; "" while none was created."""
    return _training_job((service_job.get("latestAttempt") or {}).get("serviceResourceId"))


def preempted_training_jobs(service_job: dict[str, Any]) -> list[tuple[str, str]]:
    """The training jobs of the attempts Batch preempted, oldest first, each with the attempt's
    statusReason: those DescribeServiceJob's `preemptionSummary` lists (a window of the most recent
    ones; `preemptedAttemptCount` counts them all)."""
    recent = (service_job.get("preemptionSummary") or {}).get("recentPreemptedAttempts") or []
    attempts = sorted(recent, key=lambda attempt: attempt.get("startedAt") or 0)
    found = [(_training_job(attempt.get("serviceResourceId")), attempt.get("statusReason", "")) for attempt in attempts]
    return [(name, reason) for name, reason in found if name]


def _training_job(resource: dict[str, Any] | None) -> str:
    arn = (resource or {}).get("value", "")
    return arn.split(":training-job/", 1)[1] if ":training-job/" in arn else ""


def ended_in_queue(service_job: dict[str, Any], training_status: str | None) -> bool:
    """Whether the service job ended without a training job of its own running to the end: terminated
    (`trainstack stop`, the queue's time limit) before any dispatch, or after Batch requeued it when
    its training job failed for capacity (that failed job is still its latest attempt). Its trial did
    not start, and Batch's statusReason says why."""
    if service_job["status"] not in FINAL:
        return False
    return training_status is None or (bool(service_job.get("isTerminated")) and training_status == "Failed")
