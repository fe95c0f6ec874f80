"""The emulated AWS Batch service jobs for SageMaker Training (moto 5.2.5 has none): service
environments, job queues of type SAGEMAKER_TRAINING and the service jobs submitted to them, with a
scheduler thread that creates each job's training job in the SageMaker twin when its turn comes.
bridges.py routes Batch's API to it; scheduling policies stay moto's. BatchTwin answers the API over
its state (batch_state.py), checks each request as Batch does (batch_api_checks.py), and runs its
scheduler (batch_scheduler.py, with fair_share.py's order).

What it does as Batch documents it (AWS Batch user guide, "Service jobs"; the botocore Batch model):

- statuses SUBMITTED -> RUNNABLE -> SCHEDULED -> STARTING -> RUNNING -> SUCCEEDED | FAILED; once
  dispatched the job follows its training job (InProgress/Starting: SCHEDULED, Downloading: STARTING,
  Training and later: RUNNING, Completed: SUCCEEDED, Failed or Stopped: FAILED);
- the first service environment creates Batch's service-linked role for SageMaker
  (AWSServiceRoleForAWSBatchWithSagemaker) in the account's IAM where it is missing, as Batch does;
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
- a preemption (`preempt`: `trainstack local fault preempt`) stops a dispatched job's training job
  and puts the job back to RUNNABLE once it has stopped, without using one of its retryStrategy
  attempts; its next dispatch is a new training job with the same payload, so the same
  CheckpointConfig, and resumes from its checkpoints; DescribeServiceJob then has a preemptionSummary
  (preemptedAttemptCount, recentPreemptedAttempts); once preemptionRetriesBeforeTermination are
  spent (0: at the first preemption) the job ends FAILED and terminated; unset, it is requeued
  every time (Batch user guide, "Preemption"; ServiceJobPreemptionConfiguration);
- each status change after submission emits "Batch Service Job State Change" (source aws.batch,
  detail: DescribeServiceJob's without tags and serviceRequestPayload) and a line of the event feed.

Where Batch leaves it open or the twin simplifies (stated in docs/team-queue.md too):

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
- not emulated: quota management (quota-share scheduling policies, CreateQuotaShare, instance-type
  capacity limits, quotaShareName, refused) and so Batch's own choice of a job to preempt: Batch
  preempts only under quota management ("the only AWS Batch scheduling algorithm to incorporate
  preemption"), so the twin's scheduler, like a fair-share or FIFO queue, never preempts; a
  preemption is made on demand (`preempt`). The wording of a preempted attempt's statusReason
  ("Preempted: ...") and the size of recentPreemptedAttempts' window (5) are the twin's: Batch
  documents neither. timeoutConfig (refused), Service Job Queue Blocked events, TerminateServiceJobs,
  Delete/UpdateJobQueue and DeleteServiceEnvironment for these queues are not emulated either.
  DescribeServiceJob leaves out startedAt until the training job starts, though the model marks it required.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import boto3

from trainstack.service_jobs import (
    CAPACITY_UNIT,
    DISPATCHED,
    FINAL,
    FRONT_OF_QUEUE_LENGTH,
    QUEUED,
    SERVICE_JOB_TYPE,
    SERVICE_LINKED_ROLE,
    SERVICE_LINKED_ROLE_SERVICE,
)
from trainstack_local.batch_api_checks import (
    NAME,
    PRIORITY_RANGE,
    QUEUE_PRIORITY_RANGE,
    BatchClientError,
    check_against_model,
    check_submission,
    check_tags,
    enabled_or_disabled,
    job_filter,
    list_offset,
    max_instances,
    require,
    require_range,
    time_limit_action,
)
from trainstack_local.batch_scheduler import BatchScheduler
from trainstack_local.batch_state import (
    BatchState,
    FairsharePolicy,
    JobQueue,
    Publish,
    ServiceEnvironment,
    ServiceJob,
    instance_count,
    ms,
)
from trainstack_local.sagemaker_twin import SageMakerTwin

STATUSES = (*QUEUED, *DISPATCHED, *FINAL)
LIST_RESULTS_MAX = 100
TOP_SHARES = 20
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


class BatchTwin(BatchState):
    """The emulated Batch service jobs (see the module's documentation): the state its API reads and
    changes, and the scheduler that moves its jobs. Build it with the SageMaker twin its jobs run in;
    `moto_bridges` starts it (`start`) and routes the API to the methods named in OPERATIONS plus
    create_job_queue and describe_job_queues; `close` stops the scheduler."""

    def __init__(self, sagemaker: SageMakerTwin, *, region: str, account: str, tick_seconds: float = 0.1) -> None:
        super().__init__(sagemaker.feed)
        self.sagemaker = sagemaker
        self.region = region
        self.account = account
        self.scheduler = BatchScheduler(self, sagemaker, region=region, tick_seconds=tick_seconds)
        self._tokens: dict[str, ServiceJob] = {}  # clientToken -> the job it submitted
        self._sequence = 0

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, publish: Publish, fairshare_policy: FairsharePolicy) -> None:
        """Run the scheduler; events go to `publish`, and policies are read with `fairshare_policy`."""
        self.publish, self.fairshare_policy = publish, fairshare_policy
        self.scheduler.start()

    def wait_for_passes(self, count: int, timeout: float = 60) -> None:
        """Until `count` more scheduler passes have run (BatchScheduler.wait_for_passes)."""
        self.scheduler.wait_for_passes(count, timeout)

    def close(self) -> None:
        """Stop dispatching (before the SageMaker twin stops its jobs, so that none starts after)."""
        self.scheduler.close()

    # -- service environments -----------------------------------------------------------------
    def create_service_environment(self, params: dict[str, Any]) -> dict[str, Any]:
        check_against_model("CreateServiceEnvironment", params)
        name = params["serviceEnvironmentName"]
        require(NAME.fullmatch(name), f"serviceEnvironmentName {name!r}: up to 128 letters, digits, hyphens and underscores")
        require(params["serviceEnvironmentType"] == SERVICE_JOB_TYPE, f"serviceEnvironmentType must be {SERVICE_JOB_TYPE}")
        state = enabled_or_disabled(params.get("state", "ENABLED"), "state")
        check_tags(params.get("tags"))
        environment = ServiceEnvironment(
            name,
            f"arn:aws:batch:{self.region}:{self.account}:service-environment/{name}",
            max_instances(params["capacityLimits"]),
            state,
            dict(params.get("tags") or {}),
        )
        with self.lock:
            require(environment.arn not in self.environments, f"Service environment {name} already exists")
            self.environments[environment.arn] = environment
        self._create_service_linked_role()
        return {"serviceEnvironmentName": name, "serviceEnvironmentArn": environment.arn}

    def _create_service_linked_role(self) -> None:
        """The role Batch creates training jobs with, made as Batch makes it with a service environment
        where the account has none (bridges.py names it as IAM does)."""
        iam = boto3.client("iam", region_name=self.region)
        try:
            iam.get_role(RoleName=SERVICE_LINKED_ROLE)
        except iam.exceptions.NoSuchEntityException:
            iam.create_service_linked_role(AWSServiceName=SERVICE_LINKED_ROLE_SERVICE)

    def update_service_environment(self, params: dict[str, Any]) -> dict[str, Any]:
        check_against_model("UpdateServiceEnvironment", params)
        with self.lock:
            environment = self._environment(params["serviceEnvironment"])
            if "state" in params:
                environment.state = enabled_or_disabled(params["state"], "state")
            if "capacityLimits" in params:
                environment.max_instances = max_instances(params["capacityLimits"])
        self.scheduler.wake()
        return {"serviceEnvironmentName": environment.name, "serviceEnvironmentArn": environment.arn}

    def describe_service_environments(self, params: dict[str, Any]) -> dict[str, Any]:
        check_against_model("DescribeServiceEnvironments", params)
        wanted = set(params.get("serviceEnvironments") or [])
        with self.lock:
            found = [e for e in self.environments.values() if not wanted or {e.name, e.arn} & wanted]
            return {"serviceEnvironments": [e.detail() for e in found]}

    # -- job queues ---------------------------------------------------------------------------------
    def create_job_queue(self, params: dict[str, Any]) -> dict[str, Any]:
        """CreateJobQueue for jobQueueType SAGEMAKER_TRAINING (the bridge leaves the other types to moto)."""
        check_against_model("CreateJobQueue", params)
        name = params["jobQueueName"]
        require(NAME.fullmatch(name), f"jobQueueName {name!r}: up to 128 letters, digits, hyphens and underscores")
        require_range(params["priority"], QUEUE_PRIORITY_RANGE, "priority")
        require(not params.get("computeEnvironmentOrder"), "A SAGEMAKER_TRAINING job queue takes serviceEnvironmentOrder only")
        order = params.get("serviceEnvironmentOrder") or []
        require(len(order) == 1, "serviceEnvironmentOrder: the twin emulates exactly one service environment per job queue")
        policy = params.get("schedulingPolicyArn")
        require(policy is None or self.fairshare_policy(policy) is not None, f"Scheduling policy {policy} does not exist")
        time_limits = [time_limit_action(action) for action in params.get("jobStateTimeLimitActions") or []]
        check_tags(params.get("tags"))
        arn = f"arn:aws:batch:{self.region}:{self.account}:job-queue/{name}"
        with self.lock:
            require(arn not in self.queues, f"Job queue {name} already exists")
            environment = self._environment(order[0]["serviceEnvironment"])
            self.queues[arn] = JobQueue(
                name,
                arn,
                params["priority"],
                environment.arn,
                order[0]["order"],
                enabled_or_disabled(params.get("state", "ENABLED"), "state"),
                policy,
                time_limits,
                dict(params.get("tags") or {}),
            )
        return {"jobQueueName": name, "jobQueueArn": arn}

    def describe_job_queues(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The twin's queues among DescribeJobQueues' `jobQueues` (all of them when none are named)."""
        wanted = set(params.get("jobQueues") or [])
        with self.lock:
            return [q.detail() for q in self.queues.values() if not wanted or {q.name, q.arn} & wanted]

    def get_job_queue_snapshot(self, params: dict[str, Any]) -> dict[str, Any]:
        check_against_model("GetJobQueueSnapshot", params)
        now = time.time()
        with self.lock:
            queue = self._queue(params["jobQueue"])
            order = self.scheduler.order(queue, now)[:FRONT_OF_QUEUE_LENGTH]
            in_use: dict[str | None, int] = {}
            for job in self.jobs.values():
                if job.queue is queue and job.status in DISPATCHED:
                    in_use[job.share] = in_use.get(job.share, 0) + job.instances
        utilization: dict[str, Any] = {
            "totalCapacityUsage": [{"capacityUnit": CAPACITY_UNIT, "quantity": float(sum(in_use.values()))}],
            "lastUpdatedAt": ms(now),
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
        jobs = [{"jobArn": job.arn, "earliestTimeAtPosition": ms(job.position_since)} for job in order]
        return {"frontOfQueue": {"jobs": jobs, "lastUpdatedAt": ms(now)}, "queueUtilization": utilization}

    # -- service jobs ---------------------------------------------------------------------------
    def submit_service_job(self, params: dict[str, Any]) -> dict[str, Any]:
        check_against_model("SubmitServiceJob", params)
        check_submission(params)
        payload = json.loads(params["serviceRequestPayload"])
        now = time.time()
        with self.lock:
            queue = self._queue(params["jobQueue"])
            require(queue.state == "ENABLED", f"Job queue {queue.name} is DISABLED and accepts no jobs")
            share = params.get("shareIdentifier")
            if queue.policy_arn:
                require(share is not None, f"Job queue {queue.name} has a fair-share policy: shareIdentifier must be specified")
            else:
                require(share is None, f"Job queue {queue.name} has no fair-share policy: don't specify shareIdentifier")
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
                instances=instance_count(payload),
                sequence=self._sequence,
                created_at=now,
                priority=params.get("schedulingPriority", 0),
            )
            self.jobs[job_id] = job
            if token:
                self._tokens[token] = job
        if self.feed is not None:  # Batch sends no event for a submission; the feed says it
            self.feed.service_job_submitted(job.name, queue.name, share, job.priority)
        self.scheduler.wake()
        return {"jobArn": job.arn, "jobName": job.name, "jobId": job.id}

    def describe_service_job(self, params: dict[str, Any]) -> dict[str, Any]:
        check_against_model("DescribeServiceJob", params)
        with self.lock:
            return self._job(params["jobId"]).detail()

    def list_service_jobs(self, params: dict[str, Any]) -> dict[str, Any]:
        """ListServiceJobs of one queue (the twin requires jobQueue), newest first, paginated."""
        check_against_model("ListServiceJobs", params)
        require("jobQueue" in params, "jobQueue must be specified")
        status = params.get("jobStatus")
        require(status is None or status in STATUSES, f"jobStatus must be one of {', '.join(STATUSES)}")
        size = params.get("maxResults", LIST_RESULTS_MAX)
        require_range(size, (1, LIST_RESULTS_MAX), "maxResults")
        start = list_offset(params.get("nextToken"))
        matches = job_filter(params.get("filters") or [], status)
        with self.lock:
            queue = self._queue(params["jobQueue"])
            found = [j for j in self.jobs.values() if j.queue is queue and matches(j)]
            found.sort(key=lambda j: (j.created_at, j.sequence), reverse=True)
            page = [j.summary() for j in found[start : start + size]]
        answer: dict[str, Any] = {"jobSummaryList": page}
        if start + size < len(found):
            answer["nextToken"] = str(start + size)
        return answer

    def update_service_job(self, params: dict[str, Any]) -> dict[str, Any]:
        check_against_model("UpdateServiceJob", params)
        require_range(params["schedulingPriority"], PRIORITY_RANGE, "schedulingPriority")
        with self.lock:
            job = self._job(params["jobId"])
            job.priority = params["schedulingPriority"]
        self.scheduler.wake()
        return {"jobArn": job.arn, "jobName": job.name, "jobId": job.id}

    def terminate_service_job(self, params: dict[str, Any]) -> dict[str, Any]:
        check_against_model("TerminateServiceJob", params)
        stop = None
        with self.lock:
            job = self._job(params["jobId"])
            if job.status in QUEUED:  # no training job exists: it never will
                self.finish(job, "FAILED", params["reason"], time.time(), terminated=True)
            elif job.status in DISPATCHED and job.terminating is None:
                job.terminating = params["reason"]
                if job.latest is not None and job.latest.training_job_arn:  # else: once CreateTrainingJob answers
                    stop = job.latest.training_job_name
        self.announce()
        if stop is not None:
            self.sagemaker.stop(stop)  # as StopTrainingJob does; the job ends FAILED once it has stopped
        return {}

    def preempt(self, job_id: str, reason: str) -> str:
        """Preempt a dispatched job, as Batch does for a RUNNABLE job of a quota-managed queue: its
        training job is stopped (SIGTERM: the script saves a checkpoint), then the job is RUNNABLE
        again, or FAILED once its preemptionRetriesBeforeTermination are spent (batch_scheduler.py).
        The twin's scheduler never preempts by itself: only quota management does (see the module's
        documentation). Returns the training job stopped ("" when CreateTrainingJob has not answered
        yet: it is stopped once it does)."""
        with self.lock:
            job = self._job(job_id)
            require(job.status in DISPATCHED, f"Service job {job.name} is {job.status}: only a dispatched job can be preempted")
            require(job.terminating is None and job.preempting is None, f"Service job {job.name} is already being stopped")
            job.preempting = reason
            stop = job.latest.training_job_name if job.latest is not None and job.latest.training_job_arn else ""
        if stop:
            self.sagemaker.stop(stop)  # the job is requeued once its training job has stopped
        return stop

    # -- lookups ------------------------------------------------------------------------------------
    def _environment(self, identifier: str) -> ServiceEnvironment:
        found = next((e for e in self.environments.values() if identifier in (e.name, e.arn)), None)
        require(found is not None, f"Service environment {identifier} does not exist")
        assert found is not None
        return found

    def _queue(self, identifier: str) -> JobQueue:
        found = next((q for q in self.queues.values() if identifier in (q.name, q.arn)), None)
        require(found is not None, f"Job queue {identifier} does not exist or is not of type {SERVICE_JOB_TYPE}")
        assert found is not None
        return found

    def _job(self, job_id: str) -> ServiceJob:
        require(job_id in self.jobs, f"Service job {job_id} does not exist")
        return self.jobs[job_id]
