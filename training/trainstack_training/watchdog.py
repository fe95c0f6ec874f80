"""A stalled job ends itself instead of billing until MaxRuntime.

When no optimizer step completes for too long, the watchdog writes which ranks did not arrive to
`<output_dir>/failure` (`rank N: StepTimeout: ...`, the tag that marks a hang as the infrastructure's:
trainstack_contract.failure_tags), dumps the Python stack of every rank of its node to that rank's
stderr, and exits with `os._exit(75)` (STEP_TIMEOUT_EXIT_CODE, so that a launcher's summary names the
hang too): a rank stuck in a collective cannot be unwound, and SageMaker ends the job (and its
billing) once a training process fails.

Cheap by construction: the loop stores a monotonic timestamp once per optimizer step and a few
integers per phase into a memory-mapped file (no system call, no collective); a daemon thread
compares the timestamp with the limit about ten times per limit.

Naming the stuck rank without a collective: once one rank stops, the others soon wait for it in a
collective, so every rank stops stepping and every rank's watchdog fires. What tells them apart is
how far each got. Each rank records where it is (step, micro-step, phase) at the points of a step
where a collective may follow; the ranks behind the furthest are the ones the others wait for. The
records live under output_dir, which is local to each SageMaker host, so a rank reads only the
records of its own node: when a node's ranks all stand at the same point, the rank they wait for is
on another node (whose own watchdog names it in its log) or the network itself hangs.
"""

from __future__ import annotations

import contextlib
import enum
import faulthandler
import logging
import mmap
import os
import signal
import statistics
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from trainstack_contract import failure_tags
from trainstack_contract.config import TrainConfig
from trainstack_training.distributed import Launch
from trainstack_training.faults import write_failure

log = logging.getLogger("trainstack")

# The first steps include compilation, allocator growth and cold caches: the limit is derived from
# the median once this many step intervals are timed (until then startup_timeout applies).
WARMUP_STEPS = 5
# Steady optimizer steps vary by well under 2x (data-loading jitter, the metrics all-reduce, a
# straggler), so 20x the median is far outside normal variation yet still minutes, not hours.
STEP_TIMEOUT_FACTOR = 20.0
# Never less than five minutes: a slow S3 or FSx read or a long garbage collection must not kill a
# job whose steps take milliseconds; five minutes is still small against the hours a hung job bills.
STEP_TIMEOUT_FLOOR = 300.0
MEDIAN_WINDOW = 100  # recent intervals: the limit follows a job whose step time changes
MAX_CHECK_INTERVAL = 5.0  # seconds between checks, at most; ten checks per limit otherwise
# When two ranks of a node fire together, the one that claims the report signals the other for its
# stacks: the other waits this long so that the signal lands before it exits.
CLAIM_GRACE = 1.0
# The reporting rank dumps its own stacks this long after signalling its peers for theirs: the dumps
# share the node's log, and written at once their lines interleave into something nobody can read.
PEER_DUMP_GRACE = 0.5
STACKS_SIGNAL = signal.SIGUSR1  # dumps a rank's stacks from C: works while its main thread holds the GIL


class Point(enum.IntEnum):
    """Where a rank is, in the order every rank passes these points in a step."""

    STARTUP = 0  # process group, EFA check, model, data, resume: before the first step
    DATA = 1
    COMPUTE = 2
    OPTIMIZER = 3
    AFTER_STEP = 4  # stop check, metrics, checkpoint, final export
    FINISHED = 5


_DOING = {
    Point.STARTUP: "startup (process group, EFA check, model, data, resume)",
    Point.DATA: "loading data",
    Point.COMPUTE: "forward/backward",
    Point.OPTIMIZER: "gradient clipping and optimizer step",
    Point.AFTER_STEP: "stop check, metrics, checkpoint or export",
    Point.FINISHED: "the end of training",
}


@dataclass(frozen=True, order=True)
class Heartbeat:
    """One rank's last recorded position. Heartbeats compare in run order: step, then micro-step
    (the optimizer and later points carry micro-step = grad_accum, after every micro-step), then
    point."""

    step: int  # the optimizer step being worked on, numbered as the metric lines number them
    micro_step: int
    point: Point

    def describe(self, grad_accum: int) -> str:
        if self.point in (Point.STARTUP, Point.FINISHED):
            return _DOING[self.point]
        micro = f", micro-step {self.micro_step}" if grad_accum > 1 and self.point in (Point.DATA, Point.COMPUTE) else ""
        return f"step {self.step} ({_DOING[self.point]}{micro})"


@dataclass(frozen=True)
class Limit:
    seconds: float
    source: str  # which setting or derivation set it, for the failure reason

    def __str__(self) -> str:
        return f"{self.seconds:.0f} s, {self.source}"


