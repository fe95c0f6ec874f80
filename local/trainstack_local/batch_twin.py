"""The emulated AWS Batch service jobs for SageMaker Training (moto 5.2.5 has none): service
environments, job queues of type SAGEMAKER_TRAINING and the service jobs submitted to them, with a
scheduler thread that creates each job's training job in the SageMaker twin when its turn comes.
bridges.py routes Batch's API to it; scheduling policies stay moto's.

What it does as Batch documents it (AWS Batch user guide, "Service jobs"; the botocore Batch model):

- statuses SUBMITTED -> RUNNABLE -> SCHEDULED -> STARTING -> RUNNING -> SUCCEEDED | FAILED; once
  dispatched the job follows its training job (InProgress/Starting: SCHEDULED, Downloading: STARTING,
  Training and later: RUNNING, Completed: SUCCEEDED, Failed or Stopped: FAILED);
- dispatch is CreateTrainingJob with the payload as given, renamed `AWSBatch<jobName><32 hex>` (a new
  name per attempt); a name past SageMaker's 63 characters is kept whole, as how Batch shortens it is
  undocumented;
- capacity: the instances of the jobs in SCHEDULED, STARTING and RUNNING (the payload's
  ResourceConfig.InstanceCount, or the sum of its InstanceGroups' counts) never exceed the service
  environment's NUM_INSTANCES maxCapacity;
- order: without a scheduling policy, first in first out; with a fair-share policy, the share whose
  usage x weightFactor is lowest goes next (a lower weight gets more), and within a share the highest
  schedulingPriority, then the oldest job;
- a training job that fails with a reason starting `CapacityError` puts the job back to RUNNABLE
  (`CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - ...`), without using one of its retryStrategy attempts;
  another failure is retried while attempts remain and evaluateOnExit says RETRY (no rule matching: retry);
- the queue's jobStateTimeLimitActions: the RUNNABLE job at the head of the queue, blocked for one of
  the reasons for longer than maxTimeSeconds x `TwinSettings.queue_time_limit_scale`, ends FAILED and
  terminated (`Terminated by JobStateTimeLimit action due to reason: <reason>`); for a capacity wait
  the clock runs from the first dispatch that failed for capacity, so time in SCHEDULED counts;
- TerminateServiceJob ends a queued job at once (no training job is ever created) and stops a
  dispatched one's training job through the twin, ending it FAILED and terminated once it has stopped;
- each status change after submission emits "Batch Service Job State Change" (source aws.batch,
  detail: DescribeServiceJob's without tags and serviceRequestPayload) and a line of the event feed.

Where Batch leaves it open or the twin simplifies (stated in the README too):

- fair-share usage counts instances, not time: a share's usage is the instances of its jobs now
  dispatched plus those of its jobs dispatched within the policy's shareDecaySeconds (600 when 0),
  so that the order is predictable and GetJobQueueSnapshot's projection of it exact (Batch weighs
  vCPU-seconds with a decay); computeReservation is not applied; a share the policy does not list
  weighs 1.0, a listed prefix (`team*`) covers the shares it starts;
- the head blocks: jobs are dispatched in order only, so the job at the head of the queue (one that
  waits for free instances, exceeds the cap, or waits out a capacity retry) holds back those behind
  it, as Batch's RUNNABLE time limits presume; nothing fills the gap with smaller jobs;
- a repeated SubmitServiceJob (the same clientToken and the same request) is refused with a
  ClientException naming the job it repeats; the same token with another request is a new job;
- a queue has one service environment; capacity is counted per environment, and queues sharing one
  are served in descending priority, each in its own order;
- not emulated: quota shares and preemption, timeoutConfig (refused), Service Job Queue Blocked
  events, TerminateServiceJobs, Delete/UpdateJobQueue and DeleteServiceEnvironment for these queues.
  DescribeServiceJob leaves out startedAt until the training job starts, though the model marks it required.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.session
from botocore.exceptions import ClientError, ParamValidationError
from botocore.validate import ParamValidator

from trainstack.polling import poll_until
from trainstack.service_jobs import (
    BATCH_TRAINING_JOB_PREFIX,
    CAPACITY_UNIT,
    CLIENT_TOKEN_MAX,
    DISPATCHED,
    FINAL,
    FRONT_OF_QUEUE_LENGTH,
    INSUFFICIENT_CAPACITY,
    OVER_ENVIRONMENT_CAP,
    PRIORITY_MAX,
    PRIORITY_MIN,
    QUEUED,
    SERVICE_JOB_TYPE,
    TIME_LIMIT_SECONDS,
)
from trainstack_local.sagemaker_twin import SageMakerTwin

STATUSES = (*QUEUED, *DISPATCHED, *FINAL)
# Where a dispatched job stands while its training job is in one of these secondary statuses (RUNNING after).
DISPATCHED_BY_SECONDARY_STATUS = {"Starting": "SCHEDULED", "Pending": "SCHEDULED", "Downloading": "STARTING"}
# Why a RUNNABLE job at the head waits: the reason a time limit names, and the statusReason meanwhile.
QUOTA_EXCEEDED = "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"
BLOCKED_STATUS = {
    INSUFFICIENT_CAPACITY: f"{INSUFFICIENT_CAPACITY} - Unable to provision requested compute resources",
    OVER_ENVIRONMENT_CAP: f"{OVER_ENVIRONMENT_CAP} - Service environment(s) associated with the job queue cannot meet "
    "the capacity requirement of the job.",
}
TIME_LIMIT_TERMINATION = "Terminated by JobStateTimeLimit action due to reason: {reason}"
CAPACITY_ERROR = "CapacityError"  # how a training job's FailureReason starts when SageMaker had no capacity
# How long a job that failed for capacity waits before Batch dispatches it again (undocumented).
CAPACITY_RETRY_SECONDS = 1.0
DEFAULT_SHARE_DECAY_SECONDS = 600  # shareDecaySeconds 0: "the default minimum time window"
EVENT_DETAIL_TYPE = "Batch Service Job State Change"
# Limits the model states in documentation only (botocore checks types, required keys and minimums).
NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
SHARE = re.compile(r"[A-Za-z0-9]{1,255}\*?")
PRIORITY_RANGE = (PRIORITY_MIN, PRIORITY_MAX)
QUEUE_PRIORITY_RANGE = (0, 1000)
ATTEMPTS_RANGE = (1, 10)
EVALUATE_ON_EXIT_MAX = 5
STATUS_REASON_PATTERN_MAX = 512
TAGS_MAX, TAG_KEY_MAX, TAG_VALUE_MAX = 50, 128, 256
LIST_RESULTS_MAX = 100
TOP_SHARES = 20
FILTERS = ("JOB_NAME", "BEFORE_CREATED_AT", "AFTER_CREATED_AT", "SHARE_IDENTIFIER", "QUOTA_SHARE_NAME")
# Batch's lowercase action (its URL path, /v1/<action>) -> the BatchTwin method that answers it.
OPERATIONS = {
    "createserviceenvironment": "create_service_environment",
    "updateserviceenvironment": "update_service_environment",
    "describeserviceenvironments": "describe_service_environments",
    "submitservicejob": "submit_service_job",
    "describeservicejob": "describe_service_job",
    "listservicejobs": "list_service_jobs",
    "updateservicejob": "update_service_job",
    "terminateservicejob": "terminate_service_job",
    "getjobqueuesnapshot": "get_job_queue_snapshot",
}

Publish = Callable[[dict[str, Any]], None]  # one PutEvents entry onto the default event bus
FairsharePolicy = Callable[[str], dict[str, Any] | None]  # a scheduling policy's fairsharePolicy by ARN; None: no such policy

_log = logging.getLogger(__name__)


class BatchClientError(ValueError):
    """What Batch answers as ClientException (HTTP 400): a request it refuses."""


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
    counts: bool = True  # against retryStrategy.attempts: a capacity failure does not

    def detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {"serviceResourceId": {"name": "TrainingJobArn", "value": self.training_job_arn}}
        for key, value in (("startedAt", self.started_at), ("stoppedAt", self.stopped_at)):
            if value is not None:
                detail[key] = _ms(value)
        if self.status_reason:
            detail["statusReason"] = self.status_reason
        return detail


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

    def summary(self) -> dict[str, Any]:
        """ListServiceJobs' ServiceJobSummary."""
        summary: dict[str, Any] = {
            "capacityUsage": [{"capacityUnit": CAPACITY_UNIT, "quantity": float(self.instances)}],
            "createdAt": _ms(self.created_at),
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
                summary[key] = _ms(value)
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
        return detail

    def event_detail(self) -> dict[str, Any]:
        """A state change event's detail: DescribeServiceJob's without the tags and the payload."""
        detail = self.detail()
        detail.pop("tags", None)
        detail.pop("serviceRequestPayload")
        return detail


class BatchTwin:
    """The emulated Batch service jobs (see the module's documentation). Build it with the SageMaker
    twin its jobs run in; `moto_bridges` starts it (`start`) and routes the API to the methods named
    in OPERATIONS plus create_job_queue and describe_job_queues; `close` stops the scheduler."""

    def __init__(self, sagemaker: SageMakerTwin, *, region: str, account: str, tick_seconds: float = 0.1) -> None:
        self.sagemaker = sagemaker
        self.region = region
        self.account = account
        self.tick_seconds = tick_seconds
        self.environments: dict[str, ServiceEnvironment] = {}
        self.queues: dict[str, JobQueue] = {}
        self.jobs: dict[str, ServiceJob] = {}
        self._tokens: dict[str, ServiceJob] = {}  # clientToken -> the job it submitted
        self._sequence = 0
        self._lock = threading.Lock()
        self._announcing = threading.RLock()  # events leave in the order their changes happened
        self._pending: list[tuple[ServiceJob, dict[str, Any]]] = []
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._publish: Publish = lambda _entry: None
        self._fairshare: FairsharePolicy = lambda _arn: None
        self._sagemaker_client: Any = None
        self._model = botocore.session.get_session().get_service_model("batch")
        self._passes = 0  # scheduler passes run so far

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, publish: Publish, fairshare_policy: FairsharePolicy) -> None:
        """Run the scheduler; events go to `publish`, and policies are read with `fairshare_policy`."""
        self._publish, self._fairshare = publish, fairshare_policy
        self._stopping.clear()
        self._thread = threading.Thread(target=self._schedule_loop, name="batch-twin", daemon=True)
        self._thread.start()

    def wait_for_passes(self, count: int, timeout: float = 60) -> None:
        """Until `count` more scheduler passes have run, any of which would have acted on what it found
        (how a test says that nothing happened without counting on how fast this machine is)."""
        wanted = self._passes + count
        poll_until(lambda: self._passes >= wanted, timeout=timeout, interval=self.tick_seconds, what=f"{count} scheduler passes")

    def close(self) -> None:
        """Stop dispatching (before the SageMaker twin stops its jobs, so that none starts after)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- service environments -----------------------------------------------------------------
    def create_service_environment(self, params: dict[str, Any]) -> dict[str, Any]:
        self._validate("CreateServiceEnvironment", params)
        name = params["serviceEnvironmentName"]
        _require(NAME.fullmatch(name), f"serviceEnvironmentName {name!r}: up to 128 letters, digits, hyphens and underscores")
        _require(params["serviceEnvironmentType"] == SERVICE_JOB_TYPE, f"serviceEnvironmentType must be {SERVICE_JOB_TYPE}")
        state = _state(params.get("state", "ENABLED"), "state")
        _check_tags(params.get("tags"))
        environment = ServiceEnvironment(
            name,
            f"arn:aws:batch:{self.region}:{self.account}:service-environment/{name}",
            _max_instances(params["capacityLimits"]),
            state,
            dict(params.get("tags") or {}),
        )
        with self._lock:
            _require(environment.arn not in self.environments, f"Service environment {name} already exists")
            self.environments[environment.arn] = environment
        return {"serviceEnvironmentName": name, "serviceEnvironmentArn": environment.arn}

    def update_service_environment(self, params: dict[str, Any]) -> dict[str, Any]:
        self._validate("UpdateServiceEnvironment", params)
        with self._lock:
            environment = self._environment(params["serviceEnvironment"])
            if "state" in params:
                environment.state = _state(params["state"], "state")
            if "capacityLimits" in params:
                environment.max_instances = _max_instances(params["capacityLimits"])
        self._wake.set()
        return {"serviceEnvironmentName": environment.name, "serviceEnvironmentArn": environment.arn}

    def describe_service_environments(self, params: dict[str, Any]) -> dict[str, Any]:
        self._validate("DescribeServiceEnvironments", params)
        wanted = set(params.get("serviceEnvironments") or [])
        with self._lock:
            found = [e for e in self.environments.values() if not wanted or {e.name, e.arn} & wanted]
            return {"serviceEnvironments": [e.detail() for e in found]}

    # -- job queues ---------------------------------------------------------------------------------
    def create_job_queue(self, params: dict[str, Any]) -> dict[str, Any]:
        """CreateJobQueue for jobQueueType SAGEMAKER_TRAINING (the bridge leaves the other types to moto)."""
        self._validate("CreateJobQueue", params)
        name = params["jobQueueName"]
        _require(NAME.fullmatch(name), f"jobQueueName {name!r}: up to 128 letters, digits, hyphens and underscores")
        _require_range(params["priority"], QUEUE_PRIORITY_RANGE, "priority")
        _require(not params.get("computeEnvironmentOrder"), "A SAGEMAKER_TRAINING job queue takes serviceEnvironmentOrder only")
        order = params.get("serviceEnvironmentOrder") or []
        _require(len(order) == 1, "serviceEnvironmentOrder: the twin emulates exactly one service environment per job queue")
        policy = params.get("schedulingPolicyArn")
        _require(policy is None or self._fairshare(policy) is not None, f"Scheduling policy {policy} does not exist")
        time_limits = [_time_limit(action) for action in params.get("jobStateTimeLimitActions") or []]
        _check_tags(params.get("tags"))
        arn = f"arn:aws:batch:{self.region}:{self.account}:job-queue/{name}"
        with self._lock:
            _require(arn not in self.queues, f"Job queue {name} already exists")
            environment = self._environment(order[0]["serviceEnvironment"])
            self.queues[arn] = JobQueue(
                name,
                arn,
                params["priority"],
                environment.arn,
                order[0]["order"],
                _state(params.get("state", "ENABLED"), "state"),
                policy,
                time_limits,
                dict(params.get("tags") or {}),
            )
        return {"jobQueueName": name, "jobQueueArn": arn}

    def describe_job_queues(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The twin's queues among DescribeJobQueues' `jobQueues` (all of them when none are named)."""
        wanted = set(params.get("jobQueues") or [])
        with self._lock:
            return [q.detail() for q in self.queues.values() if not wanted or {q.name, q.arn} & wanted]

    def get_job_queue_snapshot(self, params: dict[str, Any]) -> dict[str, Any]:
        self._validate("GetJobQueueSnapshot", params)
        now = time.time()
        with self._lock:
            queue = self._queue(params["jobQueue"])
            order = self._order(queue, now)[:FRONT_OF_QUEUE_LENGTH]
            in_use: dict[str | None, int] = {}
            for job in self.jobs.values():
                if job.queue is queue and job.status in DISPATCHED:
                    in_use[job.share] = in_use.get(job.share, 0) + job.instances
        utilization: dict[str, Any] = {
            "totalCapacityUsage": [{"capacityUnit": CAPACITY_UNIT, "quantity": float(sum(in_use.values()))}],
            "lastUpdatedAt": _ms(now),
        }
        if queue.policy_arn:
            top = sorted(((share, used) for share, used in in_use.items() if share is not None), key=lambda item: -item[1])
            utilization["fairshareUtilization"] = {
                "activeShareCount": len(top),
                "topCapacityUtilization": [
                    {"shareIdentifier": share, "capacityUsage": [{"capacityUnit": CAPACITY_UNIT, "quantity": float(used)}]}
                    for share, used in top[:TOP_SHARES]
                ],
            }
        jobs = [{"jobArn": job.arn, "earliestTimeAtPosition": _ms(job.position_since)} for job in order]
        return {"frontOfQueue": {"jobs": jobs, "lastUpdatedAt": _ms(now)}, "queueUtilization": utilization}

    # -- service jobs ---------------------------------------------------------------------------
    def submit_service_job(self, params: dict[str, Any]) -> dict[str, Any]:
        self._validate("SubmitServiceJob", params)
        self._check_submission(params)
        payload = json.loads(params["serviceRequestPayload"])
        now = time.time()
        with self._lock:
            queue = self._queue(params["jobQueue"])
            _require(queue.state == "ENABLED", f"Job queue {queue.name} is DISABLED and accepts no jobs")
            share = params.get("shareIdentifier")
            if queue.policy_arn:
                _require(share is not None, f"Job queue {queue.name} has a fair-share policy: shareIdentifier must be specified")
            else:
                _require(share is None, f"Job queue {queue.name} has no fair-share policy: don't specify shareIdentifier")
            token = params.get("clientToken")
            earlier = self._tokens.get(token) if token else None
            if earlier is not None and earlier.request == params:
                raise BatchClientError(
                    f"Request rejected: a request with clientToken {token!r} and an identical payload was already "
                    f"submitted as service job {earlier.id} ({earlier.name})"
                )
            self._sequence += 1
            job_id = str(uuid.uuid4())
            job = ServiceJob(
                id=job_id,
                name=params["jobName"],
                arn=f"arn:aws:batch:{self.region}:{self.account}:service-job/{job_id}",
                queue=queue,
                request=dict(params),
                payload=payload,
                instances=_instances(payload),
                sequence=self._sequence,
                created_at=now,
                priority=params.get("schedulingPriority", 0),
            )
            self.jobs[job_id] = job
            if token:
                self._tokens[token] = job
        if self.sagemaker.feed is not None:  # Batch sends no event for a submission; the feed says it
            self.sagemaker.feed.service_job_submitted(job.name, queue.name, share, job.priority)
        self._wake.set()
        return {"jobArn": job.arn, "jobName": job.name, "jobId": job.id}

    def describe_service_job(self, params: dict[str, Any]) -> dict[str, Any]:
        self._validate("DescribeServiceJob", params)
        with self._lock:
            return self._job(params["jobId"]).detail()

    def list_service_jobs(self, params: dict[str, Any]) -> dict[str, Any]:
        """ListServiceJobs of one queue (the twin requires jobQueue), newest first, paginated."""
        self._validate("ListServiceJobs", params)
        _require("jobQueue" in params, "jobQueue must be specified")
        status = params.get("jobStatus")
        _require(status is None or status in STATUSES, f"jobStatus must be one of {', '.join(STATUSES)}")
        size = params.get("maxResults", LIST_RESULTS_MAX)
        _require_range(size, (1, LIST_RESULTS_MAX), "maxResults")
        start = _offset(params.get("nextToken"))
        matches = _job_filter(params.get("filters") or [], status)
        with self._lock:
            queue = self._queue(params["jobQueue"])
            found = [j for j in self.jobs.values() if j.queue is queue and matches(j)]
            found.sort(key=lambda j: (j.created_at, j.sequence), reverse=True)
            page = [j.summary() for j in found[start : start + size]]
        answer: dict[str, Any] = {"jobSummaryList": page}
        if start + size < len(found):
            answer["nextToken"] = str(start + size)
        return answer

    def update_service_job(self, params: dict[str, Any]) -> dict[str, Any]:
        self._validate("UpdateServiceJob", params)
        _require_range(params["schedulingPriority"], PRIORITY_RANGE, "schedulingPriority")
        with self._lock:
            job = self._job(params["jobId"])
            job.priority = params["schedulingPriority"]
        self._wake.set()
        return {"jobArn": job.arn, "jobName": job.name, "jobId": job.id}

    def terminate_service_job(self, params: dict[str, Any]) -> dict[str, Any]:
        self._validate("TerminateServiceJob", params)
        stop = None
        with self._lock:
            job = self._job(params["jobId"])
            if job.status in QUEUED:  # no training job exists: it never will
                self._finish(job, "FAILED", params["reason"], time.time(), terminated=True)
            elif job.status in DISPATCHED and job.terminating is None:
                job.terminating = params["reason"]
                if job.latest is not None and job.latest.training_job_arn:  # else: once CreateTrainingJob answers
                    stop = job.latest.training_job_name
        self._announce()
        if stop is not None:
            self.sagemaker.stop(stop)  # as StopTrainingJob does; the job ends FAILED once it has stopped
        return {}

    # -- the scheduler -------------------------------------------------------------------------------
    def _schedule_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._schedule_pass()
            except Exception:  # a bug here must not end the scheduler: the queue would silently stall
                _log.exception("batch twin: scheduler pass failed")
            self._passes += 1
            self._wake.wait(self.tick_seconds)
            self._wake.clear()

    def _schedule_pass(self) -> None:
        now = time.time()
        with self._lock:
            self._follow(now)
            for job in self.jobs.values():
                if job.status == "SUBMITTED":
                    self._move(job, "RUNNABLE", None)
            dispatches = self._dispatchable(now)
        self._announce()
        for job, attempt in dispatches:
            if self._stopping.is_set():
                break
            self._dispatch(job, attempt)

    def _follow(self, now: float) -> None:
        """Move dispatched jobs as their training jobs go (the SageMaker twin's record of each)."""
        for job in self.jobs.values():
            attempt = job.latest
            if job.status not in DISPATCHED or attempt is None or not attempt.training_job_arn:
                continue
            run = self.sagemaker.runs.get(attempt.training_job_name)
            if run is None:
                continue
            record = run.job
            if record.training_start_time is not None and attempt.started_at is None:
                attempt.started_at = record.training_start_time.timestamp()
                job.started_at = job.started_at or attempt.started_at
            status, secondary = record.training_job_status, record.secondary_status
            if status in ("Completed", "Failed", "Stopped") and record.training_start_time is not None:
                self._pass_through(job, "RUNNING")  # a job that ended between two passes still ran
            if status == "Completed":
                self._end_attempt(attempt, now, "Received status from SageMaker: Training job completed")
                self._finish(job, "SUCCEEDED", attempt.status_reason, now)
            elif status in ("Failed", "Stopped"):
                self._ended(job, attempt, now, record.failure_reason if status == "Failed" else None)
            else:
                self._pass_through(job, DISPATCHED_BY_SECONDARY_STATUS.get(secondary, "RUNNING"))

    def _pass_through(self, job: ServiceJob, target: str) -> None:
        """Each dispatched state from the job's own up to `target`, one event each, as Batch reports
        them however briefly a job stays in one."""
        for status in DISPATCHED[DISPATCHED.index(job.status) + 1 : DISPATCHED.index(target) + 1]:
            job.blocked = None  # past SCHEDULED, SageMaker found the instances: no capacity wait any more
            self._move(job, status, None)

    def _ended(self, job: ServiceJob, attempt: Attempt, now: float, failure_reason: str | None) -> None:
        """A training job that failed or stopped: back to the queue, or the job's end."""
        if job.terminating is not None:
            self._end_attempt(attempt, now, job.terminating)
            self._finish(job, "FAILED", job.terminating, now, terminated=True)
        elif failure_reason and failure_reason.startswith(CAPACITY_ERROR):
            self._end_attempt(attempt, now, f"Received status from SageMaker: {failure_reason}")
            attempt.used_capacity = attempt.counts = False
            if job.blocked != INSUFFICIENT_CAPACITY:  # the time in SCHEDULED counts toward the limit
                job.blocked, job.blocked_since = INSUFFICIENT_CAPACITY, attempt.scheduled_at
            job.retry_after = now + CAPACITY_RETRY_SECONDS
            self._move(job, "RUNNABLE", BLOCKED_STATUS[INSUFFICIENT_CAPACITY])
        else:
            reason = f"Received status from SageMaker: {failure_reason or 'Training job stopped'}"
            self._end_attempt(attempt, now, reason)
            self._retry_or_fail(job, reason, now)

    def _retry_or_fail(self, job: ServiceJob, reason: str, now: float) -> None:
        if _retries(job, reason):
            self._move(job, "RUNNABLE", reason)
        else:
            self._finish(job, "FAILED", reason, now)

    def _dispatchable(self, now: float) -> list[tuple[ServiceJob, Attempt]]:
        """The jobs to dispatch now, each marked SCHEDULED with its attempt; time limits act on the
        heads they find blocked. Each queue is served in its order: a head that cannot go holds the rest."""
        dispatches = []
        for environment in self.environments.values():
            if environment.state != "ENABLED":
                continue
            queues = sorted((q for q in self.queues.values() if q.environment_arn == environment.arn), key=lambda q: -q.priority)
            dispatched = [j for j in self.jobs.values() if j.status in DISPATCHED]
            used = sum(j.instances for j in dispatched if j.queue.environment_arn == environment.arn)
            for queue in queues:
                for job in self._order(queue, now):
                    if job.instances <= environment.max_instances and job.retry_after <= now:
                        if used + job.instances > environment.max_instances:
                            break  # the head waits for instances to free up
                        used += job.instances
                        dispatches.append((job, self._scheduled(job, now)))
                        continue
                    if job.instances > environment.max_instances:
                        self._block(job, OVER_ENVIRONMENT_CAP, now)
                    # Blocked (over the cap, or waiting out a capacity failure, see _ended): the queue's
                    # time limit may end it, and the next job becomes the head.
                    if not self._time_limit_acted(job, now):
                        break
        return dispatches

    def _block(self, job: ServiceJob, reason: str, now: float) -> None:
        """The head cannot go for this reason: its statusReason says so, and its time limit's clock runs."""
        if job.blocked != reason:
            job.blocked, job.blocked_since = reason, now
            job.status_reason = BLOCKED_STATUS[reason]
            if self.sagemaker.feed is not None:
                self.sagemaker.feed.service_job_status(job.name, job.status, job.status_reason)

    def _time_limit_acted(self, job: ServiceJob, now: float) -> bool:
        """The queue's time limit for the head's blocked reason: terminate it once it has waited too long."""
        limit = job.queue.time_limit(job.blocked)
        if limit is None or now - job.blocked_since < limit * self.sagemaker.settings.queue_time_limit_scale:
            return False
        self._finish(job, "FAILED", TIME_LIMIT_TERMINATION.format(reason=job.blocked), now, terminated=True)
        return True

    def _scheduled(self, job: ServiceJob, now: float) -> Attempt:
        attempt = Attempt(f"{BATCH_TRAINING_JOB_PREFIX}{job.name}{uuid.uuid4().hex}", scheduled_at=now)
        job.attempts.append(attempt)
        job.scheduled_at = now
        job.retry_after = 0.0
        if job.blocked != INSUFFICIENT_CAPACITY:  # a capacity wait goes on counting while SageMaker tries
            job.blocked = None
        self._move(job, "SCHEDULED", None)
        return attempt

    def _dispatch(self, job: ServiceJob, attempt: Attempt) -> None:
        """CreateTrainingJob with the payload, in-process: the bridge's checks and the twin's start apply."""
        request = {**job.payload, "TrainingJobName": attempt.training_job_name}
        try:
            arn = self._sagemaker().create_training_job(**request)["TrainingJobArn"]
        except ClientError as error:  # refused: the reason as the SageMaker SDK quotes Batch's
            failure = f"Received status from SageMaker:{error.response['Error']['Code']}: {error.response['Error']['Message']}"
            self._refused(job, attempt, failure)
        except ParamValidationError as error:
            self._refused(job, attempt, f"Received status from SageMaker:ValidationException: {error}")
        else:
            with self._lock:
                attempt.training_job_arn = arn
                stop = job.terminating is not None
            if stop:
                self.sagemaker.stop(attempt.training_job_name)

    def _refused(self, job: ServiceJob, attempt: Attempt, reason: str) -> None:
        now = time.time()
        with self._lock:
            self._end_attempt(attempt, now, reason)
            attempt.used_capacity = False
            if job.terminating is not None:
                self._finish(job, "FAILED", job.terminating, now, terminated=True)
            else:
                self._retry_or_fail(job, reason, now)
        self._announce()

    def _sagemaker(self) -> Any:
        if self._sagemaker_client is None:
            self._sagemaker_client = boto3.client("sagemaker", region_name=self.region)
        return self._sagemaker_client

    # -- order ------------------------------------------------------------------------------------
    def _order(self, queue: JobQueue, now: float) -> list[ServiceJob]:
        """The queue's RUNNABLE jobs in the order they would be dispatched; records when each took its place."""
        runnable = [j for j in self.jobs.values() if j.queue is queue and j.status == "RUNNABLE"]
        if queue.policy_arn is None:
            order = sorted(runnable, key=lambda j: (j.created_at, j.sequence))
        else:
            order = self._fair_share_order(queue, runnable, now)
        for index, job in enumerate(order):
            if job.position != index:
                job.position, job.position_since = index, now
        return order

    def _fair_share_order(self, queue: JobQueue, runnable: list[ServiceJob], now: float) -> list[ServiceJob]:
        """Share by share, the lowest weighted usage first (ties: the share with the oldest next job);
        each job taken counts its instances to its share, as its dispatch will."""
        policy = self._fairshare(queue.policy_arn or "") or {}
        window = policy.get("shareDecaySeconds") or DEFAULT_SHARE_DECAY_SECONDS
        distribution = policy.get("shareDistribution") or []
        usage: dict[str, float] = {}
        for job in self.jobs.values():
            if job.queue is queue and job.share is not None:
                recent = [a for a in job.attempts if a.used_capacity and (a.stopped_at is None or a.scheduled_at >= now - window)]
                usage[job.share] = usage.get(job.share, 0.0) + job.instances * len(recent)
        waiting: dict[str, list[ServiceJob]] = {}
        for job in sorted(runnable, key=lambda j: (-j.priority, j.created_at, j.sequence)):
            waiting.setdefault(job.share or "", []).append(job)
        order = []
        while waiting:
            share = min(
                waiting,
                key=lambda s: (usage.get(s, 0.0) * _weight(distribution, s), waiting[s][0].created_at, waiting[s][0].sequence),
            )
            job = waiting[share].pop(0)
            if not waiting[share]:
                del waiting[share]
            order.append(job)
            usage[share] = usage.get(share, 0.0) + job.instances
        return order

    # -- status changes -------------------------------------------------------------------------
    def _move(self, job: ServiceJob, status: str, reason: str | None) -> None:
        job.status, job.status_reason = status, reason
        if status != "RUNNABLE":
            job.position = None
        self._pending.append((job, job.event_detail()))

    def _finish(self, job: ServiceJob, status: str, reason: str | None, now: float, *, terminated: bool = False) -> None:
        job.stopped_at = now
        job.is_terminated = terminated
        job.blocked = None
        self._move(job, status, reason)

    @staticmethod
    def _end_attempt(attempt: Attempt, now: float, reason: str) -> None:
        attempt.stopped_at = now
        attempt.status_reason = reason

    def _announce(self) -> None:
        """Send the changes made so far, in order: an EventBridge event and a feed line each."""
        with self._announcing:
            with self._lock:
                pending, self._pending = self._pending, []
            for job, detail in pending:
                self._publish(
                    {"Source": "aws.batch", "DetailType": EVENT_DETAIL_TYPE, "Detail": json.dumps(detail), "Resources": [job.arn]}
                )
                if self.sagemaker.feed is not None:
                    self.sagemaker.feed.service_job_status(job.name, detail["status"], detail.get("statusReason"))

    # -- lookups and checks ---------------------------------------------------------------------------
    def _validate(self, operation: str, params: dict[str, Any]) -> None:
        """botocore's own check of the request against the Batch model (types, required keys, minimums)."""
        report = ParamValidator().validate(params, self._model.operation_model(operation).input_shape)
        if report.has_errors():
            raise BatchClientError(report.generate_report())

    def _check_submission(self, params: dict[str, Any]) -> None:
        """What the model states in documentation only, and what the twin does not emulate."""
        name = params["jobName"]
        _require(NAME.fullmatch(name), f"jobName {name!r}: up to 128 letters, digits, hyphens and underscores")
        _require(params["serviceJobType"] == SERVICE_JOB_TYPE, f"serviceJobType must be {SERVICE_JOB_TYPE}")
        token = params.get("clientToken")
        _require(token is None or len(token) <= CLIENT_TOKEN_MAX, f"clientToken: at most {CLIENT_TOKEN_MAX} characters")
        if "schedulingPriority" in params:
            _require_range(params["schedulingPriority"], PRIORITY_RANGE, "schedulingPriority")
        share = params.get("shareIdentifier")
        _require(share is None or SHARE.fullmatch(share), f"shareIdentifier {share!r}: up to 255 letters and digits")
        _require("quotaShareName" not in params, "quotaShareName: the job queue has no quota-share scheduling policy")
        _require("timeoutConfig" not in params, "timeoutConfig is not emulated; the payload's StoppingCondition bounds the job")
        _check_retry_strategy(params.get("retryStrategy"))
        _check_tags(params.get("tags"))
        try:
            payload = json.loads(params["serviceRequestPayload"])
        except ValueError:
            payload = None
        _require(isinstance(payload, dict), "serviceRequestPayload must be a CreateTrainingJob request as a JSON object")

    def _environment(self, identifier: str) -> ServiceEnvironment:
        found = next((e for e in self.environments.values() if identifier in (e.name, e.arn)), None)
        _require(found is not None, f"Service environment {identifier} does not exist")
        assert found is not None
        return found

    def _queue(self, identifier: str) -> JobQueue:
        found = next((q for q in self.queues.values() if identifier in (q.name, q.arn)), None)
        _require(found is not None, f"Job queue {identifier} does not exist or is not of type {SERVICE_JOB_TYPE}")
        assert found is not None
        return found

    def _job(self, job_id: str) -> ServiceJob:
        _require(job_id in self.jobs, f"Service job {job_id} does not exist")
        return self.jobs[job_id]


