"""What the Batch twin (batch_twin.py) accepts of a request, checked as Batch checks it: against
botocore's Batch model (types, required keys, minimums), then what the model states in documentation
only, and what the twin does not emulate. A request refused is a BatchClientError, which the bridge
answers as Batch's ClientException (HTTP 400)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import botocore.session
from botocore.model import ServiceModel
from botocore.validate import ParamValidator

from trainstack.service_jobs import (
    CAPACITY_UNIT,
    CLIENT_TOKEN_MAX,
    INSUFFICIENT_CAPACITY,
    OVER_ENVIRONMENT_CAP,
    PRIORITY_MAX,
    PRIORITY_MIN,
    RUNNABLE,
    SERVICE_JOB_TYPE,
    TIME_LIMIT_SECONDS,
)
from trainstack_local.batch_state import ServiceJob, ms

# A reason a time limit may name for which the twin, without quota shares, never blocks a job.
QUOTA_EXCEEDED = "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"
# Limits the model states in documentation only (botocore checks types, required keys and minimums).
NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
SHARE = re.compile(r"[A-Za-z0-9]{1,255}\*?")
PRIORITY_RANGE = (PRIORITY_MIN, PRIORITY_MAX)
QUEUE_PRIORITY_RANGE = (0, 1000)
ATTEMPTS_RANGE = (1, 10)
EVALUATE_ON_EXIT_MAX = 5
STATUS_REASON_PATTERN_MAX = 512
TAGS_MAX, TAG_KEY_MAX, TAG_VALUE_MAX = 50, 128, 256
FILTERS = ("JOB_NAME", "BEFORE_CREATED_AT", "AFTER_CREATED_AT", "SHARE_IDENTIFIER", "QUOTA_SHARE_NAME")


class BatchClientError(ValueError):
    """What Batch answers as ClientException (HTTP 400): a request it refuses."""


@cache  # read once: the pinned botocore's model does not change within a process
def _batch_model() -> ServiceModel:
    return botocore.session.get_session().get_service_model("batch")


def check_against_model(operation: str, params: dict[str, Any]) -> None:
    """botocore's own check of the request against the Batch model (types, required keys, minimums)."""
    report = ParamValidator().validate(params, _batch_model().operation_model(operation).input_shape)
    if report.has_errors():
        raise BatchClientError(report.generate_report())


def check_submission(params: dict[str, Any]) -> None:
    """What the model states in documentation only, and what the twin does not emulate."""
    name = params["jobName"]
    require(NAME.fullmatch(name), f"jobName {name!r}: up to 128 letters, digits, hyphens and underscores")
    require(params["serviceJobType"] == SERVICE_JOB_TYPE, f"serviceJobType must be {SERVICE_JOB_TYPE}")
    token = params.get("clientToken")
    require(token is None or len(token) <= CLIENT_TOKEN_MAX, f"clientToken: at most {CLIENT_TOKEN_MAX} characters")
    if "schedulingPriority" in params:
        require_range(params["schedulingPriority"], PRIORITY_RANGE, "schedulingPriority")
    share = params.get("shareIdentifier")
    require(share is None or SHARE.fullmatch(share), f"shareIdentifier {share!r}: up to 255 letters and digits")
    require("quotaShareName" not in params, "quotaShareName: the job queue has no quota-share scheduling policy")
    require("timeoutConfig" not in params, "timeoutConfig is not emulated; the payload's StoppingCondition bounds the job")
    retries = (params.get("preemptionConfiguration") or {}).get("preemptionRetriesBeforeTermination")
    require(retries is None or retries >= 0, f"preemptionRetriesBeforeTermination must be 0 or more; got {retries}")
    _check_retry_strategy(params.get("retryStrategy"))
    check_tags(params.get("tags"))
    try:
        payload = json.loads(params["serviceRequestPayload"])
    except ValueError:
        payload = None
    require(isinstance(payload, dict), "serviceRequestPayload must be a CreateTrainingJob request as a JSON object")


def require(condition: Any, message: str) -> None:
    if not condition:
        raise BatchClientError(message)


def require_range(value: int, bounds: tuple[int, int], name: str) -> None:
    require(bounds[0] <= value <= bounds[1], f"{name} must be between {bounds[0]} and {bounds[1]}; got {value}")


def enabled_or_disabled(value: str, name: str) -> str:
    require(value in ("ENABLED", "DISABLED"), f"{name} must be ENABLED or DISABLED")
    return value


