"""Sharded checkpoints with torch.distributed.checkpoint (DCP), one protocol on one host or many.

Layout: `<checkpoint_dir>/step_00000100/` holds DCP's files and, written last and atomically,
`manifest.json` naming every file of every rank with its size. A checkpoint counts only if its
manifest exists and every listed file is present with that size. Why a manifest rather than a
directory rename: SageMaker syncs `/opt/ml/checkpoints` to S3 file by file in no guaranteed order
and restores it the same way, so a half-uploaded checkpoint can come back after a spot
interruption; the manifest check rejects it, and the previous complete checkpoint is used instead.

On several hosts each has its own `/opt/ml/checkpoints`, all synced to one S3 prefix, and a
(re)start restores the whole prefix onto every host. During a run a host's copy of a step holds
only its own ranks' files (DCP writes `__<rank>_0.distcp` per rank and `.metadata` from rank 0), so
completeness can only be judged, after a restore, against a manifest that covers every rank:
- save: on every node, local rank 0 clears a leftover of the same step and creates the directory;
  every rank writes its files; each node's local rank 0 lists what its node wrote, the lists are
  gathered, and each writes their union as the manifest into its own copy. Every copy carries the
  same manifest, so the synced prefix holds one manifest covering every rank.
- resume: each node's local rank 0 reports which steps are complete in its own copy; rank 0 takes
  the newest step complete on every host and broadcasts it. A host with a partial restore makes
  the whole job fall back to the previous complete checkpoint, and every rank loads the same step.
- prune: each node's local rank 0 keeps the last `keep` checkpoints of its own copy.

Asynchronous saves (DCP's `async_save`, as torchtitan's `async_mode`): the step loop stalls only while
DCP copies the state to host memory; the write, the manifest and the prune then go on in a thread of
this rank, and the next save (or the end of training, or a stop) waits for them first. Until its
manifest is written the checkpoint does not count, so a job killed meanwhile resumes from the one
before, exactly as after a kill during a synchronous save. The background's collectives (DCP's plan
exchange, the listings) run on a gloo group of their own, so that the loop's collectives on the
default group go on meanwhile and both stay in one order on every rank.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from trainstack_contract.metric_lines import checkpoint_line
from trainstack_training.distributed import DistContext, all_gather, barrier, from_main
from trainstack_training.metrics import print_line
from trainstack_training.safe_loading import CheckedReader, UnsafeCheckpointError, load_plain, read_dcp_metadata, refusal_in

log = logging.getLogger("trainstack")
MANIFEST = "manifest.json"
STEP_DIR = re.compile(r"^step_(\d{8})$")
ZERO1_OPTIMIZER = "zero1_optimizer.pt"


@dataclass
class DataPosition:
    """A place in one data set: examples consumed from it, and how each step read it."""

    position: int = 0
    readers: int = 1  # ranks that split each step's examples
    batch: int = 0  # examples read from it per step


@dataclass
class Progress:
    """Where the run is: optimizer steps taken, and this node's place in the data set it reads.

    `data_set` names that data set by its files. With FullyReplicated data every host reads the same
    one; with ShardedByS3Key each node reads its own, so the checkpoint keeps every node's place,
    keyed by data set: a node given the same shard set after a restart continues where that set
    stopped, whichever node it is now.
    """

    step: int = 0
    data_set: str = ""
    data: DataPosition = field(default_factory=DataPosition)
    every_data_set: dict[str, DataPosition] = field(default_factory=dict)  # every node's, as last saved or loaded


class TrainingState(Stateful):
    """Model, optimizer, scheduler and progress as one DCP state dict.

    No generator state is saved: each step seeds its generators from (seed, step, rank) (see
    `distributed.seed_step`), so nothing in a checkpoint belongs to one rank and any number of
    ranks can resume it.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        progress: Progress,
        *,
        optimizer_in_dcp: bool = True,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.progress = progress
        self.optimizer_in_dcp = optimizer_in_dcp

    def state_dict(self) -> dict[str, Any]:
        if self.optimizer_in_dcp:
            model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        else:
            model_state, optimizer_state = get_state_dict(self.model, [])[0], {}
        # Data positions travel as one JSON string: the same value on every rank (DCP keeps one copy),
        # and a load need not know in advance which data sets the checkpoint holds.
        every_data_set = {name: asdict(position) for name, position in self.progress.every_data_set.items()}
        return {
            "model": model_state,
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict(),
            "progress": {"step": self.progress.step, "data": json.dumps(every_data_set, sort_keys=True)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.optimizer_in_dcp:
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        else:
            set_state_dict(self.model, [], model_state_dict=state["model"], optim_state_dict={})
        self.scheduler.load_state_dict(state["scheduler"])
        self.progress.step = state["progress"]["step"]
        saved = json.loads(state["progress"]["data"])
        self.progress.every_data_set = {name: DataPosition(**position) for name, position in saved.items()}


class Checkpointer:
    def __init__(self, directory: str | Path, keep: int, context: DistContext, *, asynchronous: bool = False) -> None:
        self.directory = Path(directory)
        self.keep = keep
        self.context = context
        self.asynchronous = asynchronous
        # Every rank creates the group, in the same order as its other groups.
        self.group = dist.new_group(backend="gloo") if asynchronous and context.is_distributed else None
        self.pending: Future[None] | None = None
        # The last save completed by this run: how long from its start to its manifest, and its step.
        self.last_save_seconds: float | None = None
        self.last_saved_step = 0

    def path(self, step: int) -> Path:
        return self.directory / f"step_{step:08d}"

    def resume_step(self) -> int | None:
        """The newest step complete on every host (None: start afresh), the same on every rank."""
        report = self._report() if self.context.is_node_main else None
        reports = [r for r in all_gather(report, self.context) if r is not None]
        return from_main(_choose(reports) if self.context.is_main else None, self.context)

    def load(self, step: int, state: TrainingState, zero1_optimizer: torch.optim.Optimizer | None = None) -> Path:
        """Load a checkpoint as data only (safe_loading.py): a file holding anything but tensors and plain
        values is refused on every rank with UnsafeCheckpointError, one line naming it, and never unpickled."""
        path = self.path(step)
        metadata, zero1_state, refusal = None, None, None
        try:
            metadata = read_dcp_metadata(path)
            if zero1_optimizer is not None:
                # on the CPU: ZeRO copies each rank's partition to its parameters' device (the file's own
                # device tag, rank 0's GPU, would put every rank's copy on that one GPU)
                zero1_state = load_plain(path / ZERO1_OPTIMIZER)
        except UnsafeCheckpointError as error:
            refusal = str(error)
        # Each host reads its own copy: a file planted in one host's copy stops every rank, not only that host's.
        refusals = [r for r in all_gather(refusal, self.context) if r is not None]
        if refusals:
            raise UnsafeCheckpointError(refusals[0])
        try:
            dcp.load({"training": state}, storage_reader=CheckedReader(path, metadata))
        except BaseException as error:  # DCP raises every rank's errors in a CheckpointException, a BaseException
            if (refused := refusal_in(error)) is None:
                raise
            raise UnsafeCheckpointError(str(refused)) from None
        if zero1_optimizer is not None:
            zero1_optimizer.load_state_dict(zero1_state)
        return path

    def save(self, state: TrainingState, zero1_optimizer: torch.optim.Optimizer | None = None, *, wait: bool = True) -> Path:
        """Checkpoint the current step (every rank takes part). With `wait` false on an asynchronous
        checkpointer, return once the state is copied to host memory and finish in the background."""
        self.wait()
        progress = state.progress
        progress.every_data_set = dict(all_gather((progress.data_set, progress.data), self.context))
        path, step, started = self.path(progress.step), progress.step, time.monotonic()
        if self.context.is_node_main:
            # A leftover of this step from an interrupted run would mix old files into the new checkpoint.
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
        barrier(self.context)
        if zero1_optimizer is not None:  # a collective of the training group: never in the background
            _save_zero1(zero1_optimizer, path, self.context)
        if self.asynchronous and not wait:
            written = dcp.async_save({"training": state}, storage_writer=dcp.FileSystemWriter(path), process_group=self.group)
            self.pending = _in_background(lambda: self._complete(path, step, started, written))
        else:
            # storage_writer/storage_reader rather than checkpoint_id: torch 2.2's DCP knows only these.
            dcp.save({"training": state}, storage_writer=dcp.FileSystemWriter(path))
            self._complete(path, step, started)
        return path

    def wait(self, timeout: float | None = None) -> None:
        """Until the save in the background, if any, is complete (its manifest written); raises its error,
        or TimeoutError after `timeout` seconds."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result(timeout)

    def _complete(self, path: Path, step: int, started: float, written: Future[Any] | None = None) -> None:
        """After every rank's files are written: the manifest on every node, the prune, the metric line."""
        group = None if written is None else self.group
        if written is not None:
            written.result()
        barrier(self.context, group)  # every rank's files are written before any node lists them
        files: dict[str, int] = {}
        for listing in all_gather(_listing(path) if self.context.is_node_main else {}, self.context, group):
            files.update(listing)
        if self.context.is_node_main:
            write_manifest(path, files, self.context.node_rank)
            self._prune(step)
        barrier(self.context, group)
        self.last_save_seconds, self.last_saved_step = time.monotonic() - started, step
        if self.context.is_main:
            log.info("saved step_%08d in %.3f s", step, self.last_save_seconds)
            print_line(checkpoint_line(step))  # from the writer thread too

    def _step_dirs(self) -> list[tuple[int, Path]]:
        if not self.directory.is_dir():
            return []
        return sorted((int(m[1]), p) for p in self.directory.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name)))

    def _report(self) -> dict[str, Any]:
        """What this host holds: the steps complete in its copy, and why the others are not."""
        complete, problems = [], {}
        for step, path in self._step_dirs():
            reason = problem(path)
            if reason is None:
                complete.append(step)
            else:
                problems[step] = reason
        return {"host": self.context.host, "node": self.context.node_rank, "complete": complete, "problems": problems}

    def _prune(self, newest: int) -> None:
        """Keep the last `keep` finished saves up to `newest`; remove anything older, finished or not.

        A host's copy is never complete on its own during a run (it holds its own ranks' files), so
        a manifest, written only after every rank wrote, marks a finished save. Steps after
        `newest` (left by a run that got further before a restart fell back past them) stay: this
        run writes them again, clearing each first.
        """
        finished = [step for step, path in self._step_dirs() if step <= newest and (path / MANIFEST).is_file()]
        oldest_kept = finished[-self.keep :][0]
        for step, path in self._step_dirs():
            if step < oldest_kept:
                shutil.rmtree(path, ignore_errors=True)


