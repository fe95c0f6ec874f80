"""Errors the state machine matches by name (Lambda reports the exception class as the error)."""

# The error codes with which AWS APIs throttle; the handlers raise ThrottledError for them.
THROTTLING = ("ThrottlingException", "Throttling", "TooManyRequestsException")


class SpecInvalidError(Exception):
    """The spec cannot run as written; the message lists every problem. Not retried."""


class CapacityUnavailableError(Exception):
    """SageMaker refused for quota or capacity (ResourceLimitExceeded); retried with backoff."""


class ThrottledError(Exception):
    """An AWS API (SageMaker, Batch) throttled the call; retried quickly."""
