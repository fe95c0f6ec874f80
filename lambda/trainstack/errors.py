"""Errors the state machine matches by name (Lambda reports the exception class as the error)."""


class SpecInvalidError(Exception):
    """The spec cannot run as written; the message lists every problem. Not retried."""


class CapacityUnavailableError(Exception):
    """SageMaker refused for quota or capacity (ResourceLimitExceeded); retried with backoff."""


class ControlPlaneError(Exception):
    """An AWS API (SageMaker, Batch, S3) throttled the call, timed out or failed on its side (HTTP 5xx):
    its answer says nothing of what was asked. Retried; never taken for the job's outcome."""
