"""A team's monthly budget (-c queue_budgets) against what a new run may cost. The month's figure is
what the team's jobs created this month (UTC) have been billed once ended (SageMaker's billable seconds
x the catalog's price), plus the worst case of each of its jobs still running or waiting in the team
queue (instances x the dearest price it may take x its MaxRuntime, MaxWaitTime for spot: what it may
cost in all, since a running job's billed time is only known when it ends), plus the new run's worst
case. A job is the team's by its trainstack:team tag. The refusal names every figure; `force` does not
lift it (it is the platform's cap, not the spec's own `budget`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from trainstack.account import described_in_progress
from trainstack.billing import billed_usd
from trainstack.calls import Ask, asked_once, listed
from trainstack.identity import TAG_TEAM
from trainstack.rules.problems import Problem
from trainstack.service_jobs import QUEUED
from trainstack.stack_context import StackContext

Clients = Callable[[str], Any]
IN_PROGRESS = "InProgress"


@dataclass(frozen=True)
class TeamBudget:
    """The team's monthly budget, what its ended jobs of the month were billed and what its running and
    queued jobs may cost (job name, USD each)."""

    team: str
    monthly_usd: float
    spent: tuple[tuple[str, float], ...] = ()
    committed: tuple[tuple[str, float], ...] = ()

    @property
    def spent_usd(self) -> float:
        return round(sum(usd for _, usd in self.spent), 2)

    @property
    def committed_usd(self) -> float:
        return round(sum(usd for _, usd in self.committed), 2)


def month_start(now: datetime) -> datetime:
    """The first instant of `now`'s month in UTC: a budget's month."""
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def job_worst_case_usd(job: dict[str, Any]) -> float:
    """What a job (DescribeTrainingJob, or a queued CreateTrainingJob request) may cost in all: its
    instances x the dearest type it may take x the time it may be billed."""
    config = job.get("ResourceConfig", {})
    preferences = config.get("InstancePreferences") or []
    types = (
        [p["InstanceType"] for p in preferences]
        if preferences and not config.get("SelectedInstanceType")
        else [config.get("SelectedInstanceType") or config.get("InstanceType")]
    )
    instances = int(config.get("SelectedInstanceCount") or config.get("InstanceCount") or 1)
    stopping = job.get("StoppingCondition", {})
    limit = stopping.get("MaxWaitTimeInSeconds") if job.get("EnableManagedSpotTraining") else None
    costs = [billed_usd(name, instances, int(limit or stopping.get("MaxRuntimeInSeconds", 0))) for name in types if name]
    return max((cost for cost in costs if cost is not None), default=0.0)


def job_billed_usd(job: dict[str, Any]) -> float:
    """What an ended job was billed (DescribeTrainingJob's BillableTimeInSeconds)."""
    config = job.get("ResourceConfig", {})
    instance_type = config.get("SelectedInstanceType") or config.get("InstanceType") or ""
    instances = int(config.get("SelectedInstanceCount") or config.get("InstanceCount") or 1)
    return billed_usd(instance_type, instances, int(job.get("BillableTimeInSeconds") or 0)) or 0.0


def team_budget(
    clients: Clients,
    team: str,
    monthly_usd: float,
    jobs_in_progress: Iterable[dict[str, Any]] | None,
    queue_arn: str = "",
    now: datetime | None = None,
    ask: Ask = asked_once,
) -> TeamBudget:
    """The team's month: its ended jobs created this month, its jobs in progress (the account's, read
    once for the quotas; None where that read failed: read here, or the budget would miss what they
    may cost) and, with a team queue, its jobs waiting there (their requests)."""
    sagemaker = clients("sagemaker")
    if jobs_in_progress is None:
        jobs_in_progress = described_in_progress(sagemaker, ask)
    committed = [
        (job["TrainingJobName"], job_worst_case_usd(job))
        for job in jobs_in_progress
        if job_team(sagemaker, job["TrainingJobArn"], ask) == team
    ]
    ended = team_jobs_of_month(sagemaker, team, now or datetime.now(UTC), ended_only=True, ask=ask)
    spent = [(job["TrainingJobName"], job_billed_usd(job)) for job in ended]
    if queue_arn:
        batch = clients("batch")
        share = [{"name": "SHARE_IDENTIFIER", "values": [team]}]
        for status in QUEUED:  # a dispatched job is a training job in progress, counted above
            listing = functools.partial(batch.list_service_jobs, jobQueue=queue_arn, jobStatus=status, filters=share)
            subject = f"ListServiceJobs {status} (team {team}'s budget)"
            for summary in listed(ask, subject, listing, "jobSummaryList", "nextToken"):
                describe = functools.partial(batch.describe_service_job, jobId=summary["jobId"])
                described = ask(f"DescribeServiceJob {summary['jobId']} (team {team}'s budget)", describe)
                committed.append((summary["jobName"], job_worst_case_usd(json.loads(described["serviceRequestPayload"]))))
    return TeamBudget(team, monthly_usd, tuple(spent), tuple(committed))


def job_team(sagemaker: Any, arn: str, ask: Ask = asked_once) -> str | None:
    """The team a training job is, by its trainstack:team tag (None: a job trainstack did not create)."""
    tags = ask(f"ListTags {arn}", functools.partial(sagemaker.list_tags, ResourceArn=arn)).get("Tags", [])
    return {t["Key"]: t["Value"] for t in tags}.get(TAG_TEAM)


def team_jobs_of_month(
    sagemaker: Any, team: str, now: datetime, ended_only: bool = False, ask: Ask = asked_once
) -> list[dict[str, Any]]:
    """DescribeTrainingJob of each job the team created in `now`'s month (UTC), by its trainstack:team
    tag; `ended_only`: those no longer in progress (whose billed time SageMaker has reported)."""
    described = []
    listing = functools.partial(sagemaker.list_training_jobs, CreationTimeAfter=month_start(now))
    for summary in listed(ask, "ListTrainingJobs (the month's jobs)", listing, "TrainingJobSummaries", "NextToken"):
        if ended_only and summary["TrainingJobStatus"] == IN_PROGRESS:
            continue
        if job_team(sagemaker, summary["TrainingJobArn"], ask) == team:
            describe = functools.partial(sagemaker.describe_training_job, TrainingJobName=summary["TrainingJobName"])
            described.append(ask(f"DescribeTrainingJob {summary['TrainingJobName']}", describe))
    return described


@dataclass(frozen=True)
class TeamMonth:
    """What a team's jobs of one month came to: instance-hours and their estimated cost (ended jobs:
    SageMaker's billable seconds; jobs in progress: the seconds since they started training, as
    `trainstack runs` counts a run's cost so far), at the catalog's on-demand price."""

    team: str
    month: str  # YYYY-MM, UTC
    jobs: int
    in_progress: int
    instance_hours: float
    cost_usd: float
    unpriced: tuple[str, ...] = ()  # instance types without a catalog price: their hours, not their cost

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "unpriced": list(self.unpriced)}


