"""What the CLI shows of a run, built from what the APIs answered (pure: no AWS calls here).

A run is one execution of the stack's state machine; its trials are the training jobs whose names
carry the run's digest (trainstack.identity, the same test the Stop handler uses), and the jobs it
submitted to the team queue, which its history names (Batch names the training job it creates for
one AWSBatch<job name><32 hex>, a name the digest test does not read). Cost so far is
the job's instances x SageMaker's billable seconds (while a job runs, the seconds since it started
training: SageMaker reports billable time only at the end) x the catalog's on-demand price. Goodput
so far is accounted by trainstack.goodput from every training job of the run, those Batch preempted
included, as Notify accounts it at the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from trainstack.billing import billed_usd
from trainstack.errors import CapacityUnavailableError
from trainstack.failures import classify, failure_text
from trainstack.goodput import attempt_account, progress_at_end, report, total
from trainstack.identity import Run
from trainstack.run_report import mlflow_run
from trainstack.service_jobs import DISPATCHED, QUEUED, ended_in_queue
from trainstack.workflow import NOT_STARTED, RUNNING, trigger_of
from trainstack_cli.team_queue import ServiceJobView, batch_time, service_job_view
from trainstack_contract.job_names import JobName

QUEUED_STATUS = "Queued"  # a trial whose job waits in the team queue: Batch has not created its training job yet
STILL_GOING = (*RUNNING, QUEUED_STATUS)  # trial statuses that can still train (and bill)
CREATE_STATE = "Create"  # the trial's state that creates (or submits) its job (stacks/state_machine.py)
# The trial's tasks whose result ($.job) names the service job a queued trial was submitted as
# (stacks/state_machine.py names the states; Create and Describe both put their answer at $.job).
SERVICE_JOB_STATES = (CREATE_STATE, "Describe")


@dataclass(frozen=True)
class Transition:
    status: str
    start: str
    message: str


@dataclass(frozen=True)
class TrialView:
    trial: int
    job_name: str
    status: str
    secondary_status: str
    instance_type: str
    instance_count: int
    started: str
    ended: str
    billable_seconds: int
    cost_usd: float | None
    failure_reason: str
    model_artifacts: str
    transitions: list[Transition] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    attempt: int = 0  # 0: the trial's first job; n: its n-th re-creation (capacity) or restart
    failure: str = ""  # whose failure, for a failed job: "infrastructure (hang)" (trainstack/failures.py)
    mlflow: str = ""  # where the job's MLflow run is (trainstack.run_report.mlflow_run); "" untracked
    mlflow_ui: str = ""  # a signed-in link to its server's MLflow UI (`status` only); "" where none could be made
    training_job_name: str = ""  # SageMaker's name for the job: `job_name`, or Batch's for a queued job; "" while queued
    queue: ServiceJobView | None = None  # for a job submitted to the team queue: where it stands there
    preemptions: int = 0  # for a queued job: how often Batch preempted it (no failure, no restart spent)

    @property
    def steps_lost(self) -> int:
        """Steps trained after the newest complete checkpoint: a restart trains them again."""
        return progress_at_end(self.metrics)[2] if self.status == "Failed" else 0


@dataclass(frozen=True)
class JobRecord:
    """One job of a run as the APIs describe it: DescribeTrainingJob (None while the job waits in the
    team queue) and, for a job submitted to the queue, DescribeServiceJob (None for a direct job)."""

    training: dict[str, Any] | None
    service: dict[str, Any] | None = None

    @property
    def job_name(self) -> str:
        """trainstack's name for the job (JobName.parse reads it): a service job is named as Create
        named its training job."""
        return self.service["jobName"] if self.service else self.training_job_name

    @property
    def training_job_name(self) -> str:
        return self.training["TrainingJobName"] if self.training else ""

    @property
    def created(self) -> datetime:
        """When Create made it: a queued job's submission (Batch creates its training job later)."""
        submitted = batch_time(self.service.get("createdAt")) if self.service else None
        return submitted or (self.training or {})["CreationTime"]


@dataclass(frozen=True)
class Attempted:
    """One training job of a trial as its goodput is accounted: its description, its metrics (the
    latest its log shows while it runs), and when it could have started (a queued job's submission;
    None: its creation, or the end of the trial's job before it)."""

    trial: int
    description: dict[str, Any]
    metrics: dict[str, float]
    waiting_since: datetime | None = None


def run_account(attempts: list[Attempted], now: datetime) -> dict[str, int]:
    """The run's account of time (trainstack.goodput): each trial's jobs in the order they were
    created, each resuming from the newest checkpoint of the one before and waiting from its end, its
    steps after that checkpoint trained again by the next."""
    trials: dict[int, list[Attempted]] = {}
    for attempt in attempts:
        trials.setdefault(attempt.trial, []).append(attempt)
    accounts = []
    for chain in trials.values():
        chain.sort(key=lambda attempt: attempt.description["CreationTime"])
        resumed_from, since = 0, None
        for index, attempt in enumerate(chain):
            description = attempt.description
            accounts.append(
                attempt_account(
                    description,
                    attempt.metrics,
                    resumed_from=resumed_from,
                    retrained=index < len(chain) - 1,
                    waiting_since=since or attempt.waiting_since,
                    now=now,
                )
            )
            resumed_from = progress_at_end(attempt.metrics, resumed_from)[1]
            since = description.get("TrainingEndTime") or description.get("LastModifiedTime")
    return total(accounts)


