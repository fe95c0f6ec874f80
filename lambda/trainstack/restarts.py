"""Restarting a trial after a failure that is not the user's, and the account of every attempt. Pure:
Describe calls these with the job's description and the spec's `restarts`, and returns their
answer to the state machine, which re-creates the job (NextAttempt) when `retry` says so.

Each ended attempt of a trial leaves one record in the trial's `attempts` (carried in the state
machine's payload): why it ended, whose failure that was, the step it trained to, the newest
complete checkpoint (where the next attempt resumes), the steps trained after that checkpoint (lost:
trained again by the next attempt), what the attempt and its lost steps cost, and its account of
billed and waited time (goodput.attempt_account). A Batch preemption is an attempt of its own: its
training job stopped and its service job requeued, it spends no restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trainstack.failures import CAPACITY, Failure, classify, failure_text
from trainstack.goodput import attempt_account, progress_at_end

RESTART = "restart"
REASON_CHARS = 300
CAPACITY_RETRY = "capacity retry"
SPOT_INTERRUPTION = "spot interruption"  # the kind SageMaker's own restarts of an interrupted spot job count under
# A Batch preemption: the attempt's decision and its kind. Batch requeued the service job itself, so
# the pipeline decided nothing and spent no restart; the next attempt resumes from the checkpoint.
PREEMPTED = "preempted by Batch"
PREEMPTION = "batch preemption"


@dataclass(frozen=True)
class RestartPolicy:
    """The spec's `restarts`, as the payload carries it (the spec's JSON dump)."""

    max: int
    on: tuple[str, ...]
    exit_codes: tuple[int, ...]
    within_seconds: int

    @classmethod
    def from_spec_json(cls, restarts: dict[str, Any]) -> RestartPolicy:
        return cls(int(restarts["max"]), tuple(restarts["on"]), tuple(restarts["exit_codes"]), int(restarts["within"]))


def decided(attempts: list[dict[str, Any]], decision: str) -> int:
    """How many earlier attempts ended in this decision (RESTART or CAPACITY_RETRY): the records are the count."""
    return sum(1 for attempt in attempts if attempt["decision"].startswith(decision))


@dataclass(frozen=True)
class RestartsOfAKind:
    """A trial's restarts after one kind of failure, the steps they trained again and what those
    cost; None where that is not known."""

    restarts: int
    steps_lost: int | None
    lost_usd: float | None


def restarts_by_kind(attempts: list[dict[str, Any]]) -> dict[str, RestartsOfAKind]:
    """Each time a trial's training started over, by the kind of failure it followed. An attempt
    restarted after its failure counts under the failure's kind (infrastructure, unknown) with its
    lost steps and their cost (unknown where its instance type has no price); an attempt Batch
    preempted counts under PREEMPTION the same way, though it spent no restart. Each spot interruption
    inside an attempt counts under SPOT_INTERRUPTION with its losses unknown: SageMaker resumed it
    inside the same job, whose final metrics do not say from which step. A capacity retry is not a
    restart: the job never had instances, so nothing trained and nothing was lost."""
    restarted: dict[str, list[dict[str, Any]]] = {}
    for attempt in attempts:
        if attempt["decision"].startswith((RESTART, PREEMPTED)):
            restarted.setdefault(attempt["kind"], []).append(attempt)
    kinds = {
        kind: RestartsOfAKind(
            restarts=len(ended),
            steps_lost=sum(attempt["steps_lost"] for attempt in ended),
            lost_usd=total_usd([attempt["lost_usd"] for attempt in ended]),
        )
        for kind, ended in restarted.items()
    }
    if interruptions := sum(attempt["spot_interruptions"] for attempt in attempts):
        kinds[SPOT_INTERRUPTION] = RestartsOfAKind(restarts=interruptions, steps_lost=None, lost_usd=None)
    return kinds


def total_usd(costs: list[float | None]) -> float | None:
    """The sum of costs; unknown (None) where any of them is."""
    return None if None in costs else round(sum(costs), 4)


def restart_decision(failure: Failure, policy: RestartPolicy, restarts_done: int, seconds_since_start: float) -> tuple[bool, str]:
    """Whether to restart after this failure, and why (or why not), in words for the attempt's record."""
    if failure.kind not in policy.on:
        return False, f"not restarted: a {failure.kind} failure ({failure.cause})"
    if restarts_done >= policy.max:
        return False, f"not restarted: restarts.max = {policy.max} spent"
    if seconds_since_start > policy.within_seconds:
        return False, f"not restarted: the run started more than restarts.within = {policy.within_seconds} s ago"
    return True, f"{RESTART} {restarts_done + 1} of {policy.max}"


