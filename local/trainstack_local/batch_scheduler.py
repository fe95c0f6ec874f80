"""The Batch twin's scheduler (batch_twin.py states what it emulates): a thread that, once a tick or
when woken, follows each dispatched job's training job in the SageMaker twin, and dispatches each job
queue's RUNNABLE jobs in their order while the service environment's instances allow, acting on the
queue's time limits for a head that cannot go."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import boto3
from botocore.exceptions import ClientError, ParamValidationError

from trainstack.polling import poll_until
from trainstack.service_jobs import BATCH_TRAINING_JOB_PREFIX, DISPATCHED, INSUFFICIENT_CAPACITY, OVER_ENVIRONMENT_CAP, RUNNABLE
from trainstack_local.batch_state import Attempt, BatchState, JobQueue, ServiceJob
from trainstack_local.fair_share import fair_share_order
from trainstack_local.sagemaker_twin import SageMakerTwin

# Where a dispatched job stands while its training job is in one of these secondary statuses (RUNNING after).
DISPATCHED_BY_SECONDARY_STATUS = {"Starting": "SCHEDULED", "Pending": "SCHEDULED", "Downloading": "STARTING"}
# Why a RUNNABLE job at the head waits: the reason a time limit names, and the statusReason meanwhile.
BLOCKED_STATUS = {
    INSUFFICIENT_CAPACITY: f"{INSUFFICIENT_CAPACITY} - Unable to provision requested compute resources",
    OVER_ENVIRONMENT_CAP: f"{OVER_ENVIRONMENT_CAP} - Service environment(s) associated with the job queue cannot meet "
    "the capacity requirement of the job.",
}
TIME_LIMIT_TERMINATION = "Terminated by JobStateTimeLimit action due to reason: {reason}"
CAPACITY_ERROR = "CapacityError"  # how a training job's FailureReason starts when SageMaker had no capacity
PREEMPTED = "Preempted"  # how a preempted attempt's statusReason starts (Batch's wording is undocumented)
# How long a job that failed for capacity waits before Batch dispatches it again (undocumented).
CAPACITY_RETRY_SECONDS = 1.0

_log = logging.getLogger(__name__)


class BatchScheduler:
    """Moves the jobs of `state` (see the module's documentation); `start` runs it, `wake` has it look
    at once rather than at its next tick, `close` stops it."""

    def __init__(self, state: BatchState, sagemaker: SageMakerTwin, *, region: str, tick_seconds: float) -> None:
        self.state = state
        self.sagemaker = sagemaker
        self.region = region
        self.tick_seconds = tick_seconds
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._sagemaker_client: Any = None
        self._passes = 0  # scheduler passes run so far

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._schedule_loop, name="batch-twin", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

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

    def order(self, queue: JobQueue, now: float) -> list[ServiceJob]:
        """The queue's RUNNABLE jobs in the order they would be dispatched; records when each took its place."""
        jobs = [j for j in self.state.jobs.values() if j.queue is queue]
        runnable = [j for j in jobs if j.status == RUNNABLE]
        if queue.policy_arn is None:
            order = sorted(runnable, key=lambda j: (j.created_at, j.sequence))
        else:
            order = fair_share_order(self.state.fairshare_policy(queue.policy_arn) or {}, jobs, runnable, now)
        for index, job in enumerate(order):
            if job.position != index:
                job.position, job.position_since = index, now
        return order

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
        with self.state.lock:
            self._follow(now)
            for job in self.state.jobs.values():
                if job.status == "SUBMITTED":
                    self.state.move(job, RUNNABLE, None)
            dispatches = self._dispatchable(now)
        self.state.announce()
        for job, attempt in dispatches:
            if self._stopping.is_set():
                break
            self._dispatch(job, attempt)

    def _follow(self, now: float) -> None:
        """Move dispatched jobs as their training jobs go (the SageMaker twin's record of each)."""
        for job in self.state.jobs.values():
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
                attempt.end(now, "Received status from SageMaker: Training job completed")
                self.state.finish(job, "SUCCEEDED", attempt.status_reason, now)
            elif status in ("Failed", "Stopped"):
                self._ended(job, attempt, now, record.failure_reason if status == "Failed" else None)
            else:
                self._pass_through(job, DISPATCHED_BY_SECONDARY_STATUS.get(secondary, "RUNNING"))

    def _pass_through(self, job: ServiceJob, target: str) -> None:
        """Each dispatched state from the job's own up to `target`, one event each, as Batch reports
        them however briefly a job stays in one."""
        for status in DISPATCHED[DISPATCHED.index(job.status) + 1 : DISPATCHED.index(target) + 1]:
            job.blocked = None  # past SCHEDULED, SageMaker found the instances: no capacity wait any more
            self.state.move(job, status, None)

    def _ended(self, job: ServiceJob, attempt: Attempt, now: float, failure_reason: str | None) -> None:
        """A training job that failed or stopped: back to the queue, or the job's end."""
        if job.terminating is not None:
            attempt.end(now, job.terminating)
            self.state.finish(job, "FAILED", job.terminating, now, terminated=True)
        elif job.preempting is not None:
            self._preempted(job, attempt, now)
        elif failure_reason and failure_reason.startswith(CAPACITY_ERROR):
            attempt.end(now, f"Received status from SageMaker: {failure_reason}")
            attempt.used_capacity = attempt.counts = False
            if job.blocked != INSUFFICIENT_CAPACITY:  # the time in SCHEDULED counts toward the limit
                job.blocked, job.blocked_since = INSUFFICIENT_CAPACITY, attempt.scheduled_at
            job.retry_after = now + CAPACITY_RETRY_SECONDS
            self.state.move(job, RUNNABLE, BLOCKED_STATUS[INSUFFICIENT_CAPACITY])
        else:
            reason = f"Received status from SageMaker: {failure_reason or 'Training job stopped'}"
            attempt.end(now, reason)
            self._retry_or_fail(job, reason, now)

    def _preempted(self, job: ServiceJob, attempt: Attempt, now: float) -> None:
        """Its training job stopped for a preemption: back to RUNNABLE, where the job resumes from its
        checkpoints when dispatched again (its payload's CheckpointConfig), without using one of its
        retryStrategy attempts; FAILED and terminated once its preemptionRetriesBeforeTermination are spent."""
        reason, job.preempting = f"{PREEMPTED}: {job.preempting}", None
        attempt.end(now, reason)
        attempt.preempted, attempt.counts = True, False
        if job.preemption_retries_spent():
            retries = job.request["preemptionConfiguration"]["preemptionRetriesBeforeTermination"]
            spent = f"{reason} (preemptionRetriesBeforeTermination {retries} spent)"
            self.state.finish(job, "FAILED", spent, now, terminated=True)
        else:
            self.state.move(job, RUNNABLE, reason)

    def _retry_or_fail(self, job: ServiceJob, reason: str, now: float) -> None:
        if _retries(job, reason):
            self.state.move(job, RUNNABLE, reason)
        else:
            self.state.finish(job, "FAILED", reason, now)

    def _dispatchable(self, now: float) -> list[tuple[ServiceJob, Attempt]]:
        """The jobs to dispatch now, each marked SCHEDULED with its attempt; time limits act on the
        heads they find blocked. Each queue is served in its order: a head that cannot go holds the rest."""
        dispatches = []
        for environment in self.state.environments.values():
            if environment.state != "ENABLED":
                continue
            queues = sorted(
                (q for q in self.state.queues.values() if q.environment_arn == environment.arn), key=lambda q: -q.priority
            )
            dispatched = [j for j in self.state.jobs.values() if j.status in DISPATCHED]
            used = sum(j.instances for j in dispatched if j.queue.environment_arn == environment.arn)
            for queue in queues:
                for job in self.order(queue, now):
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
            if self.state.feed is not None:
                self.state.feed.service_job_status(job.name, job.status, job.status_reason)

    def _time_limit_acted(self, job: ServiceJob, now: float) -> bool:
        """The queue's time limit for the head's blocked reason: terminate it once it has waited too long."""
        limit = job.queue.time_limit(job.blocked)
        if limit is None or now - job.blocked_since < limit * self.sagemaker.settings.queue_time_limit_scale:
            return False
        self.state.finish(job, "FAILED", TIME_LIMIT_TERMINATION.format(reason=job.blocked), now, terminated=True)
        return True

    def _scheduled(self, job: ServiceJob, now: float) -> Attempt:
        attempt = Attempt(f"{BATCH_TRAINING_JOB_PREFIX}{job.name}{uuid.uuid4().hex}", scheduled_at=now)
        job.attempts.append(attempt)
        job.scheduled_at = now
        job.retry_after = 0.0
        if job.blocked != INSUFFICIENT_CAPACITY:  # a capacity wait goes on counting while SageMaker tries
            job.blocked = None
        self.state.move(job, "SCHEDULED", None)
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
            with self.state.lock:
                attempt.training_job_arn = arn
                stop = job.terminating is not None or job.preempting is not None
            if stop:
                self.sagemaker.stop(attempt.training_job_name)

    def _refused(self, job: ServiceJob, attempt: Attempt, reason: str) -> None:
        now = time.time()
        with self.state.lock:
            attempt.end(now, reason)
            attempt.used_capacity = False
            job.preempting = None  # no training job ran: none to preempt
            if job.terminating is not None:
                self.state.finish(job, "FAILED", job.terminating, now, terminated=True)
            else:
                self._retry_or_fail(job, reason, now)
        self.state.announce()

    def _sagemaker(self) -> Any:
        if self._sagemaker_client is None:
            self._sagemaker_client = boto3.client("sagemaker", region_name=self.region)
        return self._sagemaker_client


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
