"""What the CLI shows of the team queue (AWS Batch service jobs for SageMaker Training), built from
what the Batch API answered (pure: no AWS calls here).

A job submitted to the queue is a service job named as trainstack names the training job; Batch
creates the training job itself once it dispatches the job. Where a RUNNABLE job stands is its place
in GetJobQueueSnapshot's front of the queue: the first 100 RUNNABLE jobs, in the order Batch will
dispatch them (share usage, then priority within a share, then submission time).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from trainstack.service_jobs import DISPATCHED, FRONT_OF_QUEUE_LENGTH, RUNNABLE

# Batch reports times as Unix milliseconds, but the user guide's samples show seconds: a value below
# this (the year 5138 in seconds, 1973 in milliseconds) is read as seconds.
MILLISECONDS_FROM = 10**11


@dataclass(frozen=True)
class ServiceJobView:
    """One job of the team queue as DescribeServiceJob describes it, and where it stands."""

    job_name: str  # trainstack's name for the job (the training job Batch creates is AWSBatch<name><32 hex>)
    service_job_id: str
    status: str  # Batch's: SUBMITTED, PENDING, RUNNABLE, SCHEDULED, STARTING, RUNNING, SUCCEEDED, FAILED
    share: str
    priority: int
    instance_type: str
    instances: int
    position: int | None  # 1-based, in the order of dispatch; None unless listed in the front of the queue
    beyond_front: bool  # RUNNABLE behind the first 100 jobs, which are all the snapshot lists
    submitted: str
    age_seconds: int
    reason: str  # Batch's statusReason: why it waits, or why it ended
    terminated: bool = False  # a termination request was accepted (the job then ends FAILED)

    @property
    def place(self) -> str:
        """The job's position as people read it: its number, "beyond the first 100", or "-"."""
        if self.position is not None:
            return str(self.position)
        return f"beyond the first {FRONT_OF_QUEUE_LENGTH}" if self.beyond_front else "-"


@dataclass(frozen=True)
class ShareView:
    share: str
    jobs: list[ServiceJobView] = field(default_factory=list)
    capacity_in_use: dict[str, float] = field(default_factory=dict)  # capacity unit -> quantity (snapshot's fair share)


@dataclass(frozen=True)
class QueueView:
    queue_arn: str
    max_instances: int  # the service environment's cap; 0 where the stack does not say
    capacity_in_use: dict[str, float]  # capacity unit -> quantity, over the whole queue
    active_shares: int  # shares using capacity, as the snapshot counts them
    snapshot_at: str
    shares: list[ShareView] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.queue_arn.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name}


def batch_time(value: float | None) -> datetime | None:
    if value is None:
        return None
    seconds = value / 1000 if value >= MILLISECONDS_FROM else value
    return datetime.fromtimestamp(seconds, UTC)


def front_of_queue(snapshot: Mapping[str, Any]) -> list[str]:
    """The ARNs of the RUNNABLE jobs GetJobQueueSnapshot lists, next to be dispatched first."""
    return [job["jobArn"] for job in (snapshot.get("frontOfQueue") or {}).get("jobs") or []]


def requested_resources(service_job: Mapping[str, Any]) -> tuple[str, int]:
    """The instance type and count the job asks for: its payload's ResourceConfig (the
    CreateTrainingJob request, which Batch passes on unchanged), else the capacity Batch counts."""
    payload = json.loads(service_job.get("serviceRequestPayload") or "{}")
    resource = payload.get("ResourceConfig") or {}
    counted = sum(u.get("quantity", 0) for u in service_job.get("capacityUsage") or [])
    return resource.get("InstanceType", ""), int(resource.get("InstanceCount") or counted)


def service_job_view(service_job: Mapping[str, Any], front: list[str], now: datetime) -> ServiceJobView:
    """One service job from DescribeServiceJob; `front`: the front of its queue's snapshot."""
    status = service_job["status"]
    arn = service_job.get("jobArn", "")
    position = front.index(arn) + 1 if status == RUNNABLE and arn in front else None
    submitted = batch_time(service_job.get("createdAt"))
    instance_type, instances = requested_resources(service_job)
    return ServiceJobView(
        job_name=service_job["jobName"],
        service_job_id=service_job["jobId"],
        status=status,
        share=service_job.get("shareIdentifier", ""),
        priority=int(service_job.get("schedulingPriority") or 0),
        instance_type=instance_type,
        instances=instances,
        position=position,
        beyond_front=status == RUNNABLE and position is None and len(front) >= FRONT_OF_QUEUE_LENGTH,
        submitted=submitted.isoformat(timespec="seconds") if submitted else "",
        age_seconds=max(0, int((now - submitted).total_seconds())) if submitted else 0,
        reason=service_job.get("statusReason", ""),
        terminated=bool(service_job.get("isTerminated")),
    )


def dispatch_order(job: ServiceJobView) -> tuple[int, int, int, str]:
    """Dispatched jobs first, then the RUNNABLE ones as Batch will dispatch them, then those not yet
    RUNNABLE; within each, higher priority, then the earlier submitted."""
    stage = 0 if job.status in DISPATCHED else 1 if job.status == RUNNABLE else 2
    return stage, job.position or FRONT_OF_QUEUE_LENGTH + 1, -job.priority, job.submitted


def capacity(usage: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Capacity unit -> quantity, summed (Batch lists usage per unit: NUM_INSTANCES or an instance type)."""
    total: dict[str, float] = {}
    for entry in usage:
        total[entry["capacityUnit"]] = total.get(entry["capacityUnit"], 0.0) + float(entry.get("quantity", 0))
    return total


def queue_view(
    queue_arn: str,
    shares: Iterable[str],
    max_instances: int,
    service_jobs: Iterable[Mapping[str, Any]],
    snapshot: Mapping[str, Any],
    now: datetime,
) -> QueueView:
    """The queue by share: every share the stack declares (in its order, empty ones too), then any
    other share a job names; each with its active jobs in dispatch order and the capacity it uses."""
    front = front_of_queue(snapshot)
    jobs = sorted((service_job_view(j, front, now) for j in service_jobs), key=dispatch_order)
    utilization = snapshot.get("queueUtilization") or {}
    fair_share = utilization.get("fairshareUtilization") or {}
    used = {u["shareIdentifier"]: capacity(u.get("capacityUsage") or []) for u in fair_share.get("topCapacityUtilization") or []}
    names = list(dict.fromkeys([*shares, *(job.share for job in jobs)]))
    updated = batch_time(utilization.get("lastUpdatedAt"))
    return QueueView(
        queue_arn=queue_arn,
        max_instances=max_instances,
        capacity_in_use=capacity(utilization.get("totalCapacityUsage") or []),
        active_shares=int(fair_share.get("activeShareCount") or 0),
        snapshot_at=updated.isoformat(timespec="seconds") if updated else "",
        shares=[ShareView(name, [j for j in jobs if j.share == name], used.get(name, {})) for name in names],
    )