def team_month(team: str, described: Iterable[dict[str, Any]], now: datetime) -> TeamMonth:
    """The team's month from DescribeTrainingJob of each of its jobs of the month (team_jobs_of_month)."""
    jobs = in_progress = 0
    seconds = cost = 0.0
    unpriced: set[str] = set()
    for job in described:
        jobs += 1
        config = job.get("ResourceConfig", {})
        instance_type = config.get("SelectedInstanceType") or config.get("InstanceType") or ""
        instances = int(config.get("SelectedInstanceCount") or config.get("InstanceCount") or 1)
        if job["TrainingJobStatus"] == IN_PROGRESS:
            in_progress += 1
            started = job.get("TrainingStartTime")
            billed = int((now - started).total_seconds()) if started else 0
        else:
            billed = int(job.get("BillableTimeInSeconds") or 0)
        seconds += billed * instances
        usd = billed_usd(instance_type, instances, billed)
        if usd is None:
            unpriced.add(instance_type)
        else:
            cost += usd
    month = month_start(now).strftime("%Y-%m")
    return TeamMonth(team, month, jobs, in_progress, seconds / 3600, cost, tuple(sorted(unpriced)))


def stack_team_budget(
    clients: Clients,
    stack: StackContext,
    team: str,
    jobs_in_progress: Iterable[dict[str, Any]] | None,
    ask: Ask = asked_once,
) -> TeamBudget | None:
    """The team's month against the budget the stack gives it (Validate's, and `submit`'s before
    anything is uploaded); None where the team has none."""
    monthly = stack.budget_of(team)
    if monthly is None:
        return None
    return team_budget(clients, team, monthly, jobs_in_progress, stack.job_queue_arn, ask=ask)


def budget_problems(budget: TeamBudget | None, worst_case_usd: float | None) -> list[Problem]:
    """The run's worst case (None: a type without a price, which no budget admits) with the team's month
    against its monthly budget."""
    if budget is None:
        return []
    if worst_case_usd is None:
        return [
            Problem(
                "instance_type",
                None,
                f"team {budget.team} has a monthly budget of ${budget.monthly_usd:,.2f}, and this run's worst case "
                "cannot be priced (a type without a list price)",
                "choose a priced instance type",
            )
        ]
    total = round(worst_case_usd + budget.spent_usd + budget.committed_usd, 2)
    if total <= budget.monthly_usd:
        return []
    return [
        Problem(
            "team",
            budget.team,
            f"this run's worst case ${worst_case_usd:,.2f}, the ${budget.spent_usd:,.2f} the team's {len(budget.spent)} "
            f"ended jobs of the month were billed and the ${budget.committed_usd:,.2f} its {len(budget.committed)} "
            f"running and queued jobs may cost come to ${total:,.2f}, over its monthly budget of "
            f"${budget.monthly_usd:,.2f}",
            "lower max_runtime, instance_count or the sweep, wait for next month or for the team's jobs to end, "
            "or raise -c queue_budgets",
        )
    ]
