"""Checkpoints: only complete ones are found, the newest wins, and only the last K are kept."""

from __future__ import annotations

import warnings

import pytest
import torch

from trainstack_training.checkpoint import MANIFEST, Checkpointer, Progress, TrainingState, is_complete
from trainstack_training.distributed import DistContext
from trainstack_training.models import build_model

SINGLE = DistContext(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo")


@pytest.fixture(autouse=True)
def _quiet_single_process_dcp():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _state(step: int = 0) -> TrainingState:
    torch.manual_seed(step)
    model = build_model("gpt-tiny")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return TrainingState(model, optimizer, scheduler, Progress(step=step, position=step * 8), SINGLE)


def test_a_saved_checkpoint_is_complete_and_restores_weights_and_progress(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=2, context=SINGLE)
    saved = _state(step=7)
    path = checkpointer.save(saved)
    assert is_complete(path)
    restored = _state(step=0)
    checkpointer.load(checkpointer.latest(), restored)
    assert (restored.progress.step, restored.progress.position) == (7, 56)
    for a, b in zip(saved.model.parameters(), restored.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert restored.restored_rng


def test_a_checkpoint_without_its_manifest_is_ignored(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=3, context=SINGLE)
    good = checkpointer.save(_state(step=5))
    newer = checkpointer.save(_state(step=10))
    (newer / MANIFEST).unlink()  # as if the job died before the manifest was written
    assert checkpointer.latest() == good


def test_a_checkpoint_with_a_truncated_file_is_ignored(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=3, context=SINGLE)
    good = checkpointer.save(_state(step=5))
    newer = checkpointer.save(_state(step=10))
    shard = next(p for p in newer.iterdir() if p.suffix == ".distcp")
    shard.write_bytes(shard.read_bytes()[:100])  # as if S3 restored a partial upload
    assert checkpointer.latest() == good


def test_only_the_last_k_complete_checkpoints_are_kept(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=2, context=SINGLE)
    for step in (1, 2, 3, 4):
        checkpointer.save(_state(step=step))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003", "step_00000004"]


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert Checkpointer(tmp_path / "missing", keep=1, context=SINGLE).latest() is None
