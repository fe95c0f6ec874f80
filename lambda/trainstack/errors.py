"""Errors the state machine matches by name (Lambda reports the exception class as the error), and
which of AWS's errors are the control plane's own."""

from __future__ import annotations


class SpecInvalidError(Exception):
    """The spec cannot run as written; the message lists every problem. Not retried."""


class CapacityUnavailableError(Exception):
    """SageMaker refused for quota or capacity (ResourceLimitExceeded); retried with backoff."""


class ControlPlaneError(Exception):
    """An AWS API (SageMaker, Batch, S3) throttled the call, timed out or failed on its side (HTTP 5xx):
    its answer says nothing of what was asked. Retried; never taken for the job's outcome."""


def is_control_plane_error(error: BaseException) -> bool:
    """Whether an AWS call failed for the service's sake, not the request's: throttled, timed out, an
    HTTP 5xx, a lost connection. botocore's standard retry mode decides the same question before it
    retries a call; its checkers are asked here, so the codes are never typed twice."""
    from types import SimpleNamespace

    from botocore.exceptions import ClientError
    from botocore.retries import standard

    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        context = standard.RetryContext(
            attempt_number=1, parsed_response=error.response, http_response=SimpleNamespace(status_code=status)
        )
    else:
        context = standard.RetryContext(attempt_number=1, caught_exception=error)
    checkers = (standard.TransientRetryableChecker(), standard.ThrottledRetryableChecker())
    return any(checker.is_retryable(context) for checker in checkers)