def _in_background(work: Callable[[], None]) -> Future[None]:
    """`work` on a daemon thread: a job that fails while a save is in flight exits without waiting for it
    (its peers may be gone), as a kill during a save would; the missing manifest makes that safe."""
    future: Future[None] = Future()

    def run() -> None:
        try:
            work()
        except BaseException as error:  # handed to whoever waits for the save
            future.set_exception(error)
        else:
            future.set_result(None)

    threading.Thread(target=run, name="checkpoint-writer", daemon=True).start()
    return future


def _choose(reports: list[dict[str, Any]]) -> int | None:
    """Rank 0's decision: the newest step every host reported complete; says why newer ones were passed over."""
    common = set.intersection(*(set(report["complete"]) for report in reports))
    chosen = max(common, default=None)
    seen = set().union(*(set(report["complete"]) | set(report["problems"]) for report in reports))
    for step in sorted(s for s in seen if chosen is None or s > chosen):
        for report in reports:
            if step not in report["complete"]:
                reason = report["problems"].get(step, "not on this host at all")
                log.warning("step_%08d is incomplete on host %s (node %d): %s", step, report["host"], report["node"], reason)
    if chosen is not None:
        log.info("resuming from step_%08d, the newest checkpoint complete on every host (%d)", chosen, len(reports))
    elif seen:
        log.warning("no checkpoint is complete on every host: starting from step 0")
    return chosen


