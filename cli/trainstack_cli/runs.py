"""What the CLI shows of a run, built from what the APIs answered (pure: no AWS calls here).

A run is one execution of the stack's state machine; its trials are the training jobs whose names
carry the run's digest (trainstack.identity, the same test the Stop handler uses). Cost so far is
the job's instances x SageMaker's billable seconds (while a job runs, the seconds since it started
training: SageMaker reports billable time only at the end) x the catalog's on-demand price.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from trainstack.billing import billed_usd
from trainstack.failures import classify, failure_text
from trainstack.identity import Run
from trainstack.restarts import progress_at_end
from trainstack.run_report import mlflow_run
from trainstack.workflow import trigger_of
from trainstack_contract.job_names import JobName


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

    @property
    def steps_lost(self) -> int:
        """Steps trained after the newest complete checkpoint: a restart trains them again."""
        return progress_at_end(self.metrics)[2] if self.status == "Failed" else 0


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

    @property
    def billable_seconds(self) -> int:
        return sum(t.billable_seconds * t.instance_count for t in self.trials)

    @property
    def cost_usd(self) -> float | None:
        costs = [t.cost_usd for t in self.trials]
        return None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 4)

    def to_json(self) -> dict[str, Any]:
        trials = [{**asdict(trial), "steps_lost": trial.steps_lost} for trial in self.trials]
        return {**asdict(self), "trials": trials, "billable_seconds": self.billable_seconds, "cost_usd": self.cost_usd}


def run_identity(execution: dict[str, Any]) -> Run:
    """The run an execution started: its lineage (read from its input as the Stop handler reads it)
    and, for an execution that resumes the lineage, its own name."""
    trigger = trigger_of(json.loads(execution.get("input") or "{}"), execution["name"])
    return Run(trigger.lineage, trigger.resume)


def trial_index(job_name: str) -> int:
    """The sweep trial a job name says (0 for a single job), read by the identity's own parser."""
    parsed = JobName.parse(job_name)
    return (parsed.trial or 0) if parsed else 0


def position(history: Iterable[dict[str, Any]]) -> str:
    """The last state the execution entered, from GetExecutionHistory's events."""
    entered = [e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e]
    return entered[-1] if entered else ""


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
    )


def run_view(execution: dict[str, Any], history: list[dict[str, Any]], trials: list[TrialView], now: datetime) -> RunView:
    """One run from DescribeExecution, its history and its trials."""
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
    )


def _time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else ""
