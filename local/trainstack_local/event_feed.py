"""What `trainstack local serve` prints while it serves: one readable line per event a user of the
stack follows (a run started, a job created, a job's status changed, a run ended and why; a service
job submitted to the team queue and each of its status changes).

The lines come from the emulation's own hooks as each event happens (the bridges for executions,
the SageMaker twin for jobs), not from polling, so no transition is missed and their order is the
order of events. Service job lines come from the Batch twin's scheduler as it changes a job's status
(batch_twin.py); it follows a dispatched job's training job once a tick, so a status its training
job passes through within one tick may have no line of its own. moto's internals never reach this
output (emulator.py silences its interpreter's log)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable


class EventFeed:
    """Writes one line per event; `write` receives each line (by default, the standard output the
    feed was made with: the emulated functions redirect `sys.stdout` into their log groups while
    they run, and a job created inside CreateTrainingJob must not land in the Create function's log)."""

    def __init__(self, write: Callable[[str], None] | None = None) -> None:
        stream = sys.stdout
        self._write = write or (lambda line: (stream.write(line + "\n"), stream.flush()))
        self._lock = threading.Lock()
        self._job_status: dict[str, tuple[str, str]] = {}

    def run_started(self, execution: str) -> None:
        self._line(f"run {execution} started")

    def run_ended(self, execution: str, status: str, cause: str | None) -> None:
        self._line(f"run {execution} ended {status}" + (f": {_one_line(cause)}" if cause else ""))

    def job_created(self, job: str, instance_count: int, instance_types: list[str]) -> None:
        self._line(f"job {job} created: {instance_count} x {' or '.join(instance_types)}")

    def job_status(self, job: str, status: str, secondary: str, failure_reason: str | None = None) -> None:
        """A status change: printed when the (status, secondary status) pair differs from the last one."""
        with self._lock:
            if self._job_status.get(job) == (status, secondary):
                return
            first = job not in self._job_status
            self._job_status[job] = (status, secondary)
        if first:  # the job was just created: its creation line says so
            return
        self._line(f"job {job}: {secondary} ({status})" + (f": {_one_line(failure_reason)}" if failure_reason else ""))

    def service_job_submitted(self, job: str, queue: str, share: str | None, priority: int) -> None:
        self._line(f"service job {job} submitted to {queue}" + (f" (share {share}, priority {priority})" if share else ""))

    def service_job_status(self, job: str, status: str, reason: str | None) -> None:
        """A service job's new status, or the reason it waits at the head of its queue."""
        self._line(f"service job {job}: {status}" + (f": {_one_line(reason)}" if reason else ""))

    def _line(self, line: str) -> None:
        with self._lock:
            self._write(line)


def _one_line(text: str) -> str:
    return " ".join(text.split())