def step_limit(intervals: Sequence[float], step_timeout: float, startup_timeout: float) -> Limit:
    """How long an optimizer step may take, after the first one, before the job counts as stuck:
    step_timeout when set; otherwise 20x the median of recent step intervals, at least 300 s and at
    most startup_timeout (the allowance for the slowest phase), once 5 intervals are timed."""
    if step_timeout > 0:
        return Limit(step_timeout, "step_timeout")
    if len(intervals) < WARMUP_STEPS:
        return Limit(startup_timeout, f"startup_timeout until {WARMUP_STEPS} steps are timed")
    median = statistics.median(intervals)
    seconds = min(startup_timeout, max(STEP_TIMEOUT_FLOOR, STEP_TIMEOUT_FACTOR * median))
    return Limit(
        seconds, f"{STEP_TIMEOUT_FACTOR:g} x median step {median:.3g} s, within {STEP_TIMEOUT_FLOOR:g} s..startup_timeout"
    )


def diagnose(heartbeats: Mapping[int, Heartbeat | None], grad_accum: int, node: str, other_nodes: bool) -> str:
    """Which ranks of this node the others wait for, from their heartbeats (None: no live process)."""
    furthest = max((beat for beat in heartbeats.values() if beat is not None), default=None)
    stuck = sorted(rank for rank, beat in heartbeats.items() if beat is None or beat < furthest)
    waiting = sorted(rank for rank, beat in heartbeats.items() if beat is not None and beat == furthest)
    if furthest is not None and not stuck:
        reason = f"{_ranks(waiting)} of {node} stopped at {furthest.describe(grad_accum)}" + (
            " together" if len(waiting) > 1 else ""
        )
        if other_nodes:
            reason += ", waiting for a rank on another node (its host's log names it) or for the network"
        return reason
    reason = "stuck: " + "; ".join(f"rank {rank} {_where(heartbeats[rank], grad_accum)}" for rank in stuck)
    if furthest is not None:
        reason += f"; waiting for them: {_ranks(waiting)} at {furthest.describe(grad_accum)}"
    return reason


def _where(beat: Heartbeat | None, grad_accum: int) -> str:
    return f"at {beat.describe(grad_accum)}" if beat else "with no live process (exited, or never started its watchdog)"


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(rank) for rank in ranks)


def _process_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (Linux /proc): with the pid it names one
    process, where a pid alone may since have been reused."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[19])  # field 22 of proc(5), counted after the parenthesized command name


