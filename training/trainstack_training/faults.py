"""Interruptions and failures, the way SageMaker delivers and reads them.

SageMaker stops a job (user stop, spot reclaim, max runtime) with SIGTERM and about 120 seconds
before SIGKILL; the handler only sets a flag, and the loop saves a checkpoint at the next step
boundary and exits cleanly. A failure's reason goes to `<output_dir>/failure`, which becomes the
job's FailureReason (first 1,024 characters).

For tests, a fault can be injected into a real run (`FaultHooks`): `TRAINSTACK_INJECT_HANG=<rank>:<step>`
makes that rank stop for good where it would load the data of that step, as a rank stuck on a hung
file system read does; `TRAINSTACK_INJECT_NAN=<rank>:<step>` makes that rank's loss NaN at that step,
as a bad batch or an overflow does; `TRAINSTACK_INJECT_TRANSPORT_ERROR=<rank>:<step>` makes that
rank fail at the start of that step with the error NCCL reports when a peer or the network went away
(its peers then see their transport fail, as they would); `TRAINSTACK_FREEZE=<layer>` makes a
layer's gradients vanish. They are honoured only where `TRAINSTACK_TWIN=1` says the process runs in
the local twin (or a test standing in for it), never on SageMaker, where a hang would idle a billed
cluster: Validate refuses TRAINSTACK_* names in a spec's environment, and a malformed value is
ignored with a warning.
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

from trainstack_contract import failure_tags, fault_hooks

if TYPE_CHECKING:  # torch only where the hooks act on tensors
    import torch


class StopRequest:
    def __init__(self) -> None:
        self.requested = False
        self.signal_name = ""
        self.received_at: float | None = None  # time.monotonic() at the signal: SageMaker's grace counts from it

    def install(self) -> StopRequest:
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        self.signal_name = signal.Signals(signum).name
        if self.received_at is None:
            self.received_at = time.monotonic()


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
    transport_error_at: int | None = None

    @classmethod
    def read(cls, rank: int, environ: Mapping[str, str] | None = None) -> FaultHooks:
        environ = os.environ if environ is None else environ
        if environ.get(fault_hooks.TWIN) != "1":
            return cls()
        return cls(
            hang_at=_rank_step(environ, fault_hooks.INJECT_HANG, rank),
            nan_at=_rank_step(environ, fault_hooks.INJECT_NAN, rank),
            frozen_layer=environ.get(fault_hooks.FREEZE) or None,
            transport_error_at=_rank_step(environ, fault_hooks.INJECT_TRANSPORT_ERROR, rank),
        )

    def install(self, named_parameters: Iterable[tuple[str, torch.nn.Parameter]], layer_of: Callable[[str], str]) -> FaultHooks:
        if self.frozen_layer:
            for name, parameter in named_parameters:
                if layer_of(name) == self.frozen_layer:
                    parameter.register_hook(lambda grad: grad * 1e-9)
        return self

    def before_batch(self, step: int) -> None:
        """Where a step begins on this rank: before its data is read and before any of its collectives."""
        if step == self.hang_at:
            hang_forever()
        if step == self.transport_error_at:
            import torch.distributed  # lazily, as below

            raise torch.distributed.DistBackendError(NCCL_REMOTE_ERROR)

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


# What ProcessGroupNCCL raises (as DistBackendError) when a collective fails because a peer exited or
# the network failed: C10D_NCCL_CHECK (pytorch torch/csrc/distributed/c10d/NCCLUtils.hpp) writes
# "NCCL error in: <file>:<line>, " + ncclGetErrorString(ncclRemoteError) (NCCL src/init.cc) + ", NCCL
# version <v>", then getNcclErrorDetailStr's interpretation of ncclRemoteError and ncclGetLastError
# (NCCLUtils.cpp). The last error is the network plugin's warning, here aws-ofi-nccl's for EFA, abridged.
NCCL_REMOTE_ERROR = (
    "NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
    "remote process exited or there was a network error, NCCL version 2.21.5\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
    "Last error:\n"
    "NET/OFI Request error"
)


def is_transport_error(error: BaseException) -> bool:
    """Whether an exception is a collective failing in the transport (NCCL, EFA, a peer process or host
    that vanished) rather than the user's code, data or configuration: the failures a restart can cure."""
    import torch.distributed  # lazily: this module serves write_failure and StopRequest without torch

    if isinstance(error, torch.distributed.DistBackendError | torch.distributed.DistNetworkError):
        return True
    return isinstance(error, RuntimeError) and any(marker in str(error) for marker in failure_tags.GLOO_PEER_GONE)


def hang_forever() -> NoReturn:
    while True:
        time.sleep(3600)
