"""The Batch twin's state (batch_twin.py): its service environments, job queues and service jobs with
their attempts, each answering as Batch's API describes it, held under one lock, and each status
change a job makes, announced in the order it happened."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainstack.service_jobs import CAPACITY_UNIT, RUNNABLE, SERVICE_JOB_TYPE
from trainstack_local.event_feed import EventFeed

EVENT_DETAIL_TYPE = "Batch Service Job State Change"
# How many preempted attempts DescribeServiceJob's preemptionSummary lists: Batch keeps "a sliding
# window of recent preemption attempts" and states no size (the twin's choice).
RECENT_PREEMPTIONS = 5

Publish = Callable[[dict[str, Any]], None]  # one PutEvents entry onto the default event bus
FairsharePolicy = Callable[[str], dict[str, Any] | None]  # a scheduling policy's fairsharePolicy by ARN; None: no such policy


@dataclass
class ServiceEnvironment:
    name: str
    arn: str
    max_instances: int
    state: str = "ENABLED"
    tags: dict[str, str] = field(default_factory=dict)

    def detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "serviceEnvironmentName": self.name,
            "serviceEnvironmentArn": self.arn,
            "serviceEnvironmentType": SERVICE_JOB_TYPE,
            "state": self.state,
            "status": "VALID",
            "capacityLimits": [{"maxCapacity": self.max_instances, "capacityUnit": CAPACITY_UNIT}],
        }
        return {**detail, "tags": dict(self.tags)} if self.tags else detail


@dataclass
class JobQueue:
    name: str
    arn: str
    priority: int
    environment_arn: str
    environment_order: int
    state: str = "ENABLED"
    policy_arn: str | None = None  # a fair-share scheduling policy; None: first in, first out
    time_limits: list[dict[str, Any]] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)

    def detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "jobQueueName": self.name,
            "jobQueueArn": self.arn,
            "state": self.state,
            "status": "VALID",
            "priority": self.priority,
            "computeEnvironmentOrder": [],
            "serviceEnvironmentOrder": [{"order": self.environment_order, "serviceEnvironment": self.environment_arn}],
            "jobQueueType": SERVICE_JOB_TYPE,
            "jobStateTimeLimitActions": [dict(action) for action in self.time_limits],
        }
        if self.policy_arn:
            detail["schedulingPolicyArn"] = self.policy_arn
        return {**detail, "tags": dict(self.tags)} if self.tags else detail

    def time_limit(self, reason: str | None) -> int | None:
        """maxTimeSeconds of the action for this blocked reason; None where none is set."""
        return next((a["maxTimeSeconds"] for a in self.time_limits if a["reason"] == reason), None)


@dataclass
class Attempt:
    """One dispatch: a training job, created (an ARN) once CreateTrainingJob has answered."""

    training_job_name: str
    scheduled_at: float
    training_job_arn: str = ""
    started_at: float | None = None
    stopped_at: float | None = None
    status_reason: str | None = None
    used_capacity: bool = True  # False when SageMaker had none, or refused the request
    counts: bool = True  # against retryStrategy.attempts: a capacity failure does not, nor a preemption
    preempted: bool = False

    def detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {"serviceResourceId": {"name": "TrainingJobArn", "value": self.training_job_arn}}
        for key, value in (("startedAt", self.started_at), ("stoppedAt", self.stopped_at)):
            if value is not None:
                detail[key] = ms(value)
        if self.status_reason:
            detail["statusReason"] = self.status_reason
        return detail

    def end(self, now: float, reason: str) -> None:
        self.stopped_at = now
        self.status_reason = reason


@dataclass
class ServiceJob:
    id: str
    name: str
    arn: str
    queue: JobQueue
    request: dict[str, Any]  # SubmitServiceJob's parameters, as given
    payload: dict[str, Any]
    instances: int
    sequence: int  # submission order, for jobs created in the same instant
    created_at: float
    status: str = "SUBMITTED"
    status_reason: str | None = None
    is_terminated: bool = False
    priority: int = 0
    scheduled_at: float | None = None
    started_at: float | None = None
    stopped_at: float | None = None
    attempts: list[Attempt] = field(default_factory=list)
    terminating: str | None = None  # TerminateServiceJob's reason while the training job stops
    preempting: str | None = None  # the preemption's reason while the training job stops
    blocked: str | None = None  # the time-limit reason while the job waits at the head
    blocked_since: float = 0.0
    retry_after: float = 0.0  # a capacity failure's wait before the next dispatch
    position: int | None = None  # in the dispatch order while RUNNABLE
    position_since: float = 0.0

    @property
    def share(self) -> str | None:
        return self.request.get("shareIdentifier")

    @property
    def latest(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def preempted(self) -> list[Attempt]:
        return [a for a in self.attempts if a.preempted]

    def preemption_retries_spent(self) -> bool:
        """Whether preemptionRetriesBeforeTermination are spent (unset: Batch requeues it for ever)."""
        retries = (self.request.get("preemptionConfiguration") or {}).get("preemptionRetriesBeforeTermination")
        return retries is not None and len(self.preempted) > retries

    def summary(self) -> dict[str, Any]:
        """ListServiceJobs' ServiceJobSummary."""
        summary: dict[str, Any] = {
            "capacityUsage": [{"capacityUnit": CAPACITY_UNIT, "quantity": float(self.instances)}],
            "createdAt": ms(self.created_at),
            "jobArn": self.arn,
            "jobId": self.id,
            "jobName": self.name,
            "serviceJobType": SERVICE_JOB_TYPE,
            "status": self.status,
            "isTerminated": self.is_terminated,
        }
        if self.latest is not None and self.latest.training_job_arn:
            summary["latestAttempt"] = {"serviceResourceId": self.latest.detail()["serviceResourceId"]}
        if self.share is not None:
            summary["shareIdentifier"] = self.share
        if self.status_reason:
            summary["statusReason"] = self.status_reason
        for key, value in (("scheduledAt", self.scheduled_at), ("startedAt", self.started_at), ("stoppedAt", self.stopped_at)):
            if value is not None:
                summary[key] = ms(value)
        return summary

    def detail(self) -> dict[str, Any]:
        """DescribeServiceJob's answer."""
        detail = self.summary()
        detail.update(
            attempts=[a.detail() for a in self.attempts if a.training_job_arn],
            jobQueue=self.queue.arn,
            schedulingPriority=self.priority,
            serviceRequestPayload=self.request["serviceRequestPayload"],
        )
        for key in ("retryStrategy", "preemptionConfiguration", "tags"):
            if key in self.request:
                detail[key] = self.request[key]
        if self.preempted:  # "appears on a service job when it has been preempted"
            recent = self.preempted[-RECENT_PREEMPTIONS:]
            detail["preemptionSummary"] = {
                "preemptedAttemptCount": len(self.preempted),
                "recentPreemptedAttempts": [a.detail() for a in recent],
            }
        return detail

    def event_detail(self) -> dict[str, Any]:
        """A state change event's detail: DescribeServiceJob's without the tags and the payload."""
        detail = self.detail()
        detail.pop("tags", None)
        detail.pop("serviceRequestPayload")
        return detail