def _ms(seconds: float) -> int:
    """Batch's times: Unix time in milliseconds."""
    return int(seconds * 1000)


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise BatchClientError(message)


def _require_range(value: int, bounds: tuple[int, int], name: str) -> None:
    _require(bounds[0] <= value <= bounds[1], f"{name} must be between {bounds[0]} and {bounds[1]}; got {value}")


def _state(value: str, name: str) -> str:
    _require(value in ("ENABLED", "DISABLED"), f"{name} must be ENABLED or DISABLED")
    return value


def _max_instances(limits: list[dict[str, Any]]) -> int:
    _require(len(limits) == 1, "capacityLimits: the twin emulates one limit, in NUM_INSTANCES")
    limit = limits[0]
    _require(
        limit.get("capacityUnit") == CAPACITY_UNIT,
        "capacityLimits: the twin emulates NUM_INSTANCES only (an instance type means quota management)",
    )
    _require(limit.get("maxCapacity", 0) >= 1, "capacityLimits: maxCapacity must be at least 1")
    return int(limit["maxCapacity"])


def _time_limit(action: dict[str, Any]) -> dict[str, Any]:
    _require(action["state"] == "RUNNABLE", "jobStateTimeLimitActions: state must be RUNNABLE")
    _require(action["action"] == "TERMINATE", "jobStateTimeLimitActions: a SAGEMAKER_TRAINING job queue supports TERMINATE only")
    _require_range(action["maxTimeSeconds"], TIME_LIMIT_SECONDS, "jobStateTimeLimitActions maxTimeSeconds")
    reasons = (INSUFFICIENT_CAPACITY, OVER_ENVIRONMENT_CAP, QUOTA_EXCEEDED)
    _require(action["reason"] in reasons, f"jobStateTimeLimitActions: reason must be one of {', '.join(reasons)}")
    return dict(action)


