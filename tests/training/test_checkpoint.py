"""Checkpoints: only complete ones are found, the newest wins, and only the last K are kept (one process;
several hosts are in test_multi_host.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from trainstack_training.checkpoint import MANIFEST, Checkpointer, DataPosition, Progress, TrainingState, problem
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
    progress = Progress(step=step, data_set="4 files sha256:0", data=DataPosition(position=step * 8, readers=1, batch=8))
    return TrainingState(model, optimizer, scheduler, progress)


def test_a_saved_checkpoint_is_complete_and_restores_weights_and_progress(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=2, context=SINGLE)
    saved = _state(step=7)
    path = checkpointer.save(saved)
    assert problem(path) is None
    restored = _state(step=0)
    assert checkpointer.load(checkpointer.resume_step(), restored) == path
    assert restored.progress.step == 7
    assert restored.progress.every_data_set == {"4 files sha256:0": DataPosition(position=56, readers=1, batch=8)}
    for a, b in zip(saved.model.parameters(), restored.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_checkpoint_without_its_manifest_is_ignored(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=3, context=SINGLE)
    checkpointer.save(_state(step=5))
    newer = checkpointer.save(_state(step=10))
    (newer / MANIFEST).unlink()  # as if the job died before the manifest was written
    assert checkpointer.resume_step() == 5


def test_a_checkpoint_with_a_truncated_file_is_ignored(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=3, context=SINGLE)
    checkpointer.save(_state(step=5))
    newer = checkpointer.save(_state(step=10))
    shard = next(p for p in newer.iterdir() if p.suffix == ".distcp")
    shard.write_bytes(shard.read_bytes()[:100])  # as if S3 restored a partial upload
    assert checkpointer.resume_step() == 5
    assert (
        problem(newer)
        == f"wrong size: {shard.name} (100 of {json.loads((newer / MANIFEST).read_text())['files'][shard.name]} bytes)"
    )


def test_a_copy_lacking_a_file_another_host_wrote_is_incomplete(tmp_path):
    path = Checkpointer(tmp_path, keep=1, context=SINGLE).save(_state(step=3))
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["files"]["__1_0.distcp"] = 1234  # the other host's shard, which this host's restore lacks
    (path / MANIFEST).write_text(json.dumps(manifest))
    assert problem(path) == "missing __1_0.distcp"


def test_only_the_last_k_complete_checkpoints_are_kept(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=2, context=SINGLE)
    for step in (1, 2, 3, 4):
        checkpointer.save(_state(step=step))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003", "step_00000004"]


def test_pruning_leaves_the_later_steps_of_a_run_a_restart_fell_back_from(tmp_path):
    checkpointer = Checkpointer(tmp_path, keep=1, context=SINGLE)
    for step in (2, 4, 6):
        checkpointer.save(_state(step=step))  # keeps step 6 only
    (tmp_path / "step_00000006" / MANIFEST).unlink()  # a restart falls back past it ...
    checkpointer.save(_state(step=5))  # ... and saves an earlier step: 6 is written again later, cleared first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000005", "step_00000006"]


def test_a_leftover_of_the_same_step_is_cleared_before_saving(tmp_path):
    stale = tmp_path / "step_00000004" / "__9_0.distcp"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"from an interrupted run with more ranks")
    path = Checkpointer(tmp_path, keep=1, context=SINGLE).save(_state(step=4))
    assert not stale.exists()
    assert "__9_0.distcp" not in json.loads((path / MANIFEST).read_text())["files"]


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert Checkpointer(tmp_path / "missing", keep=1, context=SINGLE).resume_step() is None


def test_the_plans_checkpoint_size_is_what_a_save_writes(tmp_path):
    import dataclasses

    from tests.planner.test_model_states_exact import _workload
    from trainstack.planner.memory import checkpoint_bytes

    state = _state(step=3)
    for parameter in state.model.parameters():  # AdamW makes its state on the first step
        parameter.grad = torch.zeros_like(parameter)
    state.optimizer.step()
    path = Checkpointer(tmp_path, keep=2, context=SINGLE).save(state)
    written = sum(f.stat().st_size for f in path.iterdir() if f.name != MANIFEST)
    workload = dataclasses.replace(_workload("gpt-tiny"), precision="fp32")
    planned = checkpoint_bytes(workload)
    # besides the tensors, DCP writes its metadata, each item's serialization header (about 1.3 KiB: all
    # of the difference at gpt-tiny's size, nothing at a real model's) and the data position
    items = 4 * workload.architecture.tensors + 1  # parameter, exp_avg, exp_avg_sq, step; the tied head again
    assert planned <= written <= planned + items * 2048 + 64 * 1024


@pytest.fixture
def held_writes(monkeypatch):
    """DCP's background writes wait until the test releases them: what happens meanwhile is then certain."""
    import threading

    import torch.distributed.checkpoint as dcp

    release = threading.Event()
    write_data = dcp.FileSystemWriter.write_data

    def held(self, plan, planner):
        assert release.wait(timeout=60), "the test never released the write"
        return write_data(self, plan, planner)

    monkeypatch.setattr(dcp.FileSystemWriter, "write_data", held)
    return release


