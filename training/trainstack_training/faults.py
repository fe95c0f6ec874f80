"""Interruptions and failures, the way SageMaker delivers and reads them.

SageMaker stops a job (user stop, spot reclaim, max runtime) with SIGTERM and about 120 seconds
before SIGKILL; the handler only sets a flag, and the loop saves a checkpoint at the next step
boundary and exits cleanly. A failure's reason goes to `<output_dir>/failure`, which becomes the
job's FailureReason (first 1,024 characters).

For tests, a fault can be injected into a real run (`FaultHooks`): `TRAINSTACK_INJECT_HANG=<rank>:<step>`
makes that rank stop for good where it would load the data of that step, as a rank stuck on a hung
file system read does; `TRAINSTACK_INJECT_NAN=<rank>:<step>` makes that rank's loss NaN at that step,
as a bad batch or an overflow does; `TRAINSTACK_FREEZE=<layer>` makes a layer's gradients vanish.
They are honoured only where `TRAINSTACK_TWIN=1` says the process runs in the local twin (or a test
standing in for it), never on SageMaker, where a hang would idle a billed cluster: Validate refuses
TRAINSTACK_* names in a spec's environment, and a malformed value is ignored with a warning.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from trainstack_contract import fault_hooks

if TYPE_CHECKING:  # torch only where the hooks act on tensors
    import torch


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


@dataclass(frozen=True)
class FaultHooks:
    """The test-only faults this rank injects, read once at start; none outside the twin."""

    hang_at: int | None = None
    nan_at: int | None = None
    frozen_layer: str | None = None  # e.g. blocks.1: its gradients scaled to 1e-9 on every rank

    @classmethod
    def read(cls, rank: int, environ: Mapping[str, str] | None = None) -> FaultHooks:
        environ = os.environ if environ is None else environ
        if environ.get(fault_hooks.TWIN) != "1":
            return cls()
        return cls(
            _rank_step(environ, fault_hooks.INJECT_HANG, rank),
            _rank_step(environ, fault_hooks.INJECT_NAN, rank),
            environ.get(fault_hooks.FREEZE) or None,
        )

    def install(self, named_parameters: Iterable[tuple[str, torch.nn.Parameter]], layer_of: Callable[[str], str]) -> FaultHooks:
        if self.frozen_layer:
            for name, parameter in named_parameters:
                if layer_of(name) == self.frozen_layer:
                    parameter.register_hook(lambda grad: grad * 1e-9)
        return self

    def before_batch(self, step: int) -> None:
        if step == self.hang_at:
            hang_forever()

    def loss(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        return loss * float("nan") if step == self.nan_at else loss


def _rank_step(environ: Mapping[str, str], name: str, rank: int) -> int | None:
    """`<rank>:<step>` for this rank's step; None for another rank's, or a malformed value (warned)."""
    value = environ.get(name, "")
    if not value:
        return None
    target, _, step = value.partition(":")
    if not (target.isdigit() and step.isdigit()):
        logging.getLogger("trainstack").warning("%s=%r ignored: expected <rank>:<step>", name, value)
        return None
    return int(step) if int(target) == rank else None


def hang_forever() -> NoReturn:
    while True:
        time.sleep(3600)