@dataclass(frozen=True)
class RunView:
    name: str
    execution_arn: str
    status: str  # the execution's: RUNNING, SUCCEEDED, FAILED, ABORTED, TIMED_OUT
    position: str  # the state the execution is in (or ended in)
    started: str
    stopped: str
    duration_seconds: int
    cause: str
    trials: list[TrialView] = field(default_factory=list)
    waiting: str = ""  # why it has no job yet while Create retries: the account's quota, or SageMaker's capacity
    account: dict[str, int] = field(default_factory=dict)  # its time so far (run_account, trainstack.goodput)

    @property
    def billable_seconds(self) -> int:
        return sum(t.billable_seconds * t.instance_count for t in self.trials)

    @property
    def cost_usd(self) -> float | None:
        costs = [t.cost_usd for t in self.trials]
        return None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 4)

    def to_json(self) -> dict[str, Any]:
        trials = [{**asdict(trial), "steps_lost": trial.steps_lost} for trial in self.trials]
        totals = {"billable_seconds": self.billable_seconds, "cost_usd": self.cost_usd, "goodput": report(self.account)}
        return {**asdict(self), "trials": trials, **totals}


@dataclass(frozen=True)
class StopView:
    """What `stop` left: the run once nothing of it trains, and the jobs it terminated in the team
    queue, each as it stood then."""

    run: RunView
    terminated: list[ServiceJobView] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**self.run.to_json(), "terminated": [asdict(job) for job in self.terminated]}


def run_identity(execution: dict[str, Any]) -> Run:
    """The run an execution started: its lineage (read from its input as the Stop handler reads it)
    and, for an execution that resumes the lineage, its own name."""
    trigger = trigger_of(json.loads(execution.get("input") or "{}"), execution["name"])
    return Run(trigger.lineage, trigger.resume)


def team_of_run(execution: dict[str, Any], default_team: str) -> str:
    """The team a run is: the folder its spec came from, or the team a direct start named (as the
    state machine reads its input), else the stack's default team."""
    return trigger_of(json.loads(execution.get("input") or "{}"), execution["name"]).team or default_team


def trial_index(job_name: str) -> int:
    """The sweep trial a job name says (0 for a single job), read by the identity's own parser."""
    parsed = JobName.parse(job_name)
    return (parsed.trial or 0) if parsed else 0


def position(history: Iterable[dict[str, Any]]) -> str:
    """The last state the execution entered, from GetExecutionHistory's events."""
    entered = [e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e]
    return entered[-1] if entered else ""


def waiting_reason(history: Iterable[dict[str, Any]], status: str) -> str:
    """Why a running execution's Create is retrying: its last failure was a quota or capacity refusal
    (CapacityUnavailableError), which Create retries for about 75 minutes. "" otherwise."""
    events = list(history)
    if status != "RUNNING" or position(events) != CREATE_STATE:
        return ""
    failures = [
        details
        for event in events
        for key in ("lambdaFunctionFailedEventDetails", "taskFailedEventDetails")
        if (details := event.get(key))
    ]
    if not failures or failures[-1].get("error") != CapacityUnavailableError.__name__:
        return ""
    try:
        message = json.loads(failures[-1].get("cause") or "{}").get("errorMessage", "")
    except ValueError:
        message = failures[-1].get("cause", "")
    return f"waits for quota or capacity (Create retries it): {message}"


def latest_metrics(definitions: Iterable[dict[str, str]], lines: Iterable[str]) -> dict[str, float]:
    """Each metric's last value in the log, as SageMaker reads the job's MetricDefinitions."""
    text = "\n".join(lines)
    found = {}
    for definition in definitions:
        for value in reversed(re.findall(definition["Regex"], text)):
            try:
                found[definition["Name"]] = float(value)
                break
            except ValueError:
                continue
    return found


def service_job_ids(history: Iterable[Mapping[str, Any]]) -> list[str]:
    """The service jobs the run submitted to the team queue, in the order its history first names
    them (a direct job's Create answers an empty id)."""
    found: list[str] = []
    for event in history:
        details = event.get("stateExitedEventDetails") or {}
        if details.get("name") in SERVICE_JOB_STATES and details.get("output"):
            job = json.loads(details["output"]).get("job")
            if isinstance(job, dict) and job.get("service_job_id"):
                found.append(job["service_job_id"])
    return list(dict.fromkeys(found))