def test_an_asynchronous_save_writes_the_state_as_it_was_when_the_save_returned(tmp_path, held_writes):
    checkpointer = Checkpointer(tmp_path, keep=2, context=SINGLE, asynchronous=True)
    state = _state(step=3)
    before = [p.detach().clone() for p in state.model.parameters()]
    checkpointer.save(state, wait=False)
    with torch.no_grad():
        for parameter in state.model.parameters():
            parameter.fill_(99.0)  # the next steps change the weights in place while the write waits
    held_writes.set()
    checkpointer.wait()
    restored = _state(step=0)
    checkpointer.load(checkpointer.resume_step(), restored)
    for saved, loaded in zip(before, restored.model.parameters(), strict=True):
        assert torch.equal(saved, loaded)


def test_an_asynchronous_save_counts_only_once_its_manifest_is_written(tmp_path, held_writes):
    checkpointer = Checkpointer(tmp_path, keep=3, context=SINGLE, asynchronous=True)
    held_writes.set()
    checkpointer.save(_state(step=5), wait=False)
    checkpointer.wait()
    held_writes.clear()
    in_flight = checkpointer.save(_state(step=10), wait=False)
    assert problem(in_flight) is not None  # a kill now resumes from step 5
    assert checkpointer.resume_step() == 5
    held_writes.set()
    checkpointer.wait()
    assert problem(in_flight) is None
    assert checkpointer.resume_step() == 10
    assert checkpointer.last_saved_step == 10


def test_a_save_waits_for_the_one_in_flight_before_it_starts(tmp_path, held_writes, monkeypatch):
    import threading

    import torch.distributed.checkpoint as dcp

    started = []  # each write as it starts: its checkpoint, and whether step 5's was complete by then
    held_write = dcp.FileSystemWriter.write_data

    def write_data(self, plan, planner):
        started.append((Path(self.path).name, problem(tmp_path / "step_00000005") is None))
        return held_write(self, plan, planner)

    monkeypatch.setattr(dcp.FileSystemWriter, "write_data", write_data)
    checkpointer = Checkpointer(tmp_path, keep=3, context=SINGLE, asynchronous=True)
    checkpointer.save(_state(step=5), wait=False)  # its write is held
    later = _state(step=10)
    second = threading.Thread(target=checkpointer.save, args=(later,), daemon=True)  # synchronous
    second.start()
    second.join(timeout=2)
    assert second.is_alive() and not checkpointer.path(10).exists()  # not begun while step 5's write is held
    held_writes.set()
    second.join(timeout=60)
    assert not second.is_alive()
    assert started == [("step_00000005", False), ("step_00000010", True)]


@pytest.mark.parametrize(
    ("last_save_seconds", "grace_left", "saves"),
    [
        (None, 10.0, True),  # no save yet this run: nothing else to rely on
        (30.0, None, True),  # rank 0 got no signal of its own: the grace is unknown
        (30.0, 110.0, True),
        (110.0, 110.0, True),
        (130.0, 110.0, False),  # would be SIGKILLed mid-write: the last completed checkpoint stands
    ],
)
def test_a_stop_saves_unless_the_last_save_took_longer_than_the_grace_left(last_save_seconds, grace_left, saves):
    from trainstack_training.trainer import save_fits_grace

    assert save_fits_grace(last_save_seconds, grace_left) is saves