def _check_tags(tags: dict[str, str] | None) -> None:
    if not tags:
        return
    _require(len(tags) <= TAGS_MAX, f"tags: at most {TAGS_MAX}")
    for key, value in tags.items():
        fits = 1 <= len(key) <= TAG_KEY_MAX and len(value) <= TAG_VALUE_MAX
        _require(fits, f"tag {key!r}: a key of 1 to {TAG_KEY_MAX} characters, a value of up to {TAG_VALUE_MAX}")
        _require(not key.lower().startswith("aws:"), f"tag {key!r}: the aws: prefix is reserved")


def _check_retry_strategy(strategy: dict[str, Any] | None) -> None:
    if strategy is None:
        return
    _require_range(strategy["attempts"], ATTEMPTS_RANGE, "retryStrategy attempts")
    rules = strategy.get("evaluateOnExit") or []
    _require(len(rules) <= EVALUATE_ON_EXIT_MAX, f"retryStrategy evaluateOnExit: at most {EVALUATE_ON_EXIT_MAX} rules")
    for rule in rules:
        _require(rule.get("action") in ("RETRY", "EXIT"), "retryStrategy evaluateOnExit: action must be RETRY or EXIT")
        pattern = rule.get("onStatusReason", "*")
        _require(len(pattern) <= STATUS_REASON_PATTERN_MAX, f"onStatusReason: at most {STATUS_REASON_PATTERN_MAX} characters")


