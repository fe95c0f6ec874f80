"""The Lambda environment, read in one place, and the boto3 clients (replaceable in tests)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from trainstack.errors import ControlPlaneError, is_control_plane_error
from trainstack.stack_context import StackContext
from trainstack.workflow import FIRST_POLL_SECONDS, IN_FUNCTION_RETRY, MAX_POLL_SECONDS

T = TypeVar("T")


@dataclass(frozen=True)
class LambdaEnvironment:
    stack: StackContext
    topic_arn: str
    default_spec_key: str | None
    first_poll_seconds: int = FIRST_POLL_SECONDS
    max_poll_seconds: int = MAX_POLL_SECONDS


# Where Lambda unpacks the asset, and the folder in it holding the API models of the services whose
# newer operations the handlers call (stacks/lambda_asset.py ships them from the pinned botocore):
# the runtime's own SDK, whose version AWS does not document, may predate Batch's service jobs or
# CreateTrainingJob's MlflowConfig. botocore reads the models on AWS_DATA_PATH before its own.
LAMBDA_TASK_ROOT = "/var/task"
SERVICE_MODELS_DIR = "aws_models"


def lambda_variables(
    stack: StackContext,
    *,
    topic_arn: str,
    default_spec_key: str | None = None,
    first_poll_seconds: int | None = None,
    max_poll_seconds: int | None = None,
) -> dict[str, str]:
    """The functions' environment variables, which `environment()` reads back: one place names
    them for the stack that writes them, the handlers and the local twin (the stack's own values
    are named in `StackContext`'s table). The region is left out: Lambda sets AWS_REGION itself."""
    variables = {**stack.to_variables(), "TOPIC_ARN": topic_arn, "DEFAULT_SPEC_KEY": default_spec_key or ""}
    variables["AWS_DATA_PATH"] = f"{LAMBDA_TASK_ROOT}/{SERVICE_MODELS_DIR}"
    # Only the local emulation shortens these; a deployed stack uses the defaults.
    if first_poll_seconds is not None:
        variables["FIRST_POLL_SECONDS"] = str(first_poll_seconds)
    if max_poll_seconds is not None:
        variables["MAX_POLL_SECONDS"] = str(max_poll_seconds)
    return variables


# The environment of the function being invoked. On Lambda it is the process's own (one function per
# process); the local twin runs every function of a stack, and of several stacks, in one process, so it
# gives each invocation its function's variables here instead: one function's never leak into
# another's, nor one stack's into the next (Lambda has no shared environment to leak through).
_invocation: ContextVar[Mapping[str, str] | None] = ContextVar("invocation", default=None)


@contextmanager
def function_variables(variables: Mapping[str, str]) -> Iterator[None]:
    """Run the block as an invocation of a function configured with `variables` (the twin's Lambda)."""
    token = _invocation.set(dict(variables))
    try:
        yield
    finally:
        _invocation.reset(token)


def environment() -> LambdaEnvironment:
    variables = _invocation.get()
    return _process_environment() if variables is None else _read(variables)


@functools.cache
def _process_environment() -> LambdaEnvironment:
    return _read(os.environ)


def _read(env: Mapping[str, str]) -> LambdaEnvironment:
    return LambdaEnvironment(
        stack=StackContext.from_variables(env),
        topic_arn=env.get("TOPIC_ARN", ""),
        default_spec_key=env.get("DEFAULT_SPEC_KEY") or None,
        first_poll_seconds=int(env.get("FIRST_POLL_SECONDS", FIRST_POLL_SECONDS)),
        max_poll_seconds=int(env.get("MAX_POLL_SECONDS", MAX_POLL_SECONDS)),
    )


_factory: Callable[[str], Any] | None = None


def client(service: str) -> Any:
    """A cached boto3 client; tests swap the factory (botocore Stubber) or patch AWS (moto)."""
    if _factory is not None:
        return _factory(service)
    return _default_client(service)


@functools.cache
def _default_client(service: str) -> Any:
    import boto3

    return boto3.client(service)


def use_client_factory(factory: Callable[[str], Any] | None) -> None:
    global _factory
    _factory = factory
    _default_client.cache_clear()
    _process_environment.cache_clear()


@contextmanager
def control_plane_retried(subject: str) -> Iterator[None]:
    """An AWS call in the block that fails for the service's sake (`is_control_plane_error`) is raised
    as ControlPlaneError, its message naming `subject` and the service's code: Create's state retries
    it (workflow.CONTROL_PLANE_RETRY), Describe asks again at the next poll. Any other error passes."""
    try:
        yield
    except Exception as error:
        if not is_control_plane_error(error):
            raise
        raise ControlPlaneError(f"{subject}: {_reason(error)}") from None


def asked_again(subject: str, call: Callable[[], T]) -> T:
    """`call`, asked again after each of IN_FUNCTION_RETRY's waits while AWS fails on its side
    (`is_control_plane_error`, past botocore's own attempts); then ControlPlaneError naming `subject`.
    For a call whose failure would lose an event; local mode shortens the waits with its poll interval."""
    scale = environment().first_poll_seconds / FIRST_POLL_SECONDS
    for wait in IN_FUNCTION_RETRY.waits():
        try:
            with control_plane_retried(subject):
                return call()
        except ControlPlaneError as error:
            print(f"{error}; asking again in {wait * scale:g} s", flush=True)
            time.sleep(wait * scale)
    with control_plane_retried(subject):  # the last try: its error is the caller's
        return call()


def _reason(error: BaseException) -> str:
    response = getattr(error, "response", None)
    if not response:
        return f"{type(error).__name__}: {error}"
    code, message = response["Error"].get("Code", ""), response["Error"].get("Message", "")
    return f"{code}: {message}" if message else code
