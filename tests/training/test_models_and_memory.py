"""Models stand alone; activation checkpointing trades recomputation for saved-activation memory."""

from __future__ import annotations

import torch

from trainstack_contract.config import parse_config
from trainstack_contract.model_sizes import GPT_SIZES
from trainstack_training.models import build_model
from trainstack_training.strategies.memory import apply_block_wrappers


def _loss_grads_and_saved_bytes(checkpointing: bool) -> tuple[float, list[torch.Tensor], int]:
    torch.manual_seed(0)
    model = build_model("gpt-small-bytes")
    apply_block_wrappers(model, parse_config(["--activation_checkpointing", str(checkpointing).lower()], {}))
    tokens = torch.randint(0, 256, (4, 128), generator=torch.Generator().manual_seed(1))
    saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters()], saved


def test_activation_checkpointing_gives_the_same_loss_and_gradients_with_fewer_saved_bytes():
    plain_loss, plain_grads, plain_bytes = _loss_grads_and_saved_bytes(checkpointing=False)
    ckpt_loss, ckpt_grads, ckpt_bytes = _loss_grads_and_saved_bytes(checkpointing=True)
    assert ckpt_loss == plain_loss
    for a, b in zip(plain_grads, ckpt_grads, strict=True):
        torch.testing.assert_close(a, b)
    assert ckpt_bytes < plain_bytes / 2


def test_named_gpt_sizes_have_the_parameter_counts_their_names_say():
    approximate = {"gpt-125m": 125e6, "gpt-350m": 350e6, "gpt-1.3b": 1.3e9, "gpt-7b": 6.7e9}
    assert set(approximate) <= set(GPT_SIZES)
    for name, expected in approximate.items():
        with torch.device("meta"):  # the model's own parameters, without allocating them
            model = build_model(name)
        total = sum(p.numel() for p in model.parameters())  # a tied embedding counts once
        assert 0.8 * expected < total < 1.25 * expected, (name, total)


def test_model_code_knows_nothing_of_torch_distributed():
    import inspect

    from trainstack_training.models import classifier, gpt

    for module in (gpt, classifier):
        assert "torch.distributed" not in inspect.getsource(module)


def test_classifier_learns_the_shipped_digits():
    from trainstack_training.data.images import ImageSet
    from trainstack_training.trainer import SAMPLE_DATA

    torch.manual_seed(0)
    data = ImageSet(SAMPLE_DATA / "digits")
    model = build_model("mnist-cnn")
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    images, labels = data.batch(list(range(256)))
    first = model(images, labels).item()
    for _ in range(30):
        optimizer.zero_grad()
        loss = model(images, labels)
        loss.backward()
        optimizer.step()
    assert loss.item() < first / 3


def test_smp_uses_hybrid_sharding_only_between_one_and_the_world_size():
    from torch.distributed.fsdp import ShardingStrategy

    from trainstack_training.distributed import DistContext
    from trainstack_training.models.gpt import Block
    from trainstack_training.strategies.smp import fsdp_options

    def strategy(hybrid: int, world: int) -> ShardingStrategy:
        config = parse_config(
            ["--strategy", "smp", "--mp_parameters", f'{{"hybrid_shard_degree": {hybrid}}}', "--precision", "bf16"], {}
        )
        context = DistContext(rank=0, local_rank=0, world_size=world, device=torch.device("cpu"), backend="nccl")
        options = fsdp_options(config, context, {Block})
        assert options["mixed_precision"].param_dtype == torch.bfloat16
        return options["sharding_strategy"]

    assert strategy(hybrid=8, world=32) == ShardingStrategy.HYBRID_SHARD
    assert strategy(hybrid=0, world=32) == ShardingStrategy.FULL_SHARD
    assert strategy(hybrid=32, world=32) == ShardingStrategy.FULL_SHARD