def _retries(job: ServiceJob, reason: str) -> bool:
    """retryStrategy: another attempt while attempts remain, unless the first evaluateOnExit rule whose
    onStatusReason matches (exactly, or as a prefix ending in `*`) says EXIT."""
    strategy = job.request.get("retryStrategy") or {"attempts": 1}
    if sum(a.counts for a in job.attempts) >= strategy["attempts"]:
        return False
    for rule in strategy.get("evaluateOnExit") or []:
        pattern = rule.get("onStatusReason", "*")
        if reason == pattern or (pattern.endswith("*") and reason.startswith(pattern[:-1])):
            return bool(rule["action"] == "RETRY")
    return True


def _instances(payload: dict[str, Any]) -> int:
    """What a job counts against the cap: its ResourceConfig's instances (of every instance group)."""
    config = payload.get("ResourceConfig")
    if not isinstance(config, dict):
        return 0
    groups = config.get("InstanceGroups")
    if isinstance(groups, list) and groups:
        return sum(int(g.get("InstanceCount", 0)) for g in groups if isinstance(g, dict))
    count = config.get("InstanceCount", 0)
    return count if isinstance(count, int) else 0


def _weight(distribution: list[dict[str, Any]], share: str) -> float:
    """The share's weightFactor: its own entry, else the longest prefix entry (`team*`) it starts with, else 1.0."""
    for entry in distribution:
        if entry["shareIdentifier"] == share:
            return float(entry.get("weightFactor", 1.0))
    prefixes = [e for e in distribution if e["shareIdentifier"].endswith("*") and share.startswith(e["shareIdentifier"][:-1])]
    if prefixes:
        return float(max(prefixes, key=lambda e: len(e["shareIdentifier"])).get("weightFactor", 1.0))
    return 1.0