def _listing(path: Path) -> dict[str, int]:
    """Every file this node wrote into the step directory, with its size (not manifests)."""
    return {
        p.relative_to(path).as_posix(): p.stat().st_size
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.name.startswith((MANIFEST, f".{MANIFEST}"))
    }


def write_manifest(path: Path, files: dict[str, int], node: int) -> None:
    """Written last and atomically; the temporary name is per node in case hosts share one directory."""
    temporary = path / f".{MANIFEST}.{node}.tmp"
    temporary.write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    os.replace(temporary, path / MANIFEST)


def problem(path: Path) -> str | None:
    """Why this copy of a checkpoint is not complete, or None when it is."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        return f"no {MANIFEST} (the save did not finish, or it was not restored)"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError):
        return f"{MANIFEST} is unreadable"
    missing = sorted(name for name in files if not (path / name).is_file())
    if missing:
        return f"missing {', '.join(missing)}"
    wrong = sorted(
        f"{name} ({(path / name).stat().st_size} of {size} bytes)"
        for name, size in files.items()
        if (path / name).stat().st_size != size
    )
    return f"wrong size: {', '.join(wrong)}" if wrong else None


def _save_zero1(optimizer: torch.optim.Optimizer, path: Path, context: DistContext) -> None:
    """ZeRO-1 state is partitioned per rank; consolidate it so a resume may use another world size."""
    optimizer.consolidate_state_dict(to=0)
    if context.is_main:
        torch.save(optimizer.state_dict(), path / ZERO1_OPTIMIZER)


def export_model(
    model: nn.Module, model_dir: str | Path, write: Callable[[dict[str, torch.Tensor], Path], None], context: DistContext
) -> None:
    """The final model consolidated from every rank's shards (all ranks take part), then written by rank 0."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_state_dict(model, [], options=options)[0]
    if context.is_main:
        write(state, Path(model_dir))
    barrier(context)