def max_instances(limits: list[dict[str, Any]]) -> int:
    require(len(limits) == 1, "capacityLimits: the twin emulates one limit, in NUM_INSTANCES")
    limit = limits[0]
    require(
        limit.get("capacityUnit") == CAPACITY_UNIT,
        "capacityLimits: the twin emulates NUM_INSTANCES only (an instance type means quota management)",
    )
    require(limit.get("maxCapacity", 0) >= 1, "capacityLimits: maxCapacity must be at least 1")
    return int(limit["maxCapacity"])


def time_limit_action(action: dict[str, Any]) -> dict[str, Any]:
    require(action["state"] == RUNNABLE, "jobStateTimeLimitActions: state must be RUNNABLE")
    require(action["action"] == "TERMINATE", "jobStateTimeLimitActions: a SAGEMAKER_TRAINING job queue supports TERMINATE only")
    require_range(action["maxTimeSeconds"], TIME_LIMIT_SECONDS, "jobStateTimeLimitActions maxTimeSeconds")
    reasons = (INSUFFICIENT_CAPACITY, OVER_ENVIRONMENT_CAP, QUOTA_EXCEEDED)
    require(action["reason"] in reasons, f"jobStateTimeLimitActions: reason must be one of {', '.join(reasons)}")
    return dict(action)


def check_tags(tags: dict[str, str] | None) -> None:
    if not tags:
        return
    require(len(tags) <= TAGS_MAX, f"tags: at most {TAGS_MAX}")
    for key, value in tags.items():
        fits = 1 <= len(key) <= TAG_KEY_MAX and len(value) <= TAG_VALUE_MAX
        require(fits, f"tag {key!r}: a key of 1 to {TAG_KEY_MAX} characters, a value of up to {TAG_VALUE_MAX}")
        require(not key.lower().startswith("aws:"), f"tag {key!r}: the aws: prefix is reserved")


def _check_retry_strategy(strategy: dict[str, Any] | None) -> None:
    if strategy is None:
        return
    require_range(strategy["attempts"], ATTEMPTS_RANGE, "retryStrategy attempts")
    rules = strategy.get("evaluateOnExit") or []
    require(len(rules) <= EVALUATE_ON_EXIT_MAX, f"retryStrategy evaluateOnExit: at most {EVALUATE_ON_EXIT_MAX} rules")
    for rule in rules:
        require(rule.get("action") in ("RETRY", "EXIT"), "retryStrategy evaluateOnExit: action must be RETRY or EXIT")
        pattern = rule.get("onStatusReason", "*")
        require(len(pattern) <= STATUS_REASON_PATTERN_MAX, f"onStatusReason: at most {STATUS_REASON_PATTERN_MAX} characters")


def list_offset(token: str | None) -> int:
    if token is None:
        return 0
    require(token.isdigit(), "nextToken is not one ListServiceJobs returned")
    return int(token)


def job_filter(filters: list[dict[str, Any]], status: str | None) -> Callable[[ServiceJob], bool]:
    """ListServiceJobs' selection: one filter at most; jobStatus (RUNNING when absent) applies without
    one, and with SHARE_IDENTIFIER where given."""
    require(len(filters) <= 1, "Only one filter can be used at a time")
    if not filters:
        return lambda job: job.status == (status or "RUNNING")
    name, values = filters[0].get("name"), filters[0].get("values") or []
    require(name in FILTERS, f"filter name must be one of {', '.join(FILTERS)}")
    require(len(values) == 1, f"filter {name}: one value")
    value = values[0]
    if name == "JOB_NAME":
        wanted = value.lower()
        if wanted.endswith("*"):
            return lambda job: job.name.lower().startswith(wanted[:-1])
        return lambda job: job.name.lower() == wanted
    if name in ("BEFORE_CREATED_AT", "AFTER_CREATED_AT"):
        require(value.isdigit(), f"filter {name}: milliseconds since the epoch")
        bound = int(value)
        if name == "BEFORE_CREATED_AT":
            return lambda job: ms(job.created_at) <= bound
        return lambda job: ms(job.created_at) >= bound
    if name == "SHARE_IDENTIFIER":
        return lambda job: job.share == value and (status is None or job.status == status)
    return lambda job: False  # QUOTA_SHARE_NAME: the twin has no quota shares
