"""The real goodput of a run so far: productive step time over billed instance time, and where the
rest of the billed time went. Pure: Describe accounts each ended attempt (restarts.attempt_record),
Notify sums the accounts, and `trainstack status` accounts the jobs it reads the same way.

An attempt is one training job. Its account is in instance-seconds (seconds x its instances):

- `billed`: SageMaker's BillableTimeInSeconds (while the job runs, the seconds since its
  TrainingStartTime, as the CLI counts cost so far).
- The billed time is divided among the job's phases as its SecondaryStatusTransitions time them
  within billing (TrainingStartTime to TrainingEndTime), in proportion, so that the parts add up to
  the billed time (a spot job's billable seconds leave out what it saved): `startup` (Downloading
  and the other phases before the script runs on billed instances), the script (Training), and
  `stops` (Stopping, Uploading, MaxRuntimeExceeded, MaxWaitTimeExceeded: a stop's, a preemption's or
  a limit's last save and shutdown, and the upload of the model).
- Within the script, its steps: the steps it trained (from where it resumed to `train:step`) x the
  script's step time (`train:step_time`: wall time per step over its last log interval, so a save
  that held the loop inside that interval is in it). The steps after its newest complete checkpoint
  (`train:checkpoint_step`), when a later attempt trains them again (a restart, a capacity
  re-creation, a Batch preemption), are `retrained`; the other steps are `productive`. What is left
  of the script's time is `script`: its own start-up, checkpoint saves and the export of the model,
  which the script's metric lines do not tell apart (it prints no save durations).
- `waiting`, not billed: from when the attempt could have started (its job's creation, its
  submission to the team queue, or the end of the attempt before it, backoff and queue included)
  to its billing, and the phases inside billing without instances (Interrupted, after a spot
  reclaim), x the instances it asks for.

goodput = productive / billed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from trainstack_contract.metric_lines import CHECKPOINT_STEP, STEP

STEP_TIME = "train:step_time"
# The billed parts, which add up to `billed`; `waiting` is apart, not billed.
PARTS = ("productive", "retrained", "startup", "script", "stops")
WAITING = "waiting"
BILLED = "billed"
# What each part is, in the words a report uses.
PART_WORDS = {
    "productive": "productive steps",
    "retrained": "steps trained again",
    "startup": "start-up",
    "script": "script start-up, checkpoint saves and export",
    "stops": "stops and uploads",
    WAITING: "waiting for the queue or capacity (not billed)",
}
SCRIPT_PHASE = "Training"
STOP_PHASES = ("Stopping", "Uploading", "MaxRuntimeExceeded", "MaxWaitTimeExceeded")
# Phases without instances: before billing, or between a spot reclaim and the instances' return.
UNBILLED_PHASES = ("Starting", "Pending", "LaunchingMLInstances", "Interrupted", "Restarting")
ENDED_PHASES = ("Completed", "Failed", "Stopped")


def attempt_account(
    description: dict[str, Any],
    metrics: dict[str, float],
    *,
    resumed_from: int,
    retrained: bool,
    waiting_since: datetime | None,
    now: datetime,
) -> dict[str, int]:
    """One attempt's account (see the module's documentation): `metrics` are the job's (its final
    metrics, or the latest its log shows while it runs), `resumed_from` the checkpoint step it started
    from, `retrained` whether a later attempt trains its steps after its newest checkpoint again, and
    `waiting_since` when it could have started (None: its job's creation)."""
    instances = int(description.get("SelectedInstanceCount") or description.get("ResourceConfig", {}).get("InstanceCount") or 1)
    start, end = _time(description.get("TrainingStartTime")), _time(description.get("TrainingEndTime"))
    until = end or (now if description.get("TrainingJobStatus") in ("InProgress", "Stopping") else None)
    until = until or _time(description.get("LastModifiedTime")) or now
    billed = float(description.get("BillableTimeInSeconds") or 0)
    if not billed and start and not end:
        billed = max(0.0, (now - start).total_seconds())
    phases = {"startup": 0.0, "script": 0.0, "stops": 0.0, WAITING: 0.0}
    for transition in description.get("SecondaryStatusTransitions") or []:
        status = transition.get("Status", "")
        if start is None or status in ENDED_PHASES:
            continue
        began, ended = _time(transition.get("StartTime")) or start, _time(transition.get("EndTime")) or until
        seconds = (min(ended, until) - max(began, start)).total_seconds()
        phases[_part_of(status)] += max(0.0, seconds)
    timed = phases["startup"] + phases["script"] + phases["stops"]
    share = {part: phases[part] * billed / timed for part in ("startup", "script", "stops")} if timed else {"script": billed}
    script = share.get("script", 0.0)
    trained, _, lost = progress_at_end(metrics, resumed_from)
    steps = trained - resumed_from
    stepping = min(script, steps * float(metrics.get(STEP_TIME, 0.0)))
    again = stepping * lost / steps if steps and retrained else 0.0
    since = waiting_since or _time(description.get("CreationTime"))
    waited = max(0.0, ((start or until) - since).total_seconds()) if since else 0.0
    account = {
        BILLED: billed,
        "productive": stepping - again,
        "retrained": again,
        "startup": share.get("startup", 0.0),
        "script": script - stepping,
        "stops": share.get("stops", 0.0),
        WAITING: waited + phases[WAITING],
    }
    return {part: round(seconds * instances) for part, seconds in account.items()}


def progress_at_end(metrics: dict[str, float], resumed_from: int = 0) -> tuple[int, int, int]:
    """From a job's metrics and the checkpoint step it resumed from: the step it trained to, its newest
    complete checkpoint (where the next attempt resumes: the one it resumed from, where it wrote none)
    and the steps between them (trained again by that attempt). A stop's checkpoint may be newer than
    the last step a metric line logged: the job trained to it."""
    checkpoint = max(int(metrics.get(CHECKPOINT_STEP, 0)), resumed_from)
    trained = max(int(metrics.get(STEP, 0)), checkpoint)
    return trained, checkpoint, trained - checkpoint


def _time(value: Any) -> datetime | None:
    """A time as botocore gives it, or as the state machine's payload carries it (ISO 8601)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _part_of(status: str) -> str:
    if status == SCRIPT_PHASE:
        return "script"
    if status in STOP_PHASES:
        return "stops"
    return WAITING if status in UNBILLED_PHASES else "startup"


def total(accounts: list[dict[str, int]]) -> dict[str, int]:
    """Attempts' (or trials') accounts added up, part by part."""
    return {part: sum(account.get(part, 0) for account in accounts) for part in (BILLED, *PARTS, WAITING)}


def goodput(account: dict[str, int]) -> float | None:
    """Productive over billed; None before anything was billed."""
    return round(account["productive"] / account[BILLED], 4) if account.get(BILLED) else None


def report(account: dict[str, int]) -> dict[str, Any]:
    """What a notification and `status --json` carry: the goodput, and each part as a share of the
    billed time (waiting as a share too, though not billed)."""
    billed = account.get(BILLED, 0)
    return {
        "goodput": goodput(account),
        "instance_seconds": dict(account),
        "shares": {part: round(account[part] / billed, 4) if billed else None for part in (*PARTS, WAITING)},
    }


def words(account: dict[str, int]) -> str:
    """The account in one line: "goodput 71% of 1,234 billed instance-seconds: ...; waited ..."."""
    billed = account.get(BILLED, 0)
    if not billed:
        return f"nothing billed yet; waited {account.get(WAITING, 0):,} instance-seconds for the queue or capacity"
    parts = ", ".join(f"{PART_WORDS[part]} {account[part] / billed:.0%}" for part in PARTS[1:] if account[part])
    return (
        f"goodput {account['productive'] / billed:.0%} of {billed:,} billed instance-seconds"
        + (f" (the rest: {parts})" if parts else "")
        + f"; waited {account[WAITING]:,} instance-seconds for the queue or capacity (not billed)"
    )
