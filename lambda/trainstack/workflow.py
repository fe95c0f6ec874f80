"""What the state machine decides, as pure functions: where a run comes from (its lineage), which
trials a sweep expands to, how often to poll, and what a finished job means."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from trainstack.billing import billed_usd
from trainstack.errors import CapacityUnavailableError, ControlPlaneError
from trainstack.layout import team_of_key

# For annotations only: at run time the spec model would pull in pydantic, which Describe, Notify and
# Stop never use, and every handler imports this module (tools/bench_lambda.py).
if TYPE_CHECKING:
    from trainstack.spec import JobSpec

FIRST_POLL_SECONDS = 60
CAPACITY_RETRIES = 3  # re-creations after a job fails for capacity
CAPACITY_FIRST_WAIT_SECONDS = 300
# Before restart n (0-based) after a failure that is not the user's: 1, 2, 4 ... minutes, at most 15.
# A transient fault (a replaced instance, a network blip) is usually gone in minutes, and a restart
# loop must not hammer a sick fleet.
FIRST_RESTART_WAIT_SECONDS = 60
RESTART_WAIT_CAP = 15  # x the first wait
# How SageMaker words a job that failed because no instances could be had.
CAPACITY_FAILURE_MARKERS = ("CapacityError", "Insufficient capacity", "Unable to provision requested ML compute capacity")
MAX_POLL_SECONDS = 1800
# A trial's status while its job's could not be read: the control plane failed (throttled, timed out,
# a 5xx). Nothing is known of the job, so the loop asks again at the next poll: only SageMaker's own
# status (or the run's deadline) ends a trial, never an answer of the control plane.
UNKNOWN = "Unknown"
RUNNING = ("InProgress", "Stopping", UNKNOWN)  # statuses the state machine keeps polling
ENDED = ("Completed", "Failed", "Stopped")  # a training job's final statuses
DATA_MARKER = "_SUCCESS"

# A run's and a trial's outcome, as Notify reports them and the state machine's last Choice reads them.
COMPLETED = "Completed"
FAILED = "Failed"
REJECTED = "Rejected"  # the spec was refused before anything launched
NOT_STARTED = "NotStarted"  # Create gave up (capacity, quota) or failed
UNWATCHED = "Unwatched"  # the job could no longer be described; the failed run's Stop rule stops it
NOTIFY_FAILED = "NotifyFailed"  # Notify itself failed as a function: the run ends with this error
DEADLINE_PASSED = "DeadlinePassed"  # the job still ran when the run's deadline passed; stopped likewise
# Execution statuses whose run must not leave jobs running (the Stop function's rule).
ENDED_EARLY = ("ABORTED", "TIMED_OUT", "FAILED")
# The longest a Standard Step Functions execution may run: the state machine's own timeout, so that
# each run is bounded by its deadline (run_deadline_seconds), not by a fixed guess.
STEP_FUNCTIONS_MAX_SECONDS = 365 * 86400
# Per job attempt beyond its training time: provisioning, image pull, channel download, model upload.
JOB_OVERHEAD_SECONDS = 3600
# What SNS accepts as a Subject: printable ASCII without line breaks, under 100 characters.
SUBJECT_MAX = 99


@dataclass(frozen=True)
class RetryPolicy:
    """A Step Functions Retry as data: the definition renders it (stacks/state_machine.py), and a run's
    deadline counts the waits it may spend."""

    errors: tuple[str, ...]
    interval_seconds: int
    max_attempts: int
    backoff_rate: float = 2.0
    max_delay_seconds: int | None = None

    def waits(self) -> list[float]:
        """The wait before each retry, as Step Functions spaces them (interval x rate^n, capped)."""
        waits = (self.interval_seconds * self.backoff_rate**attempt for attempt in range(self.max_attempts))
        return [min(wait, self.max_delay_seconds or wait) for wait in waits]

    def total_wait_seconds(self) -> int:
        return int(sum(self.waits()))


# Create retries an API that failed on the service's side for about 15 minutes (5 s doubling to 5
# minutes), and a quota or capacity refusal (ResourceLimitExceeded) for about 75 minutes; then it
# reports the trial NotStarted. (Describe retries nothing of the API: it asks again at its next poll.)
CONTROL_PLANE_RETRY = RetryPolicy((ControlPlaneError.__name__,), interval_seconds=5, max_attempts=8, max_delay_seconds=300)
CAPACITY_REFUSED_RETRY = RetryPolicy(
    (CapacityUnavailableError.__name__,), interval_seconds=300, max_attempts=4, max_delay_seconds=3600
)
# The errors Step Functions reports when Lambda itself fails to run a function (not the function's own).
LAMBDA_SERVICE_ERRORS = (
    "Lambda.ClientExecutionTimeoutException",
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
)
# Every task retries those for about two minutes (as CDK's LambdaInvoke would by default); Describe,
# which watches a job that may train for days, for about an hour (5 s doubling to 5 minutes): Lambda
# failing for a while is no news of the job.
LAMBDA_RETRY = RetryPolicy(LAMBDA_SERVICE_ERRORS, interval_seconds=2, max_attempts=6)
WATCH_LAMBDA_RETRY = RetryPolicy(LAMBDA_SERVICE_ERRORS, interval_seconds=5, max_attempts=16, max_delay_seconds=300)
# A call whose failure would lose an event, asked again inside the function while AWS fails on its
# side (after botocore's own attempts): Notify's Publish, and each call of Stop, which EventBridge
# invokes asynchronously (Lambda then retries it twice, a minute or more apart, before its dead-letter
# queue: jobs left running meanwhile). 1, 2, 4, 8 s: 15 s of waits within the functions' 60 s.
IN_FUNCTION_RETRY = RetryPolicy((ControlPlaneError.__name__,), interval_seconds=1, max_attempts=4)


@dataclass(frozen=True)
class Trigger:
    """Where a run's spec comes from and what names its lineage.

    The lineage names the run for idempotency: the same object version (or the same execution
    name for a direct start) always gives the same training job names, so a redelivered event or
    a redriven execution finds its job instead of creating a second one.
    """

    lineage: str
    resume: str | None = None  # the execution that continues an ended lineage (see identity.Run)
    spec_bucket: str | None = None
    spec_key: str | None = None
    spec_version: str | None = None
    fallback_spec_key: str | None = None  # a data drop without its own job.yaml uses the stack's default
    inline_spec: dict[str, Any] | None = None
    train_channel: str | None = None  # a data drop's prefix, as s3://bucket/prefix/
    # The team whose folder the spec came from (jobs/<team>/, datasets/<team>/), or that a direct start
    # names (`"team"`, the platform's own principals only); None: the stack's default team.
    team: str | None = None


def trigger_of(event: dict[str, Any], execution_name: str, default_spec_key: str | None = None) -> Trigger:
    """Read the execution input: an S3 Object Created event (a job spec or a data-drop marker)
    forwarded by EventBridge, or a direct start with the spec inline (`{"spec": ..., "lineage":
    "name", "resume": true, "team": "name"}`: the lineage defaults to the execution name; `resume`
    continues it). The team is never the spec's own word: it is where the spec came from."""
    if "spec" in event:
        return Trigger(
            lineage=f"execution:{event.get('lineage') or execution_name}",
            resume=execution_name if event.get("resume") else None,
            inline_spec=event["spec"],
            team=event.get("team"),
        )
    detail = event.get("detail", event)
    bucket, key = detail["bucket"]["name"], detail["object"]["key"]
    version = detail["object"].get("version-id")
    lineage = f"s3://{bucket}/{key}#{version or detail['object'].get('etag', '')}"
    if key.endswith("/" + DATA_MARKER):
        prefix = key[: -len(DATA_MARKER)]
        return Trigger(
            lineage=lineage,
            spec_bucket=bucket,
            spec_key=f"{prefix}job.yaml",
            fallback_spec_key=default_spec_key,
            train_channel=f"s3://{bucket}/{prefix}",
            team=team_of_key(key),
        )
    return Trigger(lineage=lineage, spec_bucket=bucket, spec_key=key, spec_version=version, team=team_of_key(key))