def _offset(token: str | None) -> int:
    if token is None:
        return 0
    _require(token.isdigit(), "nextToken is not one ListServiceJobs returned")
    return int(token)


def _job_filter(filters: list[dict[str, Any]], status: str | None) -> Callable[[ServiceJob], bool]:
    """ListServiceJobs' selection: one filter at most; jobStatus (RUNNING when absent) applies without
    one, and with SHARE_IDENTIFIER where given."""
    _require(len(filters) <= 1, "Only one filter can be used at a time")
    if not filters:
        return lambda job: job.status == (status or "RUNNING")
    name, values = filters[0].get("name"), filters[0].get("values") or []
    _require(name in FILTERS, f"filter name must be one of {', '.join(FILTERS)}")
    _require(len(values) == 1, f"filter {name}: one value")
    value = values[0]
    if name == "JOB_NAME":
        wanted = value.lower()
        if wanted.endswith("*"):
            return lambda job: job.name.lower().startswith(wanted[:-1])
        return lambda job: job.name.lower() == wanted
    if name in ("BEFORE_CREATED_AT", "AFTER_CREATED_AT"):
        _require(value.isdigit(), f"filter {name}: milliseconds since the epoch")
        bound = int(value)
        if name == "BEFORE_CREATED_AT":
            return lambda job: _ms(job.created_at) <= bound
        return lambda job: _ms(job.created_at) >= bound
    if name == "SHARE_IDENTIFIER":
        return lambda job: job.share == value and (status is None or job.status == status)
    return lambda job: False  # QUOTA_SHARE_NAME: the twin has no quota shares