def attempt_record(
    description: dict[str, Any],
    summary: dict[str, Any],
    failure: Failure | None,
    decision: str,
    *,
    previous: dict[str, Any] | None = None,
    followed: bool = False,
    waiting_since: datetime | None = None,
) -> dict[str, Any]:
    """One ended attempt: what it trained, what a restart resumes from, what was lost, and its account
    of time. `previous` is the trial's attempt before it (it resumed from that one's checkpoint, and
    waited from its end), `followed` whether another attempt follows it (and trains its lost steps
    again), `waiting_since` when the trial's first attempt could have started (None: its job's creation)."""
    resumed_from = int(previous.get("checkpoint_step", 0)) if previous else 0
    metrics = summary.get("final_metrics", {})
    trained, checkpoint, lost = progress_at_end(metrics, resumed_from)
    cost = summary.get("cost_usd")
    transitions = description.get("SecondaryStatusTransitions") or []
    now = datetime.now(UTC)
    since = datetime.fromisoformat(previous["ended_at"]) if previous and previous.get("ended_at") else waiting_since
    ended = description.get("TrainingEndTime") or description.get("LastModifiedTime")
    account = attempt_account(description, metrics, resumed_from=resumed_from, retrained=followed, waiting_since=since, now=now)
    return {
        "job_name": summary["job_name"],
        # through the team queue, the training job Batch created for the attempt (AWSBatch<job name><hex>)
        **({"training_job_name": summary["training_job_name"]} if summary.get("training_job_name") else {}),
        "status": summary["status"],
        # bounded: a sweep's trials, each with its attempts, share Step Functions' 256 KB payload
        "reason": summary.get("failure_reason", "")[:REASON_CHARS],
        "kind": failure.kind if failure else "",
        "cause": failure.cause if failure else "",
        "decision": decision,
        "spot_interruptions": sum(1 for t in transitions if t.get("Status") == "Interrupted"),  # SageMaker restarted it
        "trained_to_step": trained,
        "checkpoint_step": checkpoint,  # where the next attempt resumes
        "steps_lost": lost,
        "cost_usd": cost,
        # the lost steps' share of what the attempt billed for the steps it trained
        "lost_usd": None if cost is None or trained <= resumed_from else round(cost * lost / (trained - resumed_from), 4),
        "account": account,  # goodput.attempt_account, in instance-seconds
        "ended_at": (ended if isinstance(ended, datetime) else now).isoformat(),
    }


def after_job(
    description: dict[str, Any], summary: dict[str, Any], policy: RestartPolicy, attempts: list[dict[str, Any]],
    seconds_since_start: float, capacity_retries: int, waiting_since: datetime | None = None,
) -> dict[str, Any]:  # fmt: skip
    """What Describe adds for a job that ended: `retry` (create the trial's job again: a capacity
    re-creation or a restart), `restart` (a restart, which spends the policy's budget), the failure's
    classification, and `attempts` with this attempt's record (`waiting_since`: see attempt_record)."""
    previous = attempts[-1] if attempts else None
    if summary["status"] != "Failed":
        record = attempt_record(description, summary, None, "", previous=previous, waiting_since=waiting_since)
        return {"retry": False, "restart": False, "attempts": [*attempts, record]}
    failure = classify(failure_text(description), policy.exit_codes)
    if failure.kind == CAPACITY:
        done = decided(attempts, CAPACITY_RETRY)
        retry = done < capacity_retries
        decision = (
            f"{CAPACITY_RETRY} {done + 1} of {capacity_retries}"
            if retry
            else f"not re-created: {capacity_retries} capacity retries spent"
        )
        restart = False
    else:
        retry, decision = restart_decision(failure, policy, decided(attempts, RESTART), seconds_since_start)
        restart = retry
    record = attempt_record(
        description, summary, failure, decision, previous=previous, followed=retry, waiting_since=waiting_since
    )
    return {
        "retry": retry,
        "restart": restart,
        "failure": {"kind": failure.kind, "cause": failure.cause},
        "attempts": [*attempts, record],
    }
