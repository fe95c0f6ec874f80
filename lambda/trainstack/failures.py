"""Whose failure a failed training job is: the infrastructure's (a restart on fresh instances may well
succeed), the user's (it would fail the same way again) or unknown. Pure: Describe reads the job's
FailureReason, its last secondary-status message and its exit code, and the restart policy decides.

The built-in script tags what it knows is not the user's (trainstack_contract/failure_tags.py): the
watchdog's hang and a transport failure. The rest is read from how torch, NCCL, CUDA and SageMaker
word their failures. The first matching row wins; rows are ordered from the most specific. A reason
that matches no row is unknown: restarted only when the spec's `restarts.on` lists `unknown`.
docs/restarts.md shows the table as `python -m tools.failure_table` renders it (a test compares them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trainstack.workflow import CAPACITY_FAILURE_MARKERS
from trainstack_contract.failure_tags import GLOO_PEER_GONE, STEP_TIMEOUT, TRANSPORT_ERROR

INFRASTRUCTURE = "infrastructure"
USER = "user"
UNKNOWN = "unknown"
CAPACITY = "capacity"  # no instances: the state machine's own capacity loop re-creates the job


@dataclass(frozen=True)
class FailureRow:
    kind: str
    cause: str
    pattern: str  # a case-insensitive regular expression over the failure text
    example: str  # a failure text this row reads as it (the tests check every example)


ROWS: tuple[FailureRow, ...] = (
    FailureRow(CAPACITY, "no capacity", "|".join(CAPACITY_FAILURE_MARKERS),  # plain words: no escaping needed
               "CapacityError: Unable to provision requested ML compute capacity. Please retry later."),
    # the user's, even where a collective reports it: the script said what it was
    FailureRow(USER, "invalid hyperparameters", r"invalid hyperparameters:",
               "AlgorithmError: rank 0: invalid hyperparameters: unknown hyperparameter 'max_step'"),
    FailureRow(USER, "health rule", r"health rule \S+ tripped",
               "AlgorithmError: rank 0: health rule loss_not_finite tripped at step 3: loss=nan"),
    FailureRow(USER, "unsafe checkpoint", r"\bUnsafeCheckpointError\b",  # a restart would meet the same file
               "AlgorithmError: rank 0: UnsafeCheckpointError: step_00000006/.metadata: refused, not unpickled: it holds "
               "more than tensors and plain data (Unsupported global: GLOBAL builtins.exec), and unpickling it could run code"),
    FailureRow(USER, "NCCL misuse", r"ncclInvalidUsage|ncclInvalidArgument",
               "AlgorithmError: rank 0: TransportError: DistBackendError: NCCL error: invalid usage, ncclInvalidUsage"),
    FailureRow(USER, "out of memory", r"OutOfMemoryError|CUDA out of memory|Killed process .* \(python",
               "AlgorithmError: rank 3: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    FailureRow(USER, "code or environment", r"\b(ImportError|ModuleNotFoundError|SyntaxError|NameError|AttributeError|TypeError|"
               r"KeyError|IndexError|ValueError|ZeroDivisionError|NotImplementedError|AssertionError|FileNotFoundError|DataError|ConfigError|MissingSageMakerLibraryError|"
               r"EfaTransportError)\b",
               "AlgorithmError: rank 0: ModuleNotFoundError: No module named 'flash_attn'"),
    # the built-in script's tags for what is not the user's
    FailureRow(INFRASTRUCTURE, "hang", rf"\b{STEP_TIMEOUT}\b",
               f"AlgorithmError: rank 1: {STEP_TIMEOUT}: no optimizer step completed for 312 s (limit 300 s)"),
    FailureRow(INFRASTRUCTURE, "transport", rf"\b{TRANSPORT_ERROR}\b",
               f"AlgorithmError: rank 2: {TRANSPORT_ERROR}: DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
               "remote process exited or there was a network error"),
    # how NCCL, EFA and torch's launcher word a transport failure in scripts that do not tag it
    FailureRow(INFRASTRUCTURE, "transport", r"DistBackendError|DistNetworkError|ncclRemoteError|ncclSystemError|"
               r"NCCL communicator was aborted|Watchdog caught collective operation timeout|NET/OFI|"
               rf"{'|'.join(GLOO_PEER_GONE)}|RendezvousTimeoutError|RendezvousClosedError",
               "AlgorithmError: ExecuteUserScriptError: [Rank 0] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=812, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out"),
    # a GPU that failed under the job (Xid errors, ECC, fallen off the bus)
    FailureRow(INFRASTRUCTURE, "device", r"uncorrectable ECC error|fallen off the bus|\bXid\b|"
               r"CUDA error: (unspecified launch failure|unknown error|an illegal instruction)|"
               r"CUDA-capable device\(s\) is/are busy or unavailable|NVML",
               "AlgorithmError: rank 5: RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    # SageMaker's own: its internal errors, an instance it found unhealthy, its pre-training check
    FailureRow(INFRASTRUCTURE, "sagemaker", r"InternalServerError|internal (server )?error|instance.* (unhealthy|health)|"
               r"infrastructure (health )?check|InfraCheck",
               "InternalServerError: We encountered an internal error. Please try again."),
)  # fmt: skip

_COMPILED = tuple((row, re.compile(row.pattern, re.IGNORECASE)) for row in ROWS)
# The toolkit's message for a script that wrote no reason of its own: `ExecuteUserScriptError:\nExitCode 75`.
EXIT_CODE = re.compile(r"ExitCode:?\s+(-?\d+)")


@dataclass(frozen=True)
class Failure:
    kind: str  # infrastructure, user, unknown or capacity
    cause: str  # the row's cause, "exit code N" or "unrecognized"
    exit_code: int | None = None


def failure_text(description: dict[str, Any]) -> str:
    """What the classification reads: FailureReason and the last secondary status's message."""
    transitions = description.get("SecondaryStatusTransitions") or []
    last = transitions[-1].get("StatusMessage", "") if transitions else ""
    return f"{description.get('FailureReason', '')}\n{last}".strip()


def classify(text: str, restart_exit_codes: tuple[int, ...] = ()) -> Failure:
    """The failure a job's text describes. An exit code the spec lists in `restarts.exit_codes` is
    transient by the user's own word, and wins over the table (a script may exit 3 for "retry me")."""
    found = EXIT_CODE.search(text)
    exit_code = int(found.group(1)) if found else None
    if exit_code is not None and exit_code in restart_exit_codes:
        return Failure(INFRASTRUCTURE, f"exit code {exit_code}", exit_code)
    for row, pattern in _COMPILED:
        if pattern.search(text):
            return Failure(row.kind, row.cause, exit_code)
    return Failure(UNKNOWN, "unrecognized", exit_code)