def trials(spec: JobSpec) -> list[dict[str, Any]]:
    """The hyperparameter overrides of each run: one empty trial without a sweep."""
    if spec.sweep is None:
        return [{}]
    if spec.sweep.trials is not None:
        return [dict(trial) for trial in spec.sweep.trials]
    names = sorted(spec.sweep.grid)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(spec.sweep.grid[n] for n in names))]


def next_poll_seconds(previous: int | None, first: int = FIRST_POLL_SECONDS, cap: int = MAX_POLL_SECONDS) -> int:
    """Doubling from a minute to half an hour: a multi-day job costs few state transitions."""
    if not previous:
        return first
    return min(cap, previous * 2)


def capacity_wait_seconds(attempt: int, first: int = CAPACITY_FIRST_WAIT_SECONDS) -> int:
    """Before re-creation number `attempt + 1`: 5, 10, 20 minutes."""
    return first * 2**attempt


def transitions_for(duration_seconds: int, per_poll: int = 3) -> int:
    """State transitions a job of this length spends in the Wait -> Describe -> Choice loop."""
    elapsed, polls, wait = 0, 0, None
    while elapsed < duration_seconds:
        wait = next_poll_seconds(wait)
        elapsed += wait
        polls += 1
    return polls * per_poll


def summary(description: dict[str, Any]) -> dict[str, Any]:
    """The small, JSON-safe part of DescribeTrainingJob the workflow and notifications need: what a
    person acts on (status, reason, final metrics, duration, billable seconds, cost)."""
    start, end = description.get("TrainingStartTime"), description.get("TrainingEndTime")
    resource = description.get("ResourceConfig", {})
    instance_type = description.get("SelectedInstanceType") or resource.get("InstanceType", "")
    instances = int(description.get("SelectedInstanceCount") or resource.get("InstanceCount") or 1)
    billable = description.get("BillableTimeInSeconds", 0)
    return {
        "job_name": description["TrainingJobName"],
        "status": description["TrainingJobStatus"],
        "secondary_status": description.get("SecondaryStatus", ""),
        "failure_reason": description.get("FailureReason", ""),
        "model_artifacts": description.get("ModelArtifacts", {}).get("S3ModelArtifacts", ""),
        "billable_seconds": billable,
        "duration_seconds": int((end - start).total_seconds()) if start and end else 0,
        "instance_type": instance_type,
        "instance_count": instances,
        "cost_usd": billed_usd(instance_type, instances, billable),
        "final_metrics": {m["MetricName"]: m["Value"] for m in description.get("FinalMetricDataList") or []},
    }


