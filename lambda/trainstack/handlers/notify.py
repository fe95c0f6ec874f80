"""Notify: one SNS message per run with what a person acts on (the run's status and reason; each
trial's status, failure reason, final metrics, duration, billable seconds, cost, model URI, and the
account of its attempts (restarts, their reasons, the steps each resumed from and lost); links to
the execution, each job and its logs; Batch's preemptions of its queued jobs, which are no
failures and spend no restart), each trial's and the run's goodput so far with where the rest of the
billed time went (goodput.py), and the run's overall outcome for the state machine's final Choice.
Each ended job, each trial's account of time, and each trial's restarts by cause with the steps and
cost they lost, are also counted on the stack's dashboard (run_report.metric_lines).

The outcome never depends on the message: a Publish that SNS refuses, or that keeps failing on AWS's
side after being asked again (environment.asked_again), is logged and reported beside the outcome
(`notified: false`), so an SNS problem cannot replace the run's real reason.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from trainstack.billing import cost_basis
from trainstack.errors import ControlPlaneError, SpecInvalidError
from trainstack.goodput import report, total
from trainstack.handlers.environment import asked_again, client, environment
from trainstack.restarts import PREEMPTED, RESTART, decided, total_usd
from trainstack.run_report import execution_link, job_links, metric_lines, trial_account
from trainstack.workflow import COMPLETED, FAILED, NOT_STARTED, REJECTED, UNWATCHED, notification_subject

log = logging.getLogger("trainstack")
REASON_MAX = 32000  # what the state machine's Fail Cause can carry


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    outcome = _outcome(event)
    execution = event.get("execution", "")
    if execution:
        outcome["execution_arn"] = execution
        outcome["links"] = {"execution": execution_link(execution)}
        for trial in outcome["trials"]:
            # the console's job: through the team queue, the one Batch created (AWSBatch<name><hex>)
            training_job = trial.get("training_job_name") or trial["job_name"]
            if training_job:
                trial["links"] = job_links(execution, training_job)
    outcome["cost_usd"] = total_usd([t["cost_usd"] for t in outcome["trials"] if "cost_usd" in t])
    outcome["cost_basis"] = cost_basis()
    outcome["goodput"] = report(total([trial_account(t) for t in outcome["trials"]]))
    team = event.get("team", "")  # Validate's (a run it rejected has none)
    for line in metric_lines(outcome["trials"], environment().stack.name_prefix, int(time.time() * 1000), team):
        print(line, flush=True)  # Lambda's log delivery extracts the metrics
    notified = True
    message = {
        "TopicArn": environment().topic_arn,
        "Subject": notification_subject(outcome["status"], outcome["reason"]),
        "Message": json.dumps(outcome, indent=1),
    }
    try:
        asked_again("SNS Publish", lambda: client("sns").publish(**message))
    except (BotoCoreError, ClientError, ControlPlaneError) as error:
        log.error("notification for a %s run not sent: %s", outcome["status"], error)
        notified = False
    return {"status": outcome["status"], "reason": outcome["reason"][:REASON_MAX], "notified": notified}


def _outcome(event: dict[str, Any]) -> dict[str, Any]:
    if event.get("stage") == "run":  # the Map itself failed: trials may have launched jobs
        reason = f"the run's trials could not be followed ({_reason(event['error'])}); its jobs are stopped"
        return {"status": FAILED, "reason": reason, "trials": []}
    if "error" in event:  # Validate's Catch: the run never started
        status = REJECTED if event["error"].get("Error") == SpecInvalidError.__name__ else NOT_STARTED
        return {"status": status, "reason": _reason(event["error"]), "trials": []}
    trials = [_trial(result) for result in event["results"]]
    unfinished = [t for t in trials if t["status"] != COMPLETED]
    reasons = "; ".join(f"{t['job_name'] or 'trial'}: {t['status']}: {t['reason']}" for t in unfinished)
    return {"status": FAILED if unfinished else COMPLETED, "reason": reasons or "all trials completed", "trials": trials}


def _trial(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:  # Create gave up, or Describe failed past its retries (then: Unwatched)
        status = result.get("status", NOT_STARTED)
        reason = _reason(result["error"])
        if status == UNWATCHED:
            reason = f"could not be described ({reason}); stopped with the run"
        return {"job_name": result.get("job_name", ""), "status": status, "reason": reason}
    attempts = result.get("attempts", [])
    return {
        "job_name": result["job_name"],
        **({"training_job_name": result["training_job_name"]} if result.get("training_job_name") else {}),
        **({"queue": result["queue"]} if "queue" in result else {}),
        "status": result["status"],
        "reason": _reason_across(attempts) if len(attempts) > 1 else result.get("failure_reason", ""),
        "model_artifacts": result.get("model_artifacts", ""),
        "duration_seconds": result.get("duration_seconds", 0),
        "billable_seconds": result.get("billable_seconds", 0),
        "instance_type": result.get("instance_type", ""),
        "instance_count": result.get("instance_count", 1),
        "cost_usd": total_usd([attempt["cost_usd"] for attempt in attempts]) if attempts else result.get("cost_usd"),
        "final_metrics": result.get("final_metrics", {}),
        # every attempt: why it ended, whose failure, restart or not, the step resumed from, steps lost
        "attempts": attempts,
        "restarts": decided(attempts, RESTART),
        # Batch's preemptions of its queued job: the attempts it preempted, and one still running counted by Batch
        "preemptions": max(decided(attempts, PREEMPTED), result.get("queue", {}).get("preemptions", 0)),
        "steps_lost": sum(attempt["steps_lost"] for attempt in attempts),
        "goodput": report(trial_account(result)),
    }


def _reason_across(attempts: list[dict[str, Any]]) -> str:
    """A restarted or preempted trial's reason names every attempt's end, oldest first (the last
    decided the outcome)."""
    return "; ".join(
        f"attempt {number} ({_ended(attempt)}): {attempt['reason']}" for number, attempt in enumerate(attempts, start=1)
    )


def _ended(attempt: dict[str, Any]) -> str:
    if attempt["decision"].startswith(PREEMPTED):
        return "preempted by Batch, no failure"
    return f"{attempt['kind'] or 'no'} failure, {attempt['cause'] or attempt['status']}"


def _reason(error: dict[str, Any]) -> str:
    """A Catch's Cause is the Lambda error as JSON: {"errorMessage": ..., "errorType": ...}."""
    cause = error.get("Cause", "")
    try:
        return str(json.loads(cause).get("errorMessage", cause))
    except (ValueError, AttributeError):
        return cause or error.get("Error", "unknown error")
