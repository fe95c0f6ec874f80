"""Sharded checkpoints with torch.distributed.checkpoint (DCP), found on resume only when complete.

Layout: `<checkpoint_dir>/step_00000100/` holds DCP's files and, written last and atomically,
`manifest.json` naming every file with its size. A checkpoint counts only if its manifest exists
and every listed file is present with that size. Why a manifest rather than a directory rename:
SageMaker syncs `/opt/ml/checkpoints` to S3 file by file in no guaranteed order and restores it the
same way, so a half-uploaded checkpoint can come back after a spot interruption; the manifest
check rejects it, and the previous complete checkpoint is used instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from trainstack_training.distributed import DistContext, barrier

MANIFEST = "manifest.json"
STEP_DIR = re.compile(r"^step_(\d{8})$")
ZERO1_OPTIMIZER = "zero1_optimizer.pt"


@dataclass
class Progress:
    """Where the run is: optimizer steps taken and examples consumed by the whole job."""

    step: int = 0
    position: int = 0
    world_size: int = 1
    global_batch: int = 0


class TrainingState(Stateful):
    """Model, optimizer, scheduler, progress and per-rank RNG as one DCP state dict."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        progress: Progress,
        context: DistContext,
        *,
        optimizer_in_dcp: bool = True,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.progress = progress
        self.context = context
        self.optimizer_in_dcp = optimizer_in_dcp
        self.restored_rng = False

    def state_dict(self) -> dict[str, Any]:
        if self.optimizer_in_dcp:
            model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        else:
            model_state, optimizer_state = get_state_dict(self.model, [])[0], {}
        return {
            "model": model_state,
            "optimizer": optimizer_state,
            "scheduler": self.scheduler.state_dict(),
            "progress": asdict(self.progress),
            # Keyed by rank: plain tensors with one key would be deduplicated to rank 0's copy.
            f"rng_rank{self.context.rank}": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.optimizer_in_dcp:
            set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        else:
            set_state_dict(self.model, [], model_state_dict=state["model"], optim_state_dict={})
        self.scheduler.load_state_dict(state["scheduler"])
        for key, value in state["progress"].items():
            setattr(self.progress, key, value)
        rng = state.get(f"rng_rank{self.context.rank}")
        if rng is not None:
            torch.set_rng_state(rng)
            self.restored_rng = True


class Checkpointer:
    def __init__(self, directory: str | Path, keep: int, context: DistContext) -> None:
        self.directory = Path(directory)
        self.keep = keep
        self.context = context

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        if not self.directory.is_dir():
            return None
        for path in sorted(self._step_dirs(), reverse=True):
            if is_complete(path):
                return path
        return None

    def save(self, state: TrainingState, zero1_optimizer: torch.optim.Optimizer | None = None) -> Path:
        path = self.directory / f"step_{state.progress.step:08d}"
        if self.context.is_main:
            if path.exists():  # an incomplete leftover of the same step from an interrupted run
                shutil.rmtree(path)
            path.mkdir(parents=True)
        barrier(self.context)
        dcp.save({"training": state}, checkpoint_id=str(path))
        if zero1_optimizer is not None:
            _save_zero1(zero1_optimizer, path, self.context)
        barrier(self.context)
        if self.context.is_main:
            write_manifest(path)
            self._prune()
        barrier(self.context)
        return path

    def load(self, path: Path, state: TrainingState, zero1_optimizer: torch.optim.Optimizer | None = None) -> None:
        dcp.load({"training": state}, checkpoint_id=str(path))
        if zero1_optimizer is not None:
            zero1_optimizer.load_state_dict(torch.load(path / ZERO1_OPTIMIZER, weights_only=False))

    def _step_dirs(self) -> list[Path]:
        return [p for p in self.directory.iterdir() if p.is_dir() and STEP_DIR.match(p.name)]

    def _prune(self) -> None:
        complete = sorted(p for p in self._step_dirs() if is_complete(p))
        for stale in complete[: -self.keep]:
            shutil.rmtree(stale, ignore_errors=True)


def write_manifest(path: Path) -> None:
    files = {
        p.relative_to(path).as_posix(): p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file() and p.name != MANIFEST
    }
    temporary = path / f".{MANIFEST}.tmp"
    temporary.write_text(json.dumps({"files": files}, indent=1, sort_keys=True))
    os.replace(temporary, path / MANIFEST)


def is_complete(path: Path) -> bool:
    manifest = path / MANIFEST
    if not manifest.is_file():
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError):
        return False
    return all((path / name).is_file() and (path / name).stat().st_size == size for name, size in files.items())


def _save_zero1(optimizer: torch.optim.Optimizer, path: Path, context: DistContext) -> None:
    """ZeRO-1 state is partitioned per rank; consolidate it so a resume may use another world size."""
    optimizer.consolidate_state_dict(to=0)
    if context.is_main:
        torch.save(optimizer.state_dict(), path / ZERO1_OPTIMIZER)


def export_model(model: nn.Module, model_dir: str | Path, describe: Callable[[], dict[str, Any]], context: DistContext) -> None:
    """The final model as one consolidated state dict plus the config that rebuilds it (rank 0)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_state_dict(model, [], options=options)[0]
    if context.is_main:
        directory = Path(model_dir)
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(state, directory / "model.pt")
        (directory / "config.json").write_text(json.dumps(describe(), indent=2, sort_keys=True))
    barrier(context)