def trial_of(job: JobRecord, now: datetime, front: list[str], metrics: dict[str, float] | None = None) -> TrialView:
    """The trial a job is; `front`: the team queue's front (team_queue.front_of_queue), for a queued job."""
    if job.service is not None:
        return queued_trial_view(job.service, job.training, now, front, metrics)
    return trial_view(job.training or {}, now, metrics)


def queued_trial_view(
    service_job: dict[str, Any],
    training: dict[str, Any] | None,
    now: datetime,
    front: list[str],
    metrics: dict[str, float] | None = None,
) -> TrialView:
    """A trial submitted to the team queue, under trainstack's name for its job (the service job's):
    once dispatched, its training job as `trial_view` reads it; until then, the service job alone."""
    queue = service_job_view(service_job, front, now)
    parsed = JobName.parse(queue.job_name)
    named = {
        "trial": trial_index(queue.job_name),
        "job_name": queue.job_name,
        "attempt": parsed.attempt if parsed else 0,
        "preemptions": (service_job.get("preemptionSummary") or {}).get("preemptedAttemptCount", 0),
    }
    not_started = ended_in_queue(service_job, training["TrainingJobStatus"] if training else None)
    if training is not None and queue.status not in QUEUED and not not_started:  # a job Batch requeued waits again
        return replace(trial_view(training, now, metrics), **named, queue=queue)
    if queue.status in QUEUED:
        status = QUEUED_STATUS
    elif queue.status in DISPATCHED:
        status = "InProgress"  # dispatched; its training job not described yet
    elif not_started:
        status = NOT_STARTED  # as the pipeline reports it (Describe)
    else:
        status = "Completed" if queue.status == "SUCCEEDED" else "Failed"
    return TrialView(
        **named,
        status=status,
        secondary_status=queue.status,
        instance_type=queue.instance_type,
        instance_count=queue.instances,
        started="",
        ended=_time(batch_time(service_job.get("stoppedAt"))),
        billable_seconds=0,
        cost_usd=billed_usd(queue.instance_type, queue.instances, 0),
        failure_reason=queue.reason if status in ("Failed", NOT_STARTED) else "",
        model_artifacts="",
        training_job_name="",
        queue=queue,
    )


def trial_view(description: dict[str, Any], now: datetime, metrics: dict[str, float] | None = None) -> TrialView:
    """One trial from DescribeTrainingJob; `metrics` read from its log, else SageMaker's final ones."""
    resource = description.get("ResourceConfig", {})
    instance_type = description.get("SelectedInstanceType") or resource.get("InstanceType") or ""
    count = int(description.get("SelectedInstanceCount") or resource.get("InstanceCount") or 1)
    start, end = description.get("TrainingStartTime"), description.get("TrainingEndTime")
    billable = int(description.get("BillableTimeInSeconds") or 0)
    if not billable and start and not end:  # still training: every instance is billed since the start
        billable = max(0, int((now - start).total_seconds()))
    failure = classify(failure_text(description)) if description["TrainingJobStatus"] == "Failed" else None
    parsed = JobName.parse(description["TrainingJobName"])
    return TrialView(
        trial=trial_index(description["TrainingJobName"]),
        job_name=description["TrainingJobName"],
        status=description["TrainingJobStatus"],
        secondary_status=description.get("SecondaryStatus", ""),
        instance_type=instance_type,
        instance_count=count,
        started=_time(start),
        ended=_time(end),
        billable_seconds=billable,
        cost_usd=billed_usd(instance_type, count, billable),
        failure_reason=description.get("FailureReason", ""),
        model_artifacts=description.get("ModelArtifacts", {}).get("S3ModelArtifacts", ""),
        transitions=[
            Transition(t["Status"], _time(t.get("StartTime")), t.get("StatusMessage", ""))
            for t in description.get("SecondaryStatusTransitions", [])
        ],
        metrics=metrics or {m["MetricName"]: m["Value"] for m in description.get("FinalMetricDataList") or []},
        attempt=parsed.attempt if parsed else 0,
        failure=f"{failure.kind} ({failure.cause})" if failure else "",
        mlflow=mlflow_run(description),
        training_job_name=description["TrainingJobName"],
    )


def run_view(
    execution: dict[str, Any],
    history: list[dict[str, Any]],
    trials: list[TrialView],
    now: datetime,
    account: dict[str, int] | None = None,
) -> RunView:
    """One run from DescribeExecution, its history, its trials and its account of time (run_account)."""
    started, stopped = execution["startDate"], execution.get("stopDate")
    return RunView(
        name=execution["name"],
        execution_arn=execution["executionArn"],
        status=execution["status"],
        position=position(history),
        started=_time(started),
        stopped=_time(stopped),
        duration_seconds=int(((stopped or now) - started).total_seconds()),
        cause=execution.get("cause") or execution.get("error") or "",
        trials=sorted(trials, key=lambda t: (t.trial, t.started, t.job_name)),
        waiting=waiting_reason(history, execution["status"]),
        account=account or total([]),
    )


def _time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else ""