class BatchState:
    """What the twin's Batch holds, read and changed under `lock`: by its API (batch_twin.py) and by
    its scheduler (batch_scheduler.py). Each status change is recorded as it is made, under the lock,
    and `announce` sends what was recorded, in order: an EventBridge event and a feed line each."""

    def __init__(self, feed: EventFeed | None) -> None:
        self.environments: dict[str, ServiceEnvironment] = {}
        self.queues: dict[str, JobQueue] = {}
        self.jobs: dict[str, ServiceJob] = {}
        self.lock = threading.Lock()
        self.feed = feed  # where `local serve` prints each job's submission and status changes
        self.publish: Publish = lambda _entry: None
        self.fairshare_policy: FairsharePolicy = lambda _arn: None
        self._announcing = threading.RLock()  # events leave in the order their changes happened
        self._pending: list[tuple[ServiceJob, dict[str, Any]]] = []

    def move(self, job: ServiceJob, status: str, reason: str | None) -> None:
        job.status, job.status_reason = status, reason
        if status != RUNNABLE:
            job.position = None
        self._pending.append((job, job.event_detail()))

    def finish(self, job: ServiceJob, status: str, reason: str | None, now: float, *, terminated: bool = False) -> None:
        job.stopped_at = now
        job.is_terminated = terminated
        job.blocked = None
        self.move(job, status, reason)

    def announce(self) -> None:
        """Send the changes made so far, in order: an EventBridge event and a feed line each."""
        with self._announcing:
            with self.lock:
                pending, self._pending = self._pending, []
            for job, detail in pending:
                self.publish(
                    {"Source": "aws.batch", "DetailType": EVENT_DETAIL_TYPE, "Detail": json.dumps(detail), "Resources": [job.arn]}
                )
                if self.feed is not None:
                    self.feed.service_job_status(job.name, detail["status"], detail.get("statusReason"))


def ms(seconds: float) -> int:
    """Batch's times: Unix time in milliseconds."""
    return int(seconds * 1000)


def instance_count(payload: dict[str, Any]) -> int:
    """What a job counts against the cap: its ResourceConfig's instances (of every instance group)."""
    config = payload.get("ResourceConfig")
    if not isinstance(config, dict):
        return 0
    groups = config.get("InstanceGroups")
    if isinstance(groups, list) and groups:
        return sum(int(g.get("InstanceCount", 0)) for g in groups if isinstance(g, dict))
    count = config.get("InstanceCount", 0)
    return count if isinstance(count, int) else 0
