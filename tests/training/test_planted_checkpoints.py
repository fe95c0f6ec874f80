"""Checkpoints are data, not code: a pickle planted in a complete checkpoint (the ZeRO-1 optimizer state,
DCP's metadata, an item of a .distcp file) is refused by the resume, which names the file and why, and
never unpickled: the code it carries does not run (one process here; under torchrun, on this torch
and on the images' own, in test_planted_checkpoint_runs.py). Nor do pickles in an input channel's
Hugging Face folder or image arrays."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch.distributed.optim import ZeroRedundancyOptimizer

from tests.training.planted import RunsCode, fix_manifest, plant
from trainstack_contract.config import ConfigError
from trainstack_training.checkpoint import Checkpointer, DataPosition, Progress, TrainingState, problem
from trainstack_training.data.images import ImageSet
from trainstack_training.distributed import DistContext
from trainstack_training.models import build_model

SINGLE = DistContext(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo")


@pytest.fixture(autouse=True)
def _quiet_single_process_dcp():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _state(step: int = 0, *, optimizer_in_dcp: bool = True) -> TrainingState:
    torch.manual_seed(step)
    model = build_model("gpt-tiny")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    progress = Progress(step=step, data_set="4 files sha256:0", data=DataPosition(position=step * 8, readers=1, batch=8))
    return TrainingState(model, optimizer, scheduler, progress, optimizer_in_dcp=optimizer_in_dcp)


def _refusal(
    checkpointer: Checkpointer, state: TrainingState, zero1: torch.optim.Optimizer | None = None
) -> BaseException | None:
    """What loading the newest checkpoint raised (None: it loaded)."""
    step = checkpointer.resume_step()
    assert step is not None  # the planted checkpoint still counts as complete: only the load can refuse it
    try:
        checkpointer.load(step, state, zero1)
    except BaseException as error:  # whatever it raised: DCP wraps its ranks' errors in a BaseException
        return error
    return None


def _assert_refused(error: BaseException | None, file: Path, marker: Path) -> None:
    """The code did not run; the resume was refused in one line that names the file and what it holds."""
    assert not marker.exists(), "the planted pickle ran"
    assert error is not None, "the planted checkpoint was loaded"
    assert type(error).__name__ == "UnsafeCheckpointError", repr(error)
    reason = str(error)
    assert "\n" not in reason  # one line: the job's failure reason
    assert reason.startswith(f"{file}: ") and "exec" in reason, reason


@pytest.mark.parametrize("what", ["metadata", "bytes", "tensor"])
def test_a_pickle_planted_in_dcps_files_is_refused_and_never_runs(tmp_path, what):
    checkpointer = Checkpointer(tmp_path / "checkpoints", keep=2, context=SINGLE)
    path = checkpointer.save(_state(step=4))
    marker = tmp_path / "marker"
    name = plant(what, path, marker)
    assert problem(path) is None
    _assert_refused(_refusal(checkpointer, _state()), path / name, marker)


@pytest.fixture
def one_rank_group(tmp_path):
    """ZeroRedundancyOptimizer needs a process group: one rank of gloo."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _zero1(state: TrainingState) -> ZeroRedundancyOptimizer:
    return ZeroRedundancyOptimizer(state.model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)


def test_a_pickle_planted_as_the_zero1_optimizer_state_is_refused_and_never_runs(tmp_path, one_rank_group):
    checkpointer = Checkpointer(tmp_path / "checkpoints", keep=2, context=SINGLE)
    saved = _state(step=4, optimizer_in_dcp=False)
    path = checkpointer.save(saved, _zero1(saved))
    marker = tmp_path / "marker"
    plant("zero1", path, marker)
    restored = _state(optimizer_in_dcp=False)
    _assert_refused(_refusal(checkpointer, restored, _zero1(restored)), path / "zero1_optimizer.pt", marker)


def test_the_zero1_optimizer_state_loads_back_as_saved(tmp_path, one_rank_group):
    # what the script saves is plain tensors and numbers: a weights-only load takes it whole
    checkpointer = Checkpointer(tmp_path / "checkpoints", keep=2, context=SINGLE)
    saved = _state(step=4, optimizer_in_dcp=False)
    zero1 = _zero1(saved)
    saved.model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long)).backward()
    zero1.step()
    checkpointer.save(saved, zero1)
    restored = _state(optimizer_in_dcp=False)
    restored_zero1 = _zero1(restored)
    checkpointer.load(checkpointer.resume_step(), restored, restored_zero1)
    zero1.consolidate_state_dict(to=0)
    restored_zero1.consolidate_state_dict(to=0)
    expected, actual = zero1.state_dict(), restored_zero1.state_dict()
    assert actual["param_groups"] == expected["param_groups"]
    for key, state in expected["state"].items():
        for name, value in state.items():
            assert torch.equal(actual["state"][key][name], value), (key, name)


def test_dcp_metadata_naming_a_file_outside_the_checkpoint_is_refused(tmp_path):
    checkpointer = Checkpointer(tmp_path / "checkpoints", keep=2, context=SINGLE)
    path = checkpointer.save(_state(step=4))
    metadata = pickle.loads((path / ".metadata").read_bytes())
    for info in metadata.storage_data.values():
        info.relative_path = "../../elsewhere.distcp"
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    fix_manifest(path, ".metadata")
    error = _refusal(checkpointer, _state())
    assert error is not None, "the checkpoint was loaded"
    assert type(error).__name__ == "UnsafeCheckpointError", repr(error)
    assert str(error).startswith(f"{path / '.metadata'}: ") and "../../elsewhere.distcp" in str(error)


def test_the_payload_runs_code_when_unpickled(tmp_path):
    # the tests above mean something only if the planted pickle does run when loaded as before
    marker = tmp_path / "marker"
    pickle.loads(pickle.dumps(RunsCode(marker)))
    assert marker.read_text() == "planted code ran"


def test_pickled_weights_beside_a_stray_safetensors_file_are_never_read(tmp_path, monkeypatch):
    # an input channel's Hugging Face folder: safetensors only, even where another *.safetensors file sits
    # beside a pytorch_model.bin (transformers 4.37, on the torch 2.2 image, loads the .bin then, even
    # with use_safetensors=True)
    marker = tmp_path / "marker"
    build_model("hf:hf_configs/llama-tiny").hf.config.save_pretrained(tmp_path / "model")
    torch.save(RunsCode(marker), tmp_path / "model" / "pytorch_model.bin")
    save_file({"lora": torch.zeros(1)}, tmp_path / "model" / "adapter_model.safetensors")
    read, load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda file, *args, **kwargs: read.append(file) or load(file, *args, **kwargs))
    with pytest.raises(ConfigError, match=r"holds adapter_model\.safetensors but no model\.safetensors or .*; save them"):
        build_model(f"hf:{tmp_path / 'model'}")
    assert read == [] and not marker.exists()


def test_an_image_channel_holding_a_pickle_is_refused_unread(tmp_path):
    marker = tmp_path / "marker"
    np.save(tmp_path / "images.npy", np.array([RunsCode(marker)], dtype=object), allow_pickle=True)
    np.save(tmp_path / "labels.npy", np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="Python objects"):
        ImageSet(tmp_path)
    assert not marker.exists()