class Heartbeats:
    """Each rank's position in a small memory-mapped file, `<output_dir>/heartbeats/rank-N`: a beat
    is a store into shared memory, and the node's other ranks read it from the page cache."""

    _IDENTITY = struct.Struct("<2q")  # pid, process start (-1 where /proc is missing)
    _POSITION = struct.Struct("<3q")  # step, micro-step, point
    SIZE = _IDENTITY.size + _POSITION.size

    def __init__(self, directory: Path, launch: Launch) -> None:
        self.directory = directory
        node = launch.rank // launch.local_world_size
        self.node_ranks = range(node * launch.local_world_size, (node + 1) * launch.local_world_size)
        self._claim = directory / f"node-{node}.claim"
        directory.mkdir(parents=True, exist_ok=True)
        if launch.local_rank == 0:
            # Left by an earlier run in this output_dir; a claim is made only minutes into a run.
            self._claim.unlink(missing_ok=True)
        path = directory / f"rank-{launch.rank}"
        start = _process_start(os.getpid())
        # Every rank rewrites its own file at start, so a peer never reads an earlier run's position.
        path.write_bytes(self._IDENTITY.pack(os.getpid(), -1 if start is None else start) + bytes(self._POSITION.size))
        with path.open("r+b") as handle:
            self._map = mmap.mmap(handle.fileno(), self.SIZE)

    def beat(self, step: int, micro_step: int, point: Point) -> None:
        self._POSITION.pack_into(self._map, self._IDENTITY.size, step, micro_step, point)

    def read_node(self) -> dict[int, tuple[int, Heartbeat] | None]:
        """Each rank of this node: its pid and position, or None when no live process wrote it."""
        node: dict[int, tuple[int, Heartbeat] | None] = {}
        for rank in self.node_ranks:
            try:
                data = (self.directory / f"rank-{rank}").read_bytes()
            except OSError:
                data = b""
            if len(data) < self.SIZE:
                node[rank] = None
                continue
            pid, start = self._IDENTITY.unpack_from(data)
            step, micro_step, point = self._POSITION.unpack_from(data, self._IDENTITY.size)
            alive = pid > 0 and (start == -1 or _process_start(pid) == start)
            node[rank] = (pid, Heartbeat(step, micro_step, Point(point))) if alive else None
        return node

    def claim(self) -> bool:
        """True for the first rank of the node to fire: it reports and dumps every rank's stacks."""
        try:
            os.close(os.open(self._claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def close(self) -> None:
        self._map.close()


class Watchdog:
    """Ends the process when no optimizer step completes within the current limit (see step_limit;
    startup_timeout before the first step and while a checkpoint or the model is being saved)."""

    def __init__(self, config: TrainConfig, launch: Launch) -> None:
        self._launch = launch
        self._output_dir = config.output_dir
        self._grad_accum = config.grad_accum
        self._step_timeout = config.step_timeout
        self._startup_timeout = config.startup_timeout
        self._node = f"node {launch.rank // launch.local_world_size}"
        self._intervals: deque[float] = deque(maxlen=MEDIAN_WINDOW)
        self._steps = 0
        self._slow_phase = False
        self._last_progress = time.monotonic()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="trainstack-watchdog", daemon=True)
        self._heartbeats: Heartbeats | None = None
        self._last_step = 0

    def start(self) -> Watchdog:
        # Before the heartbeat file exists: a peer finds this rank's pid there and may signal it.
        faulthandler.register(STACKS_SIGNAL, all_threads=True)
        try:
            self._heartbeats = Heartbeats(Path(self._output_dir) / "heartbeats", self._launch)
        except OSError as error:  # e.g. a laptop run with the SageMaker default output_dir
            log.warning("watchdog: no heartbeats (%s): a stall will name only the rank that reports it", error)
        self._last_progress = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self.reached(Point.FINISHED, self._last_step)
        self._stopped.set()
        self._thread.join()
        faulthandler.unregister(STACKS_SIGNAL)
        if self._heartbeats:
            self._heartbeats.close()

    def reached(self, point: Point, step: int, micro_step: int | None = None) -> None:
        """Record where this rank is; micro_step for DATA and COMPUTE, after every micro-step otherwise."""
        if self._heartbeats:
            self._heartbeats.beat(step, self._grad_accum if micro_step is None else micro_step, point)

    def step_completed(self, step: int) -> None:
        now = time.monotonic()
        if self._steps:  # the first step's time includes startup
            self._intervals.append(now - self._last_progress)
        self._steps += 1
        self._last_step = step
        self._last_progress = now
        self.reached(Point.AFTER_STEP, step)

    def median_step_seconds(self) -> float | None:
        """This rank's median of its recent step intervals (saves not counted); None before WARMUP_STEPS."""
        return statistics.median(self._intervals) if len(self._intervals) >= WARMUP_STEPS else None

    @contextlib.contextmanager
    def slow_phase(self) -> Iterator[None]:
        """A checkpoint save or the final export: it writes the whole state, as a resume reads it, so
        it gets startup_timeout, and its time is not counted as a step's."""
        self._last_progress = time.monotonic()
        self._slow_phase = True
        try:
            yield
        finally:
            self._last_progress = time.monotonic()
            self._slow_phase = False

    def limit(self) -> Limit:
        if self._steps == 0:
            return Limit(self._startup_timeout, "startup_timeout, before the first step")
        if self._slow_phase:
            return Limit(self._startup_timeout, "startup_timeout, while saving")
        return step_limit(list(self._intervals), self._step_timeout, self._startup_timeout)

    def _watch(self) -> None:
        while not self._stopped.wait(min(MAX_CHECK_INTERVAL, self.limit().seconds / 10)):
            idle, limit = time.monotonic() - self._last_progress, self.limit()
            if idle > limit.seconds:
                self._fire(idle, limit)

    def _fire(self, idle: float, limit: Limit) -> NoReturn:
        try:
            self._report(idle, limit)
        finally:  # whatever the report met, the process ends: a stuck collective cannot be unwound
            os._exit(failure_tags.STEP_TIMEOUT_EXIT_CODE)

    def _report(self, idle: float, limit: Limit) -> None:
        node = self._heartbeats.read_node() if self._heartbeats else {}
        if node:
            positions = {rank: entry[1] if entry else None for rank, entry in node.items()}
            other_nodes = self._launch.world_size > self._launch.local_world_size
            explanation = diagnose(positions, self._grad_accum, self._node, other_nodes)
        else:
            explanation = f"without heartbeats the other ranks of {self._node} cannot be named"
        reason = (
            f"rank {self._launch.rank}: {failure_tags.STEP_TIMEOUT}: "
            f"no optimizer step completed for {idle:.0f} s (limit {limit}); "
            f"{explanation}; the stacks of {self._node}'s ranks are in its log"
        )
        print(f"trainstack: {reason}", file=sys.stderr, flush=True)
        if self._heartbeats is None or self._heartbeats.claim():
            write_failure(self._output_dir, reason)
            for rank, entry in node.items():
                if entry and rank != self._launch.rank:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(entry[0], STACKS_SIGNAL)
            time.sleep(PEER_DUMP_GRACE)
            faulthandler.dump_traceback(all_threads=True)
        else:
            time.sleep(CLAIM_GRACE)  # the claiming rank's signal dumps this rank's stacks
        sys.stdout.flush()  # metric lines already printed: os._exit skips the interpreter's own flush