def notification_subject(status: str, reason: str) -> str:
    """An SNS Subject for a run's outcome: SNS rejects line breaks, control and non-ASCII characters
    and 100 characters or more, and a rejected Publish must never hide the run's real outcome."""
    text = re.sub(r"[^\x20-\x7e]+", " ", f"trainstack run {status}: {reason}")
    text = re.sub(r" {2,}", " ", text).strip()
    return text if len(text) <= SUBJECT_MAX else text[: SUBJECT_MAX - 3].rstrip() + "..."


def max_concurrency(spec: JobSpec) -> int:
    """How many trials run at once: the sweep's setting; a single job is one trial."""
    return spec.sweep.max_concurrency if spec.sweep else 1


def run_deadline_seconds(spec: JobSpec, trial_count: int) -> int:
    """The longest a run of this spec can legitimately take, end to end: its trials in waves of
    `max_concurrency`, each trial at its worst — Create's retries, every capacity re-creation with
    its wait, then one job that trains for its whole MaxWait (spot) or MaxRuntime on each of
    SageMaker's own retries and on each restart after its wait (`restarts.max`), and a last poll;
    through the team queue, each of its jobs may also wait there up to `queue.max_wait` (nothing in
    AWS bounds a wait behind other jobs). Past it, the run is stuck: it fails and its jobs stop."""
    waves = -(-trial_count // max_concurrency(spec))
    job_seconds = (spec.spot.max_wait or spec.max_runtime) if spec.spot.enabled else spec.max_runtime
    capacity_waits = sum(capacity_wait_seconds(attempt) for attempt in range(CAPACITY_RETRIES))
    per_trial = (
        CONTROL_PLANE_RETRY.total_wait_seconds()
        + CAPACITY_REFUSED_RETRY.total_wait_seconds()
        + capacity_waits
        + CAPACITY_RETRIES * JOB_OVERHEAD_SECONDS  # re-created attempts that failed for capacity
        + (spec.retry_attempts + 1) * (job_seconds + JOB_OVERHEAD_SECONDS)
        + restart_seconds(spec.restarts.max, job_seconds + JOB_OVERHEAD_SECONDS)
        + MAX_POLL_SECONDS
        + (spec.queue.max_wait * (spec.restarts.max + 1) if spec.queue else 0)
    )
    return waves * per_trial


def restart_wait_seconds(restarts_done: int, first: int = FIRST_RESTART_WAIT_SECONDS) -> int:
    """Before restart number `restarts_done + 1`: 1, 2, 4 ... minutes, at most 15."""
    return min(first * 2**restarts_done, first * RESTART_WAIT_CAP)


def restart_seconds(restarts: int, job_seconds: int) -> int:
    """What `restarts` restarts may add to a trial: each waits its backoff, then trains a whole job."""
    return sum(restart_wait_seconds(done) + job_seconds for done in range(restarts))


def deadline(started: datetime, seconds: int) -> str:
    """The run's deadline as Step Functions compares timestamps (RFC 3339, UTC)."""
    return (started + timedelta(seconds=seconds)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
