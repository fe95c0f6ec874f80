"""Open FSDP2 builds the model whole on rank 0 only: every other rank builds it on the meta device
(no storage, no weights read) and receives its shards and buffers from rank 0, ending with exactly
the model it would have built itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from tests.training.launch import free_port
from trainstack_contract.config import TrainConfig
from trainstack_training.distributed import DistContext
from trainstack_training.models import build_model
from trainstack_training.strategies import builds_on_meta, parallelize

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
SEED = 7


def _shard(rank: int, port: int, model: str, activation_checkpointing: bool, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    context = DistContext(rank=rank, local_rank=rank, world_size=2, device=torch.device("cpu"), backend="gloo")
    config = TrainConfig(strategy="fsdp", model=model, seed=SEED, activation_checkpointing=activation_checkpointing)
    torch.manual_seed(config.seed)
    on_meta = builds_on_meta(config, context)
    built = build_model(config.model, on_meta=on_meta)
    devices = {parameter.device.type for parameter in built.parameters()}
    parallel = parallelize(built, config, context)
    weights = get_model_state_dict(parallel.module, options=StateDictOptions(full_state_dict=True))
    buffers = {name.replace("_checkpoint_wrapped_module.", ""): b.clone() for name, b in parallel.module.named_buffers()}
    torch.save({"on_meta": on_meta, "devices": devices, "weights": weights, "buffers": buffers}, out / f"rank{rank}.pt")
    dist.destroy_process_group()


def _sharded_on_two_ranks(model: str, out: Path, activation_checkpointing: bool = False) -> list[dict]:
    mp.spawn(_shard, args=(free_port(), model, activation_checkpointing, out), nprocs=2)
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


def _built_alone(model: str) -> torch.nn.Module:
    torch.manual_seed(SEED)
    return build_model(model)


def _assert_same_model(result: dict, reference: torch.nn.Module) -> None:
    expected = reference.state_dict()
    assert set(result["weights"]) <= set(expected)
    for name, tensor in result["weights"].items():
        assert torch.equal(tensor, expected[name]), name
    assert result["buffers"].keys() == dict(reference.named_buffers()).keys()
    for name, buffer in reference.named_buffers():
        assert torch.equal(result["buffers"][name], buffer), name


@pytest.mark.parametrize(
    ("model", "activation_checkpointing"),
    [("gpt-tiny", False), ("gpt-tiny", True), ("hf:hf_configs/llama-tiny", False)],
    ids=["gpt-tied-head", "gpt-checkpointed-blocks", "llama-rotary-buffers"],
)
def test_ranks_other_than_0_build_on_meta_and_end_with_rank_0s_model(tmp_path, model, activation_checkpointing):
    rank0, rank1 = _sharded_on_two_ranks(model, tmp_path, activation_checkpointing)

    assert (rank0["on_meta"], rank0["devices"]) == (False, {"cpu"})
    assert (rank1["on_meta"], rank1["devices"]) == (True, {"meta"})
    reference = _built_alone(model)
    _assert_same_model(rank0, reference)
    _assert_same_model(rank1, reference)


def test_pretrained_weights_are_read_on_rank_0_and_reach_every_rank(tmp_path):
    pretrained = _built_alone("hf:hf_configs/llama-tiny")
    with torch.no_grad():
        for parameter in pretrained.parameters():
            parameter.add_(1.0)  # unlike any seeded init
    pretrained.hf.save_pretrained(tmp_path / "weights")

    rank0, rank1 = _sharded_on_two_ranks(f"hf:{tmp_path / 'weights'}", tmp_path)

    assert rank1["devices"] == {"meta"}
    _assert_same_model(rank0, pretrained)
    _assert_same_model(rank1, pretrained)
