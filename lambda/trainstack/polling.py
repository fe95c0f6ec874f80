"""Waiting for what AWS or the twin does: the one loop that reads until a condition holds or a
deadline passes, for the CLI, the local pipeline and the tests (the functions never wait: the
state machine's Wait states do)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(read: Callable[[], T], done: Callable[[T], bool] = bool, *, timeout: float, what: str, interval: float = 0.2) -> T:
    """Call `read` every `interval` seconds until `done` holds for what it returned, and return that.
    Past `timeout` seconds, TimeoutError says what did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)
