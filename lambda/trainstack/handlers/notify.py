"""Notify: one SNS message per run (every trial's status, failure reason, model URI, duration),
and the run's overall outcome for the state machine's final Choice."""

from __future__ import annotations

import json
from typing import Any

from trainstack.handlers.environment import client, environment


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    if "error" in event:  # Validate's Catch: the run never started
        status = "Rejected" if event["error"].get("Error") == "SpecInvalidError" else "NotStarted"
        outcome = {"status": status, "reason": _reason(event["error"]), "trials": []}
    else:
        trials = [_trial(result) for result in event["results"]]
        unfinished = [t for t in trials if t["status"] != "Completed"]
        reasons = "; ".join(f"{t['job_name'] or 'trial'}: {t['status']}: {t['reason']}" for t in unfinished)
        outcome = {
            "status": "Failed" if unfinished else "Completed",
            "reason": reasons or "all trials completed",
            "trials": trials,
        }
    subject = f"trainstack run {outcome['status']}: {outcome['reason']}"[:100]
    client("sns").publish(TopicArn=environment().topic_arn, Subject=subject, Message=json.dumps(outcome, indent=1))
    return {"status": outcome["status"], "reason": outcome["reason"][:32000]}


def _trial(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:  # Create gave up (capacity) or failed
        return {"job_name": result.get("job_name", ""), "status": "NotStarted", "reason": _reason(result["error"])}
    return {
        "job_name": result["job_name"],
        "status": result["status"],
        "reason": result.get("failure_reason", ""),
        "model_artifacts": result.get("model_artifacts", ""),
        "duration_seconds": result.get("duration_seconds", 0),
        "billable_seconds": result.get("billable_seconds", 0),
    }


def _reason(error: dict[str, Any]) -> str:
    """A Catch's Cause is the Lambda error as JSON: {"errorMessage": ..., "errorType": ...}."""
    cause = error.get("Cause", "")
    try:
        return str(json.loads(cause).get("errorMessage", cause))
    except (ValueError, AttributeError):
        return cause or error.get("Error", "unknown error")
