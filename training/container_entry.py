"""PID 1 of a trainstack training container: forwards SageMaker's stop signal to the training processes.

    python3 container_entry.py bash -m start_with_right_hostname.sh train   # the image's own entry

SageMaker stops a job (StopTrainingJob, spot reclaim) with SIGTERM to the container's PID 1 and
SIGKILL about 120 s later. In the framework images PID 1 would be the entry script, which ignores
the signal, and so does the toolkit's `train` under it; the training script never learns that it
should save. As PID 1 this program runs the image's entry as its child and, on SIGTERM or SIGINT,
signals the *training processes*: the processes that the launcher layer (the entry script, the
toolkit, torchrun, mpirun/orted) started. The launchers themselves are not signalled: bash and
the toolkit would die at once, and torchrun would SIGKILL its workers 30 s after forwarding (its
shutdown timeout, not adjustable in the torch versions the images ship), long before a large
model's checkpoint is written. Training processes that appear later (a stop during start-up) are
signalled as soon as they appear. As PID 1 it also reaps orphans, and exits with the entry's status.

Standard library only: it runs on whatever Python the image has, before anything is installed.
Used by the request builder (AlgorithmSpecification.ContainerEntrypoint) and as the project
image's ENTRYPOINT.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

SHELLS = ("bash", "sh", "dash")
PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")
# Processes that only start, connect or supervise the training processes (MPI reaches other
# hosts through ssh and their sshd, which start orted there).
LAUNCHERS = frozenset(
    {
        *SHELLS,
        "start_with_right_hostname.sh",
        "train",  # the SageMaker training toolkit's console script
        "torchrun",
        "torch.distributed.run",
        "mpirun",
        "orterun",
        "prterun",
        "orted",
        "prted",
        "smddprun",
        "smddpmprun",
        "ssh",
        "sshd",
    }
)
POLL_SECONDS = 0.2


def _log(message: str) -> None:
    print(f"trainstack container entry: {message}", file=sys.stderr, flush=True)


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def program(argv: list[str]) -> str:
    """The name of what a process runs: the script's or module's name when an interpreter or a
    shell runs one, else the executable's (a process title such as `sshd: root@notty` counts as sshd)."""
    if not argv:
        return ""
    name = os.path.basename(argv[0].split(":", 1)[0].split(" ", 1)[0])
    interpreter = name.startswith("python")
    if not interpreter and name not in SHELLS:
        return name
    arguments = iter(argv[1:])
    for arg in arguments:
        if interpreter and arg == "-m":
            return next(arguments, name)
        if arg == "-c":
            return name
        if interpreter and arg in PYTHON_OPTIONS_WITH_VALUE:
            next(arguments, None)
        elif not arg.startswith("-"):
            return os.path.basename(arg)
    return name


def training_processes(root: int, processes: dict[int, tuple[int, list[str]]]) -> list[int]:
    """Descendants of `root` that are not launchers and whose parent is `root` or a launcher.

    `processes` maps pid -> (parent pid, argv). Children of a training process (data loader
    workers) are left to it: they share its command line and its fate."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, frontier = [], list(children.get(root, []))
    while frontier:
        pid = frontier.pop()
        if program(processes[pid][1]) in LAUNCHERS:
            frontier.extend(children.get(pid, []))
        else:
            found.append(pid)
    return sorted(found)


def _process_table() -> dict[int, tuple[int, list[str]]]:
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            argv = _argv(pid)
            if argv:  # zombies and kernel threads have no command line
                table[pid] = (_parent(pid), argv)
    return table


def main(command: list[str]) -> int:
    if not command:
        _log("usage: container_entry.py COMMAND [ARG...]")
        return 2
    requested: list[str] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: requested.append(signal.Signals(signum).name))
    signal.signal(signal.SIGINT, lambda signum, frame: requested.append(signal.Signals(signum).name))
    child = subprocess.Popen(command)
    signalled: set[int] = set()
    status = None
    while status is None:
        # Reap every exited child: as PID 1 we inherit orphans, and the entry's exit ends the container.
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            if pid == child.pid:
                status = os.waitstatus_to_exitcode(wait_status)
        if requested and status is None:
            if not signalled:
                _log(f"{requested[0]} received; forwarding it to the training processes")
            for pid in training_processes(os.getpid(), _process_table()):
                if pid not in signalled:
                    signalled.add(pid)
                    _log(f"SIGTERM -> {pid} {' '.join(_argv(pid))[:200]}")
                    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                        os.kill(pid, signal.SIGTERM)
        time.sleep(POLL_SECONDS)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
