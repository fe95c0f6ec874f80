"""Interruptions and failures, the way SageMaker delivers and reads them.

SageMaker stops a job (user stop, spot reclaim, max runtime) with SIGTERM and about 120 seconds
before SIGKILL; the handler only sets a flag, and the loop saves a checkpoint at the next step
boundary and exits cleanly. A failure's reason goes to `<output_dir>/failure`, which becomes the
job's FailureReason (first 1,024 characters).

For tests, a fault can be injected into a real run: `TRAINSTACK_INJECT_HANG=<rank>:<step>` makes
that rank stop for good where it would load the data of that step, as a rank stuck on a hung file
system read does; `TRAINSTACK_INJECT_NAN=<rank>:<step>` makes that rank's loss NaN at that step,
as a bad batch or an overflow does; `TRAINSTACK_FREEZE=<layer>` makes a layer's gradients vanish.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import NoReturn


class StopRequest:
    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""

    def install(self) -> StopRequest:
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        self.signal_name = signal.Signals(signum).name


def write_failure(output_dir: str | Path, reason: str) -> None:
    """Record the first failure only: the first reason is the cause, later ones are echoes."""
    path = Path(output_dir) / "failure"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x") as handle:
            handle.write(reason[:1024])
    except (FileExistsError, OSError):
        pass


def injected_hang(rank: int) -> int | None:
    """The step at which this rank is to hang, from TRAINSTACK_INJECT_HANG=<rank>:<step>; None for none."""
    target, _, step = os.environ.get("TRAINSTACK_INJECT_HANG", "").partition(":")
    return int(step) if target and int(target) == rank else None


def injected_nan(rank: int) -> int | None:
    """The step whose loss this rank makes NaN, from TRAINSTACK_INJECT_NAN=<rank>:<step>; None for none."""
    target, _, step = os.environ.get("TRAINSTACK_INJECT_NAN", "").partition(":")
    return int(step) if target and int(target) == rank else None


def injected_frozen_layer() -> str | None:
    """A layer (`blocks.1`) whose gradients are scaled to 1e-9 on every rank, as a layer that has
    stopped learning: TRAINSTACK_FREEZE=<layer>; None for none."""
    return os.environ.get("TRAINSTACK_FREEZE") or None


def hang_forever() -> NoReturn:
    while True:
        time.sleep(3600)
